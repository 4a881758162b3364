// The lab's fixed addressing (TEST-NET only) and the WCCP bucket of an address.
export const CLIENT_ADDRESS = '203.0.113.10';
export const GW_CLIENT_ADDRESS = '203.0.113.1';
/** The router address engines register with (br-eng in the gateway namespace). */
export const ROUTER_ADDRESS = '192.0.2.1';
export const ENGINE_PREFIX = '192.0.2.0/24';
/** The origin answers on every address of this prefix (AnyIP local route in the origin namespace). */
export const ORIGIN_PREFIX = '198.51.100.0/24';
/** The origin's eth0 address, used as the gateway's next hop for ORIGIN_PREFIX (on-link, static neighbour). */
export const ORIGIN_NEXT_HOP = '198.51.100.254';

/** Engine i (1-based) is 192.0.2.(10+i): engine 1 = 192.0.2.11. */
export function engineAddress(i: number): string {
  if (!Number.isInteger(i) || i < 1 || i > 200) throw new RangeError(`engine index must be 1..200, got ${i}`);
  return `192.0.2.${10 + i}`;
}

/** The WCCP bucket of a destination: the draft's hash of one 32-bit key equals the XOR of its four bytes. */
export function bucketOf(ip: string): number {
  const parts = ip.split('.').map(Number);
  if (parts.length !== 4 || parts.some((b) => !Number.isInteger(b) || b < 0 || b > 255)) {
    throw new RangeError(`not an IPv4 address: ${ip}`);
  }
  return parts.reduce((h, b) => h ^ b, 0);
}

/** The one origin address (in ORIGIN_PREFIX) whose bucket is b. */
export function originAddressForBucket(b: number): string {
  if (!Number.isInteger(b) || b < 0 || b > 255) throw new RangeError(`bucket must be 0..255, got ${b}`);
  return `198.51.100.${198 ^ 51 ^ 100 ^ b}`;
}

/** All 256 origin addresses, index = bucket. */
export function originAddresses(): string[] {
  return Array.from({ length: 256 }, (_, b) => originAddressForBucket(b));
}
