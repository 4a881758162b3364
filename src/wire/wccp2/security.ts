// WCCPv2 MD5 security (draft §5.6.1): MD5 over the password NUL-padded to 8 bytes followed by the whole message with
// the 16-byte digest field zeroed. Squid does the same (wccp2_update_md5_security / wccp2_check_security).
import { createHash, timingSafeEqual } from 'node:crypto';
import { ComponentType, HEADER_LENGTH, MD5_DIGEST_LENGTH, MD5_PASSWORD_MAX, SecurityOption } from './constants.js';

/** A password the protocol cannot carry (more than 8 bytes). */
export class Wccp2PasswordError extends Error {
  override readonly name = 'Wccp2PasswordError';
  constructor(readonly byteLength: number) {
    super(`WCCPv2 MD5 password is ${byteLength} bytes; the protocol allows at most ${MD5_PASSWORD_MAX}`);
  }
}

/** Thrown by signMessage when the bytes have no MD5 Security Info component to fill. */
export class Wccp2NoMd5ComponentError extends Error {
  override readonly name = 'Wccp2NoMd5ComponentError';
  constructor() {
    super('cannot sign a WCCPv2 message without an MD5 SECURITY_INFO component (option 1, length 20)');
  }
}

export function paddedPassword(password: string): Buffer {
  const p = Buffer.from(password, 'utf8');
  if (p.length > MD5_PASSWORD_MAX) throw new Wccp2PasswordError(p.length);
  const out = Buffer.alloc(MD5_PASSWORD_MAX);
  p.copy(out);
  return out;
}

/** Offset of the 16-byte MD5 digest in a message, or null when it has no well-formed MD5 Security Info component. */
export function md5DigestOffset(bytes: Uint8Array): number | null {
  if (bytes.length < HEADER_LENGTH) return null;
  let pos = HEADER_LENGTH;
  // Bounded: every step advances by at least 4 bytes.
  while (pos + 4 <= bytes.length) {
    const type = ((bytes[pos] as number) << 8) | (bytes[pos + 1] as number);
    const length = ((bytes[pos + 2] as number) << 8) | (bytes[pos + 3] as number);
    if (pos + 4 + length > bytes.length) return null;
    if (type === ComponentType.SECURITY_INFO) {
      const option = Buffer.from(bytes.buffer, bytes.byteOffset + pos + 4, Math.min(4, length));
      const isMd5 = length === 4 + MD5_DIGEST_LENGTH && option.readUInt32BE(0) === SecurityOption.MD5;
      return isMd5 ? pos + 8 : null;
    }
    pos += 4 + length;
  }
  return null;
}

function digestOf(bytes: Uint8Array, digestAt: number, password: string): Buffer {
  const zeroed = Buffer.from(bytes);
  zeroed.fill(0, digestAt, digestAt + MD5_DIGEST_LENGTH);
  return createHash('md5').update(paddedPassword(password)).update(zeroed).digest();
}

/** A copy of `bytes` with the MD5 digest computed and filled in. */
export function signMessage(bytes: Uint8Array, password: string): Buffer {
  const at = md5DigestOffset(bytes);
  if (at === null) throw new Wccp2NoMd5ComponentError();
  const out = Buffer.from(bytes);
  digestOf(bytes, at, password).copy(out, at);
  return out;
}

/** True when the message carries an MD5 Security Info component whose digest matches the password. */
export function verifyMessage(bytes: Uint8Array, password: string): boolean {
  const at = md5DigestOffset(bytes);
  if (at === null) return false;
  const expected = digestOf(bytes, at, password);
  const got = Buffer.from(bytes.buffer, bytes.byteOffset + at, MD5_DIGEST_LENGTH);
  return timingSafeEqual(expected, got);
}
