// The WCCP hash (draft section 5.6.2 / 4.11.1) and the router's per-packet bucket lookup.
import type { BucketTable, EngineAddress, AlternateFlags } from './table.js';
import { ServiceFlag } from '../vocabulary.js';
import { ipv4ToNumber, ipv6Words } from '../address.js';
import { BucketsError } from './errors.js';

// The hash-field flags of Service Info (draft 5.6.2): the primary four, and the same four shifted up by 8 (alternate).
const PRIMARY_FIELDS =
  ServiceFlag.SRC_IP_HASH | ServiceFlag.DST_IP_HASH | ServiceFlag.SRC_PORT_HASH | ServiceFlag.DST_PORT_HASH;
const ALTERNATE_FIELDS = PRIMARY_FIELDS << 8;

/**
 * The fields of a new connection the hash can use. Addresses as their 32-bit hash input (`addressKey`): an IPv4
 * address as its big-endian integer, an IPv6 address folded.
 */
export interface Flow {
  readonly sourceIp: number;
  readonly destinationIp: number;
  readonly sourcePort: number;
  readonly destinationPort: number;
}

/** The draft's hash of a 32-bit key: h ^= h >> 16; h ^= h >> 8; h & 0xFF. */
export function wccpHash(key: number): number {
  let h = key >>> 0;
  h ^= h >>> 16;
  h ^= h >>> 8;
  return h & 0xff;
}

/** The same value, seen another way: the XOR of the key's four bytes (what the nft data plane computes). */
export function xorOfBytes(key: number): number {
  const k = key >>> 0;
  return ((k >>> 24) ^ (k >>> 16) ^ (k >>> 8) ^ k) & 0xff;
}

// Flags 0x1/0x2/0x4/0x8 (primary) and 0x100/0x200/0x400/0x800 (alternate) select the same four fields.
function keyOf(flow: Flow, fieldBits: number): number {
  let key = 0;
  if (fieldBits & 0x1) key ^= flow.sourceIp;
  if (fieldBits & 0x2) key ^= flow.destinationIp;
  if (fieldBits & 0x4) key ^= flow.sourcePort & 0xffff;
  if (fieldBits & 0x8) key ^= flow.destinationPort & 0xffff;
  return key >>> 0;
}

/**
 * The primary hash key: the XOR of the fields the service flags select. A standard service (web-cache) carries no
 * hash flags in its Service Info; it hashes the destination IP, so no primary field selected means destination IP.
 */
export function primaryKey(flow: Flow, serviceFlags: number): number {
  const fields = serviceFlags & PRIMARY_FIELDS;
  return keyOf(flow, fields === 0 ? ServiceFlag.DST_IP_HASH : fields);
}

/** The alternate hash key (flags 0x100..0x800), or null when the service selects no alternate field. */
export function alternateKey(flow: Flow, serviceFlags: number): number | null {
  const fields = (serviceFlags & ALTERNATE_FIELDS) >>> 8;
  return fields === 0 ? null : keyOf(flow, fields);
}

/**
 * The 128 bits of an IPv6 address folded into the draft's 32-bit hash input: the XOR of its four 32-bit words
 * (docs/buckets.md, "IPv6 addresses"). Its hash is then the XOR of all 16 bytes, which the nft data plane computes.
 */
export function foldIpv6(words: readonly [number, number, number, number]): number {
  return (words[0] ^ words[1] ^ words[2] ^ words[3]) >>> 0;
}

/** An address's 32-bit hash input: IPv4 as is, IPv6 folded. Throws a BucketsError for anything else. */
export function addressKey(address: string): number {
  const v4 = ipv4ToNumber(address);
  if (v4 !== null) return v4;
  const v6 = ipv6Words(address);
  if (v6 !== null) return foldIpv6(v6);
  throw new BucketsError('bad-address', `"${address}" is not an IPv4 or IPv6 address`);
}

/** The bucket of a destination address (IPv4 or IPv6) under the common destination-only key (standard web-cache). */
export function bucketOf(destinationIp: string | number): number {
  return wccpHash(typeof destinationIp === 'string' ? addressKey(destinationIp) : destinationIp);
}

export type BucketLookup =
  /** Forward normally: the bucket (primary, or alternate when the A flag sent us there) has no engine. */
  | { readonly kind: 'unassigned'; readonly bucket: number }
  | { readonly kind: 'primary'; readonly bucket: number; readonly engine: EngineAddress }
  /** The primary bucket carried the A flag: the alternate key's bucket decided. */
  | {
      readonly kind: 'alternate';
      readonly primaryBucket: number;
      readonly bucket: number;
      readonly engine: EngineAddress;
    };

/**
 * The router's lookup (draft 4.11.1): unassigned -> forward normally; an engine without A -> that engine; with A ->
 * hash the alternate fields and look again (unassigned -> forward normally). A service with the A flag set on a bucket
 * but no alternate field selected keeps the primary bucket's engine.
 */
export function lookupBucket(
  table: Pick<BucketTable, 'buckets'>,
  flow: Flow,
  serviceFlags: number,
  alternate?: AlternateFlags,
): BucketLookup {
  const bucket = wccpHash(primaryKey(flow, serviceFlags));
  const engine = table.buckets[bucket] ?? null;
  if (engine === null) return { kind: 'unassigned', bucket };
  if (alternate?.[bucket] !== true) return { kind: 'primary', bucket, engine };
  const key = alternateKey(flow, serviceFlags);
  if (key === null) return { kind: 'primary', bucket, engine };
  const second = wccpHash(key);
  const secondEngine = table.buckets[second] ?? null;
  if (secondEngine === null) return { kind: 'unassigned', bucket: second };
  return { kind: 'alternate', primaryBucket: bucket, bucket: second, engine: secondEngine };
}
