// Bounded reading and plain writing of big-endian fields. The reader never reads past its end: it stops with a
// DecodeError (carried by Stop, which only the message decoder catches).
import { ipv4Bytes } from '../../address.js';
import type { DecodeError } from '../decode-error.js';
import type { Hex, Ipv4 } from './types.js';

/** Internal: unwinds a decode to decodeMessage with the error it reports. Never leaves this module set. */
export class Stop {
  constructor(readonly error: DecodeError) {}
}

export interface Where {
  message: string;
  component: string;
}

export function fail(where: Where, offset: number, reason: string, detail: string): never {
  throw new Stop({
    kind: 'decode-error',
    protocol: 'WCCP2',
    message: where.message,
    component: where.component,
    offset,
    reason,
    detail,
  });
}

export class Reader {
  constructor(
    readonly buf: Uint8Array,
    public pos: number,
    public readonly end: number,
    public readonly where: Where,
  ) {}

  get remaining(): number {
    return this.end - this.pos;
  }

  need(n: number, what: string): void {
    if (n > this.remaining) {
      fail(
        this.where,
        this.pos,
        'truncated',
        `${what} needs ${n} bytes but only ${this.remaining} remain in ${this.where.component}`,
      );
    }
  }

  u8(what: string): number {
    this.need(1, what);
    return this.buf[this.pos++] as number;
  }

  u16(what: string): number {
    this.need(2, what);
    const p = this.pos;
    this.pos += 2;
    return ((this.buf[p] as number) << 8) | (this.buf[p + 1] as number);
  }

  u32(what: string): number {
    this.need(4, what);
    const p = this.pos;
    this.pos += 4;
    return (
      (((this.buf[p] as number) << 24) >>> 0) +
      (((this.buf[p + 1] as number) << 16) | ((this.buf[p + 2] as number) << 8) | (this.buf[p + 3] as number))
    );
  }

  ipv4(what: string): Ipv4 {
    this.need(4, what);
    const p = this.pos;
    this.pos += 4;
    return `${this.buf[p]}.${this.buf[p + 1]}.${this.buf[p + 2]}.${this.buf[p + 3]}`;
  }

  bytes(n: number, what: string): Uint8Array {
    this.need(n, what);
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  hex(n: number, what: string): Hex {
    return Buffer.from(this.bytes(n, what)).toString('hex');
  }

  /** A count of fixed-size elements: bounded by a protocol limit (if any) and by the bytes left. */
  count(what: string, elementSize: number, limit: number | null, limitReason: string): number {
    const at = this.pos;
    const n = this.u32(what);
    if (limit !== null && n > limit) {
      fail(this.where, at, limitReason, `${what} is ${n}; the protocol allows at most ${limit}`);
    }
    if (n * elementSize > this.remaining) {
      fail(
        this.where,
        at,
        'truncated',
        `${what} is ${n} (${n * elementSize} bytes) but only ${this.remaining} bytes remain in ${this.where.component}`,
      );
    }
    return n;
  }
}

/** Thrown by the encoder when a value cannot be put on the wire (a programming or configuration error). */
export class Wccp2EncodeError extends Error {
  override readonly name = 'Wccp2EncodeError';
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(`cannot encode WCCPv2 ${field}: ${detail}`);
  }
}

export class Writer {
  private readonly parts: number[] = [];

  get length(): number {
    return this.parts.length;
  }

  private uint(v: number, bytes: number, field: string): void {
    const max = 2 ** (8 * bytes) - 1;
    if (!Number.isInteger(v) || v < 0 || v > max) {
      throw new Wccp2EncodeError(field, `${v} is not an integer in 0..${max}`);
    }
    for (let i = bytes - 1; i >= 0; i--) this.parts.push(Math.floor(v / 2 ** (8 * i)) & 0xff);
  }

  u8(v: number, field: string): void {
    this.uint(v, 1, field);
  }
  u16(v: number, field: string): void {
    this.uint(v, 2, field);
  }
  u32(v: number, field: string): void {
    this.uint(v, 4, field);
  }

  ipv4(a: Ipv4, field: string): void {
    for (const b of parseIpv4(a, field)) this.parts.push(b);
  }

  raw(bytes: Iterable<number>): void {
    for (const b of bytes) this.parts.push(b);
  }

  hex(h: Hex, field: string, exactBytes?: number): void {
    const b = parseHex(h, field);
    if (exactBytes !== undefined && b.length !== exactBytes) {
      throw new Wccp2EncodeError(field, `needs exactly ${exactBytes} bytes, got ${b.length}`);
    }
    this.raw(b);
  }

  /** Zero bytes up to the next multiple of 4. */
  pad4(): void {
    while (this.parts.length % 4 !== 0) this.parts.push(0);
  }

  toBuffer(): Buffer {
    return Buffer.from(this.parts);
  }
}

export function parseIpv4(a: Ipv4, field: string): number[] {
  const bytes = ipv4Bytes(a);
  if (bytes === null) throw new Wccp2EncodeError(field, `'${a}' is not a dotted-quad IPv4 address`);
  return bytes;
}

export function parseHex(h: Hex, field: string): Buffer {
  if (!/^(?:[0-9a-fA-F]{2})*$/.test(h)) throw new Wccp2EncodeError(field, `'${h}' is not an even-length hex string`);
  return Buffer.from(h, 'hex');
}
