// The nft language the nft and ingress backends share (pure: nothing here runs a command): a service reduced to
// its plan, the names of per-service and per-slot objects, the service match, the exact WCCP hash's static maps and
// chains, mask maps, and the closed table the nft and userland backends leave while wccpd is down.
//
// The exact WCCP hash runs in the kernel: the draft's hash of a 32-bit key is the XOR of its four bytes, and nftables
// cannot XOR two values, so two small static maps do it (loaded once by start()):
//   @byte:   a byte -> the same value (nft will not store a raw payload byte in meta priority without a lookup)
//   @nibxor: acc . y -> acc ^ y for any byte acc and any in-place nibble y (0-15 or 16 x 0-15): 256 x 31 = 7,936
// A static chain per hash field starts from the key's first byte and folds in the six other nibbles, one lookup
// each, reading them straight from the header (`@nh,136,8 & 0xf0`): bucket = XOR of the address bytes, the draft's
// hash exactly. The accumulator is `meta priority` (skb->priority), never a mark: ip_forward() sets the priority of
// every forwarded packet from its TOS after prerouting, so using it as scratch there changes nothing another tool
// sees, where the packet mark and the conntrack mark belong to other tools too (multi-WAN, QoS). Of those two marks
// wccpd writes only its field (names.ts, MARK_MASK), and only with constants (`ct mark set ct mark and ~M or V`, in
// one small chain per engine slot reached through a verdict map), so every other bit survives.
import { BUCKET_COUNT } from '../../buckets/table.js';
import type { EngineAddress } from '../../buckets/table.js';
import type { MaskValueSet, ServiceRedirect } from '../redirector.js';
import { numberToIpv4 } from '../../address.js';
import { DataplaneError } from '../errors.js';
import { CLOSED_TABLE, MARK_MASK, NFT_FAMILY, NFT_TABLE, hex } from './names.js';

const T = `${NFT_FAMILY} ${NFT_TABLE}`;
const G = `${NFT_FAMILY} ${CLOSED_TABLE}`;
const HASH_FIELD_BITS = 0x000f; // source/destination IP and port hash bits of the service flags
const M = hex(MARK_MASK);

/** One service, reduced to what the ruleset needs. */
export interface ServicePlan {
  readonly serviceId: number;
  /** Overlapping services are matched highest priority first (equal: lowest id first). */
  readonly priority: number;
  readonly protocol: number;
  readonly ports: readonly number[];
  readonly portsAreSource: boolean;
  /** Which address is the hash key: destination (standard) or source. */
  readonly hashField: 'daddr' | 'saddr';
  readonly clientInterfaces: readonly string[];
  /** Every engine of the group: traffic they source is never redirected (draft 4.10). */
  readonly engines: readonly EngineAddress[];
  /** 256 entries: the slot of the bucket's engine, or 0 (no engine: forwarded normally, or refused while `refuse`). */
  readonly bucketSlots: readonly number[];
  /** The slot of each engine of the group in this service (its claims; per-engine counters). */
  readonly engineSlots: ReadonlyMap<EngineAddress, number>;
  /** failMode closed and no usable engine: refuse new connections of the service. */
  readonly refuse: boolean;
  /** failMode closed: while wccpd is down, the service's new connections are refused (the closed table). */
  readonly failClosed: boolean;
  /**
   * The service's objects are in the kernel already and did not change: the transaction rewrites only its hook rules
   * (the hook chains are rebuilt every time) and leaves its maps, sets and chain as they are. A change of one service
   * then costs one service's worth of nft work, not all of them (docs/dataplane.md).
   */
  readonly unchanged?: boolean;
  /** Its bucket counter set holds its 256 elements already: they are not added again (a cost at every change). */
  readonly countersExist?: boolean;
  /**
   * Mask assignment: the service classifies by these sets (in order, first match wins) instead of the hash and
   * `bucketSlots` (all 0 then). Absent for hash assignment.
   */
  readonly maskSets?: readonly MaskSetPlan[];
  /** The mask maps (set indexes) the previous transaction left for this service: deleted and written again. */
  readonly previousMaskMaps?: readonly number[];
  /** The families whose connections the service claims (absent: IPv4 only). */
  readonly families?: readonly NfFamily[];
  /**
   * IPv6 (docs/dataplane/nft.md, "IPv6"): per bucket the slot of its engine when that engine has an IPv6 next hop, 0
   * when the bucket has no engine (direct, or refused while `refuse`), REFUSE_BUCKET when its engine has no IPv6
   * next hop and the service fails closed (that engine's IPv6 connections are refused, not sent past the cache).
   */
  readonly bucketSlots6?: readonly number[];
  /** Every IPv6 address the group's engines have on their segments (their own traffic is never redirected). */
  readonly engines6?: readonly string[];
  /** Its IPv6 bucket counter set holds its 256 elements already. */
  readonly counters6Exist?: boolean;
  /** The service had IPv6 objects and has none now (families changed): they are deleted. */
  readonly dropIpv6?: boolean;
}

