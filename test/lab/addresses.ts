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

// Dual-stack labs (`createLab({ ipv6: true })`): the documentation prefix 2001:db8::/32 beside the TEST-NET ranges.
export const CLIENT_ADDRESS6 = '2001:db8:c::10';
export const GW_CLIENT_ADDRESS6 = '2001:db8:c::1';
export const CLIENT_PREFIX6 = '2001:db8:c::/64';
/** The gateway's address on br-eng, the engines' IPv6 default route (engines register over IPv4 all the same). */
export const ROUTER_ADDRESS6 = '2001:db8:e::1';
export const ENGINE_PREFIX6 = '2001:db8:e::/64';
/** The origin answers on every address of this prefix (AnyIP local route), as on ORIGIN_PREFIX for IPv4. */
export const ORIGIN_PREFIX6 = '2001:db8:5100::/64';
/** The link-local addresses of the gateway's o0 and the origin's eth0: next hops with static neighbours. */
export const GW_O0_LINK_LOCAL = 'fe80::1';
export const ORIGIN_LINK_LOCAL = 'fe80::2';

/** Engine i's IPv6 address: 2001:db8:e::(10+i), the same digits as its IPv4 192.0.2.(10+i). */
export function engineAddress6(i: number): string {
  engineAddress(i);
  return `2001:db8:e::${10 + i}`;
}

/** Origin address n (0..65535) in ORIGIN_PREFIX6: 2001:db8:5100::<n in hex>. */
export function originAddress6(n: number): string {
  if (!Number.isInteger(n) || n < 0 || n > 0xffff) throw new RangeError(`origin index must be 0..65535, got ${n}`);
  return `2001:db8:5100::${n.toString(16)}`;
}

/** A URL's host part: an IPv6 literal in brackets. */
export function urlHost(address: string): string {
  return address.includes(':') ? `[${address}]` : address;
}

/**
 * The bucket of an IPv6 destination (docs/buckets.md, "IPv6 addresses"): the hash of the XOR of its four 32-bit
 * words, which is the XOR of its 16 bytes. Written here from the documented rule, apart from src/buckets/hash.ts.
 */
export function bucketOf6(ip: string): number {
  const [head = '', tail, ...more] = ip.split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = [
    ...left,
    ...Array<string>(tail === undefined ? 0 : 8 - left.length - right.length).fill('0'),
    ...right,
  ];
  if (more.length > 0 || groups.length !== 8 || groups.some((g) => !/^[0-9a-f]{1,4}$/i.test(g)))
    throw new RangeError(`not an IPv6 address (without a dotted tail): ${ip}`);
  return groups.map((g) => parseInt(g, 16)).reduce((h, g) => h ^ (g >> 8) ^ (g & 0xff), 0);
}

/** The one address 2001:db8:5100::<n>, n < 256, whose bucket is b (the last byte alone moves the bucket). */
export function originAddressForBucket6(b: number): string {
  if (!Number.isInteger(b) || b < 0 || b > 255) throw new RangeError(`bucket must be 0..255, got ${b}`);
  return originAddress6(bucketOf6(originAddress6(0)) ^ b);
}

/** 256 IPv6 origin addresses, index = bucket. */
export function originAddresses6(): string[] {
  return Array.from({ length: 256 }, (_, b) => originAddressForBucket6(b));
}
