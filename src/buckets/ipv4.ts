// IPv4 addresses as the buckets layer sees them: dotted quads at the edges, 32-bit big-endian integers inside.
import { ipv4ToNumber } from '../address.js';
import { BucketsError } from './errors.js';

/** Parses a dotted quad into an unsigned 32-bit integer in network (big-endian) order: 1.2.3.4 -> 0x01020304. */
export function parseIpv4(address: string): number {
  const value = ipv4ToNumber(address);
  if (value === null) throw new BucketsError('bad-address', `"${address}" is not an IPv4 address in dotted-quad form`);
  return value;
}

/**
 * Squid's order (wccp2SortCacheList): it compares raw `in_addr.s_addr`, which holds the address in network byte order,
 * as a host integer. On little-endian hosts that reads the LAST octet as the most significant: 1.2.3.4 -> 0x04030201.
 */
export function squidSortKey(address: string): number {
  const v = parseIpv4(address);
  return (((v & 0xff) << 24) | (((v >>> 8) & 0xff) << 16) | (((v >>> 16) & 0xff) << 8) | (v >>> 24)) >>> 0;
}