export type NfFamily = 'ipv4' | 'ipv6';
/** In bucketSlots6: the bucket's engine has no IPv6 next hop and the service fails closed. */
export const REFUSE_BUCKET = -1;
export const familiesOfPlan = (p: Pick<ServicePlan, 'families'>): readonly NfFamily[] => p.families ?? ['ipv4'];
export const hasIpv6 = (p: Pick<ServicePlan, 'families'>): boolean => familiesOfPlan(p).includes('ipv6');

/** The four fields a mask reads, in the draft's order: source address, destination address, source port, destination
 * port. */
export type MaskFields = readonly [number, number, number, number];

/** One Mask/Value Set, reduced to what nft needs. */
export interface MaskSetPlan {
  readonly mask: MaskFields;
  /** The distinct values the mask can produce, in the set's order (the first of equal values wins), each with its
   * engine's slot (0: none). */
  readonly values: readonly { readonly key: MaskFields; readonly slot: number }[];
}

/** The hash key a service uses, or a typed error when nft cannot compute its hash exactly. */
export function hashFieldOf(service: ServiceRedirect): 'daddr' | 'saddr' {
  const bits = service.serviceFlags & HASH_FIELD_BITS;
  if (bits === 0 || bits === 0x2) return 'daddr';
  if (bits === 0x1) return 'saddr';
  throw new DataplaneError(
    'unsupported-service',
    `service ${service.serviceId}: hash flags 0x${bits.toString(16)} (ports or several fields) cannot be computed ` +
      'by the nft backend, which hashes one address exactly; use `dataplane.backend: userland` for this service',
  );
}

/** True when at least one bucket (a mask service: one value) names an engine the group says is usable. */
export function hasUsableEngine(service: ServiceRedirect): boolean {
  const usable = new Set(service.engines);
  if (service.maskSets !== undefined) return service.maskSets.some((s) => s.values.some((v) => usable.has(v.engine)));
  return service.table.buckets.some((e) => e !== null && usable.has(e));
}

/** Reduces a service to a plan, given each engine's slot. Engines without a slot are treated as unassigned. */
export function planService(service: ServiceRedirect, slots: ReadonlyMap<EngineAddress, number>): ServicePlan {
  if (service.table.buckets.length !== BUCKET_COUNT) {
    throw new DataplaneError(
      'unsupported-service',
      `service ${service.serviceId}: bucket table has ${service.table.buckets.length} entries, expected ${BUCKET_COUNT}`,
    );
  }
  const usable = new Set(service.engines);
  const engineSlots = new Map<EngineAddress, number>();
  for (const e of service.engines) {
    const s = slots.get(e);
    if (s !== undefined) engineSlots.set(e, s);
  }
  const slotOf = (e: EngineAddress | null): number => (e !== null && usable.has(e) ? (engineSlots.get(e) ?? 0) : 0);
  if (service.maskSets !== undefined) {
    const maskSets = service.maskSets.map((set) => planMaskSet(service, set, slotOf));
    return {
      ...common(service, engineSlots),
      hashField: 'daddr',
      bucketSlots: new Array<number>(BUCKET_COUNT).fill(0),
      maskSets,
      refuse: service.failMode === 'closed' && !maskSets.some((set) => set.values.some((v) => v.slot !== 0)),
    };
  }
  const bucketSlots = service.table.buckets.map(slotOf);
  return {
    ...common(service, engineSlots),
    hashField: hashFieldOf(service),
    bucketSlots,
    refuse: service.failMode === 'closed' && !bucketSlots.some((m) => m !== 0),
  };
}

