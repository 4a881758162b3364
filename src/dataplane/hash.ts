// The WCCP hash of a destination-only key (draft 5.6.2: h ^= h >> 16; h ^= h >> 8; h & 0xFF) equals the XOR of the
// key's four bytes, whatever the byte order the key was loaded in. The data plane needs it to explain a bucket and
// to prove the kernel computes the same thing.

/** The four bytes of a dotted-quad IPv4 address, or null when it is not one. */
export function parseIPv4(address: string): [number, number, number, number] | null {
  const parts = address.split('.');
  if (parts.length !== 4) return null;
  const bytes: number[] = [];
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p)) return null;
    const n = Number(p);
    if (n > 255) return null;
    bytes.push(n);
  }
  return [bytes[0] ?? 0, bytes[1] ?? 0, bytes[2] ?? 0, bytes[3] ?? 0];
}

/** The draft's hash of a 32-bit key. */
export function wccpHash(key: number): number {
  let h = key >>> 0;
  h ^= h >>> 16;
  h ^= h >>> 8;
  return h & 0xff;
}

/** The bucket (0-255) of an IPv4 address used as the whole hash key. Throws on a malformed address. */
export function bucketOfAddress(address: string): number {
  const b = parseIPv4(address);
  if (b === null) throw new TypeError(`not an IPv4 address: ${JSON.stringify(address)}`);
  return wccpHash(((b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]) >>> 0);
}