function common(service: ServiceRedirect, engineSlots: ReadonlyMap<EngineAddress, number>) {
  return {
    serviceId: service.serviceId,
    priority: service.priority,
    protocol: service.protocol,
    ports: [...service.ports],
    portsAreSource: service.portsAreSource,
    hashField: hashFieldOf(service),
    clientInterfaces: [...service.clientInterfaces],
    engines: [...service.engines],
    engineSlots,
    failClosed: service.failMode === 'closed',
    ...(service.families !== undefined && service.families.join() !== 'ipv4'
      ? { families: [...service.families] }
      : {}),
  };
}

const MASK_FIELD_BITS = [32, 32, 16, 16] as const;

/**
 * A Mask/Value Set as nft keys. A value with a bit outside its mask can never match and is left out; of equal values
 * the first wins (draft 4.11.2). Port masks need a protocol with ports.
 */
function planMaskSet(
  service: ServiceRedirect,
  set: MaskValueSet,
  slotOf: (e: EngineAddress | null) => number,
): MaskSetPlan {
  const m = set.mask;
  const mask: MaskFields = [
    m.sourceAddressMask >>> 0,
    m.destinationAddressMask >>> 0,
    m.sourcePortMask,
    m.destinationPortMask,
  ];
  mask.forEach((v, i) => {
    if (!Number.isInteger(v) || v < 0 || v >= 2 ** (MASK_FIELD_BITS[i] ?? 32)) {
      throw new DataplaneError(
        'unsupported-service',
        `service ${service.serviceId}: mask element field ${i} is ${v}, not a ${MASK_FIELD_BITS[i]}-bit value`,
      );
    }
  });
  if ((mask[2] !== 0 || mask[3] !== 0) && ![6, 17].includes(service.protocol)) {
    throw new DataplaneError(
      'unsupported-service',
      `service ${service.serviceId}: a port mask needs TCP or UDP, the service's protocol is ${service.protocol}`,
    );
  }
  const seen = new Set<string>();
  const values: { key: MaskFields; slot: number }[] = [];
  for (const v of set.values) {
    const key: MaskFields = [v.sourceAddress >>> 0, v.destinationAddress >>> 0, v.sourcePort, v.destinationPort];
    if (key.some((k, i) => (k & ~(mask[i] ?? 0)) >>> 0 !== 0)) continue;
    const id = key.join(',');
    if (seen.has(id)) continue;
    seen.add(id);
    values.push({ key, slot: slotOf(v.engine) });
  }
  return { mask, values };
}

/** The order in which overlapping services see a packet: priority, highest first; then service id, lowest first. */
export function compareServiceOrder(
  a: { readonly serviceId: number; readonly priority: number },
  b: { readonly serviceId: number; readonly priority: number },
): number {
  return b.priority - a.priority || a.serviceId - b.serviceId;
}

// ---- names of per-service and per-slot objects ------------------------------------------------------------------

export const serviceChain = (id: number): string => `svc_${id}`;
/** Runs once per connection the service claims: hash, count the bucket, write the claim into the ct mark field. */
export const classifyChain = (id: number): string => `classify_${id}`;
export const bucketMap = (id: number): string => `bucket_${id}`;
/** Mask assignment: set k of the service's Mask/Value Sets, masked value -> the claim. */
export const maskMap = (id: number, k: number): string => `mask_${id}_${k}`;
export const enginesSet = (id: number): string => `engines_${id}`;
// Bucket counters live in the elements of a `counter` set per service: a lookup counts on the element it hits,
// re-adding an element keeps its counter, and `nft list set` reads one set alone.
export const bucketCounterSet = (id: number): string => `bseen_${id}`;
// Named counters, all read with one `nft list counters`: new connections refused (fail closed) and new connections
// whose bucket has no engine (forwarded normally): Cisco's "Denied Redirect" and "Unassigned"; and per engine slot,
// the packets steered to its engine.
export const deniedCounter = (id: number): string => `denied_${id}`;
export const unassignedCounter = (id: number): string => `unassigned_${id}`;
export const engineCounter = (slot: number): string => `engine_${slot}`;
/** Sets the slot's value in the conntrack mark field (a new connection's engine), then steers the packet. */
export const claimChain = (slot: number): string => `claim_${slot}`;
/**
 * Every packet of a connection the slot claimed (reached from the first prerouting rule): the steered direction (the
 * service's match) is counted, gets the slot's value in its packet mark field (the ip rule routes on it) and leaves.
 */
export const slotChain = (slot: number): string => `slot_${slot}`;
// The IPv6 twins of a service's objects (docs/dataplane/nft.md, "IPv6"): its own classification, bucket map (its
// engines without an IPv6 next hop left out), engines' addresses and counters; the slot chains and claims are shared.
export const classifyChain6 = (id: number): string => `classify6_${id}`;
export const bucketMap6 = (id: number): string => `bucket6_${id}`;
export const enginesSet6 = (id: number): string => `engines6_${id}`;
export const bucketCounterSet6 = (id: number): string => `bseen6_${id}`;
export const deniedCounter6 = (id: number): string => `denied6_${id}`;
export const unassignedCounter6 = (id: number): string => `unassigned6_${id}`;
export const engineCounter6 = (slot: number): string => `engine6_${slot}`;
/** In the closed table: the refusal of one fail-closed service. */
export const closedChain = (id: number): string => `closed_${id}`;

// ---- text helpers ------------------------------------------------------------------------------------------------

export const quote = (s: string): string => `"${s.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;

export function elementLines(target: string, elements: readonly string[], chunk = 4096, table = T): string[] {
  const out: string[] = [];
  for (let i = 0; i < elements.length; i += chunk) {
    out.push(`add element ${table} ${target} { ${elements.slice(i, i + chunk).join(', ')} }`);
  }
  return out;
}

/** nft's name for TCP and UDP (they have port fields of their own); null for any other protocol. */
export const portProtocol = (protocol: number): 'tcp' | 'udp' | null =>
  protocol === 6 ? 'tcp' : protocol === 17 ? 'udp' : null;

/**
 * The match of a service's client-side packets of one family: arriving interface, family (IPv6 only for a service
 * whose `families` has it), protocol, ports.
 */
export function serviceMatch(
  plan: Pick<ServicePlan, 'clientInterfaces' | 'protocol' | 'ports' | 'portsAreSource'>,
  family: NfFamily = 'ipv4',
): string {
  const parts = [`iifname { ${plan.clientInterfaces.map(quote).join(', ')} }`, `meta nfproto ${family}`];
  const proto = portProtocol(plan.protocol);
  parts.push(`meta l4proto ${proto ?? String(plan.protocol)}`);
  if (plan.ports.length > 0) {
    const dir = plan.portsAreSource ? 'sport' : 'dport';
    parts.push(`${proto ?? 'th'} ${dir} { ${plan.ports.join(', ')} }`);
  }
  return parts.join(' ');
}

export function refuseStatement(plan: Pick<ServicePlan, 'protocol'>): string {
  return plan.protocol === 6 ? 'reject with tcp reset' : 'reject';
}

/** Refuses whatever matches `what`: a TCP reset for TCP (ECONNREFUSED at the client), ICMP otherwise. */
export const refuseAny = (chain: string, what: string): string[] => [
  `add rule ${chain} ${what}${what === '' ? '' : ' '}meta l4proto tcp reject with tcp reset`,
  `add rule ${chain} ${what}${what === '' ? '' : ' '}reject`,
];

/** The conntrack mark field is 0: no service has claimed the connection. */
export const CT_UNCLAIMED = `ct mark and ${M} == 0`;

/** Removes the closed table if it exists: `wccpd-cleanup --all`, or no service fails closed any more. */
export function removeClosedTableRuleset(): string {
  return `add table ${G}\ndelete table ${G}\n`;
}

/** The static chain that leaves the hash (0-255) of the packet's `field` address in meta priority. */
export const hashChain = (field: 'daddr' | 'saddr'): string => `hash_${field}`;

/** Bit offset of the address in the IPv4 header. */
const fieldOffset = (field: 'daddr' | 'saddr'): number => (field === 'daddr' ? 128 : 96);

/** @nibxor's keys: any byte x with any in-place nibble y (0-15 or a multiple of 16). */
export function nibbleXorEntries(): [number, number, number][] {
  const nibbles = new Set<number>();
  for (let n = 0; n < 16; n++) nibbles.add(n).add(n << 4);
  const out: [number, number, number][] = [];
  for (let x = 0; x < 256; x++) for (const y of [...nibbles].sort((a, b) => a - b)) out.push([x, y, x ^ y]);
  return out;
}

/** The map of the addresses whose hash a hash chain computed lately (hashStatics' `cache`). */
export const hashCacheMap = (field: 'daddr' | 'saddr'): string => `hcache_${field}`;

function hashChainRules(field: 'daddr' | 'saddr', table: string, cache: boolean): string[] {
  const chain = `${table} ${hashChain(field)}`;
  const at = fieldOffset(field);
  const map = `@${hashCacheMap(field)}`;
  return [
    // An address hashed lately: its bucket in one lookup instead of seven.
    ...(cache ? [`add rule ${chain} meta priority set ip ${field} map ${map} return`] : []),
    ...xorRules(chain, at, 4),
    // A full cache is no error: the rule just does not add (its bucket is in meta priority all the same).
    ...(cache ? [`add rule ${chain} add ${map} { ip ${field} : meta priority }`] : []),
  ];
}

/** The XOR of `bytes` bytes from bit `at` of the network header into meta priority: the first, then each nibble. */
function xorRules(chain: string, at: number, bytes: number): string[] {
  return [
    `add rule ${chain} meta priority set @nh,${at},8 map @byte`,
    ...Array.from({ length: bytes - 1 }, (_, i) => i + 1).flatMap((byte) =>
      ['0xf0', '0x0f'].map(
        (nibble) =>
          `add rule ${chain} meta priority set meta priority . (@nh,${at + 8 * byte},8 & ${nibble}) map @nibxor`,
      ),
    ),
  ];
}

/** The address caches of the hash chains: `name(field)`, keyed by `key(field)`. */
const cacheMaps = (table: string, name: (f: 'daddr' | 'saddr') => string, key: (f: 'daddr' | 'saddr') => string) =>
  (['daddr', 'saddr'] as const).map(
    (f) =>
      `add map ${table} ${name(f)} { typeof ${key(f)} : meta priority; size ${HASH_CACHE.size}; ` +
      `timeout ${HASH_CACHE.timeoutSeconds}s; flags dynamic; }`,
  );

/** hashStatics' address cache: entries, and how long one lasts after it was computed (a hash never changes). */
export const HASH_CACHE = { size: 65_536, timeoutSeconds: 60 } as const;

/**
 * The static hash part of a table (`<family> <name>`): @byte, @nibxor and the two hash chains, which leave the bucket
 * of the packet's address in meta priority. The same in every table that hashes (the nft and ingress backends).
 * `cache`: each chain first looks the address up in a map of the addresses it hashed in the last HASH_CACHE seconds
 * (one lookup instead of seven) and records the ones it computes (the ingress backend, whose every new flow is hashed).
 */
export function hashStatics(table: string, options: { readonly cache?: boolean } = {}): string[] {
  const cache = options.cache === true;
  return [
    ...(cache ? cacheMaps(table, hashCacheMap, (f) => `ip ${f}`) : []),
    `add map ${table} byte { typeof @nh,128,8 : meta priority; }`,
    `add map ${table} nibxor { typeof meta priority . @nh,128,8 : meta priority; }`,
    ...elementLines(
      'byte',
      Array.from({ length: 256 }, (_, b) => `${b} : ${b}`),
      4096,
      table,
    ),
    ...elementLines(
      'nibxor',
      nibbleXorEntries().map(([x, y, v]) => `${x} . ${y} : ${v}`),
      4096,
      table,
    ),
    `add chain ${table} ${hashChain('daddr')}`,
    ...hashChainRules('daddr', table, cache),
    `add chain ${table} ${hashChain('saddr')}`,
    ...hashChainRules('saddr', table, cache),
  ];
}

// IPv6 (docs/buckets.md): an address's hash input is the XOR of its four 32-bit words, so its bucket is the XOR of all
// 16 bytes: the same fold, one byte from @byte and the 30 other nibbles through @nibxor (31 lookups; the address cache
// makes it one for an address hashed in the last minute).

/** The IPv6 twin of hashChain: leaves the bucket (0-255) of the packet's IPv6 `field` address in meta priority. */
export const hashChain6 = (field: 'daddr' | 'saddr'): string => `hash6_${field}`;
/** The IPv6 twin of hashCacheMap, keyed by the raw 16 bytes of the address. */
export const hashCacheMap6 = (field: 'daddr' | 'saddr'): string => `hcache6_${field}`;
/** An IPv6 address in the header, raw (`ip6 daddr` would add a protocol test to every rule naming it). */
export const rawAddress6 = (field: 'daddr' | 'saddr'): string => (field === 'daddr' ? '@nh,192,128' : '@nh,64,128');

function hash6ChainRules(field: 'daddr' | 'saddr', table: string, cache: boolean): string[] {
  const chain = `${table} ${hashChain6(field)}`;
  const at = field === 'daddr' ? 192 : 64;
  const key = rawAddress6(field);
  const map = `@${hashCacheMap6(field)}`;
  return [
    ...(cache ? [`add rule ${chain} meta priority set ${key} map ${map} return`] : []),
    ...xorRules(chain, at, 16),
    ...(cache ? [`add rule ${chain} add ${map} { ${key} : meta priority }`] : []),
  ];
}

/**
 * The IPv6 hash chains (docs/buckets.md, "IPv6 addresses"): the XOR of the address's 16 bytes (= the draft's hash of
 * the XOR of its four 32-bit words), from its first byte and its 30 other nibbles, one @nibxor lookup each, in a table
 * that has hashStatics' @byte and @nibxor; with `cache` (the ingress backend) behind address caches as hashStatics'.
 * Written by a transaction that has an IPv6 service (never into an IPv4-only table), flushed first, so writing them
 * again changes nothing.
 */
export function hashChains6(table: string, options: { readonly cache?: boolean } = {}): string[] {
  const cache = options.cache === true;
  return [
    ...(cache ? cacheMaps(table, hashCacheMap6, rawAddress6) : []),
    ...(['daddr', 'saddr'] as const).flatMap((f) => [
      `add chain ${table} ${hashChain6(f)}`,
      `flush chain ${table} ${hashChain6(f)}`,
      ...hash6ChainRules(f, table, cache),
    ]),
  ];
}

/** What the closed table needs of a fail-closed service. */
export type ClosedService = Pick<
  ServicePlan,
  'serviceId' | 'engines' | 'clientInterfaces' | 'protocol' | 'ports' | 'portsAreSource' | 'families' | 'engines6'
>;

/**
 * The closed table rebuilt from scratch for these fail-closed services, in one transaction (the userland backend's:
 * it keeps no record of an earlier run's refusals, so it writes the whole table each time); none: no table.
 */
export function closedTableRuleset(services: readonly ClosedService[]): string {
  const withClients = services.filter((s) => s.clientInterfaces.length > 0);
  return [
    removeClosedTableRuleset().trimEnd(),
    ...closedTableLines({ write: withClients, keep: [], drop: [] }),
    '',
  ].join('\n');
}

export interface ClosedPlan {
  /** Fail-closed services whose refusal is (re)written from their plan. */
  readonly write: readonly ClosedService[];
  /** Services whose refusal from an earlier run stays as it is (not applied yet in this run). */
  readonly keep: readonly number[];
  /** Services whose refusal goes (applied as open, or removed). */
  readonly drop: readonly number[];
}

// ---- mask assignment: the draft's lookup (4.11.2) as one verdict map per Mask/Value Set --------------------------

const MASK_KEYS = ['ip saddr', 'ip daddr', 'th sport', 'th dport'] as const;
const maskFieldText = (field: number, v: number): string => (field < 2 ? numberToIpv4(v) : String(v));

/** The fields a set's mask reads (a zero mask is "don't care": that field is left out of the key). */
export const maskedFields = (set: MaskSetPlan): number[] => [0, 1, 2, 3].filter((f) => (set.mask[f] ?? 0) !== 0);

/** The sets of a plan that have a map (a set whose mask is all zeros needs none). */
export function maskMapIndexes(p: Pick<ServicePlan, 'maskSets'>): number[] {
  return (p.maskSets ?? []).flatMap((set, k) => (maskedFields(set).length > 0 ? [k] : []));
}

/** A set's verdict map in `table`: each value's masked fields -> claimOf(its slot). None for an all-zero mask. */
export function maskMapLines(
  name: string,
  set: MaskSetPlan,
  claimOf: (slot: number) => string,
  table: string = T,
): string[] {
  const fields = maskedFields(set);
  if (fields.length === 0) return [];
  return [
    `add map ${table} ${name} { typeof ${fields.map((f) => MASK_KEYS[f]).join(' . ')} : verdict; }`,
    ...elementLines(
      name,
      set.values.map((v) => `${fields.map((f) => maskFieldText(f, v.key[f] ?? 0)).join(' . ')} : ${claimOf(v.slot)}`),
      4096,
      table,
    ),
  ];
}

/** The packet's masked fields as a set's map key (`ip saddr & 0.0.23.65 . ...`); the set must have a map. */
export const maskKey = (set: MaskSetPlan): string =>
  maskedFields(set)
    .map((f) => `${MASK_KEYS[f]} & ${maskFieldText(f, set.mask[f] ?? 0)}`)
    .join(' . ');

/**
 * When an unclaimed connection is classified. A destination-port service: at its first packet (`ct state new`), so
 * connections that existed before wccpd started are never moved. A source-port service sees the server's side,
 * whose first packet is usually not the connection's first (the gateway saw the other side's SYN, e.g. a TPROXY
 * engine's own connection to the origin): also, for TCP, at the SYN-ACK; for other protocols at any packet of an
 * unclaimed connection.
 */
export function classifyWhen(p: Pick<ServicePlan, 'portsAreSource' | 'protocol'>): string[] {
  if (!p.portsAreSource) return ['ct state new '];
  if (p.protocol === 6) return ['ct state new ', 'tcp flags & (syn | ack) == syn | ack '];
  return [''];
}

// ---- the closed table: fail closed while wccpd is down -----------------------------------------------------------
// Table `inet wccpd_closed` outlives wccpd (its stop() and `wccpd-cleanup` leave it; `wccpd-cleanup --all` removes
// it). Per fail-closed service it refuses new connections that no service claimed: while wccpd runs, every new
// connection of the service is claimed (an engine slot, DIRECT_VALUE or REFUSED_VALUE; by it or by an overlapping
// service) before the forward hook, so nothing here fires; once wccpd's table is gone, nothing sets the field and the
// service is refused. wccpd's own refusal (and its denied counter) comes first: it is made in prerouting.

export function closedTableLines(c: ClosedPlan): string[] {
  const lines = [
    `add table ${G}`,
    `add chain ${G} forward { type filter hook forward priority filter + 10; policy accept; }`,
    `flush chain ${G} forward`,
  ];
  for (const p of c.write) {
    const chain = closedChain(p.serviceId);
    lines.push(`add chain ${G} ${chain}`, `flush chain ${G} ${chain}`);
    if (p.engines.length > 0) lines.push(`add rule ${G} ${chain} ip saddr { ${p.engines.join(', ')} } return`);
    const v6 = p.engines6 ?? [];
    if (hasIpv6(p) && v6.length > 0) lines.push(`add rule ${G} ${chain} ip6 saddr { ${v6.join(', ')} } return`);
    for (const family of familiesOfPlan(p))
      for (const when of classifyWhen(p)) {
        lines.push(`add rule ${G} ${chain} ${serviceMatch(p, family)} ${when}${CT_UNCLAIMED} ${refuseStatement(p)}`);
      }
  }
  for (const id of c.drop) lines.push(`add chain ${G} ${closedChain(id)}`, `delete chain ${G} ${closedChain(id)}`);
  const guarded = [...new Set([...c.write.map((p) => p.serviceId), ...c.keep])].sort((a, b) => a - b);
  for (const id of guarded) lines.push(`add rule ${G} forward jump ${closedChain(id)}`);
  if (guarded.length === 0) lines.push(`delete table ${G}`);
  return lines;
}
