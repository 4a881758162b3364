// Pure generation of the nft backend's ruleset text (fed to `nft -f -`). Nothing here runs a command.
//
// The exact WCCP hash runs in the kernel: the draft's hash of a 32-bit key is the XOR of its four bytes, and nftables
// cannot XOR two values, so two small static maps do it one nibble at a time (loaded once by start()):
//   @nib:    an address with one nibble kept (addr & 240.0.0.0, addr & 15.0.0.0, ... addr & 0.0.0.15) -> that
//            nibble in place within its byte (n << 4 for a high nibble, n for a low one): 121 entries
//   @nibxor: x . y -> x ^ y for any byte x and any in-place nibble y: 256 x 31 = 7,936 entries
// A static chain per hash field folds the eight nibbles into meta mark: bucket = XOR of the address bytes, the
// draft's hash exactly. (The first version used three 65,536-entry byte maps: 196,608 entries, 3.5 s or more to load.)
// meta mark and ct mark serve as scratch registers for a NEW connection until the bucket -> engine-mark map writes
// the real ct mark; every map is complete, so no lookup can miss and leave a scratch value behind.
import { BUCKET_COUNT } from '../buckets/table.js';
import type { EngineAddress } from '../buckets/table.js';
import type { ServiceRedirect } from './redirector.js';
import { DataplaneError } from './errors.js';
import { NFT_FAMILY, NFT_TABLE } from './names.js';

const T = `${NFT_FAMILY} ${NFT_TABLE}`;
const HASH_FIELD_BITS = 0x000f; // source/destination IP and port hash bits of the service flags

/** One service, reduced to what the ruleset needs. */
export interface ServicePlan {
  readonly serviceId: number;
  readonly protocol: number;
  readonly ports: readonly number[];
  readonly portsAreSource: boolean;
  /** Which address is the hash key: destination (standard) or source. */
  readonly hashField: 'daddr' | 'saddr';
  readonly clientInterfaces: readonly string[];
  /** Every engine of the group: traffic they source is never redirected (draft 4.10). */
  readonly engines: readonly EngineAddress[];
  /** 256 entries: the fwmark of the bucket's engine, or 0 (forward normally). */
  readonly bucketMarks: readonly number[];
  /** The fwmark of each usable engine (for per-engine counters). */
  readonly engineMarks: ReadonlyMap<EngineAddress, number>;
  /** failMode closed and no usable engine: refuse new connections of the service. */
  readonly refuse: boolean;
  /** Engine marks counted for this service by the previous transaction (their counters are dropped if unused now). */
  readonly previousEngineMarks?: readonly number[];
}

/** The hash key a service uses, or a typed error when nft cannot compute its hash exactly. */
export function hashFieldOf(service: ServiceRedirect): 'daddr' | 'saddr' {
  const bits = service.serviceFlags & HASH_FIELD_BITS;
  if (bits === 0 || bits === 0x2) return 'daddr';
  if (bits === 0x1) return 'saddr';
  throw new DataplaneError('unsupported-service',
    `service ${service.serviceId}: hash flags 0x${bits.toString(16)} (ports or several fields) cannot be computed ` +
    'by the nft backend, which hashes one address exactly; use `dataplane.backend: userland` for this service');
}

/** True when at least one bucket names an engine the group says is usable. */
export function hasUsableEngine(service: ServiceRedirect): boolean {
  const usable = new Set(service.engines);
  return service.table.buckets.some((e) => e !== null && usable.has(e));
}

/** Reduces a service to a plan, given each engine's slot mark. Engines without a mark are treated as unassigned. */
export function planService(service: ServiceRedirect, marks: ReadonlyMap<EngineAddress, number>): ServicePlan {
  if (service.table.buckets.length !== BUCKET_COUNT) {
    throw new DataplaneError('unsupported-service',
      `service ${service.serviceId}: bucket table has ${service.table.buckets.length} entries, expected ${BUCKET_COUNT}`);
  }
  const usable = new Set(service.engines);
  const engineMarks = new Map<EngineAddress, number>();
  for (const e of service.engines) {
    const m = marks.get(e);
    if (m !== undefined) engineMarks.set(e, m);
  }
  const bucketMarks = service.table.buckets.map((e) => (e !== null && usable.has(e) ? engineMarks.get(e) ?? 0 : 0));
  return {
    serviceId: service.serviceId,
    protocol: service.protocol,
    ports: [...service.ports],
    portsAreSource: service.portsAreSource,
    hashField: hashFieldOf(service),
    clientInterfaces: [...service.clientInterfaces],
    engines: [...service.engines],
    bucketMarks,
    engineMarks,
    refuse: service.failMode === 'closed' && !bucketMarks.some((m) => m !== 0),
  };
}

// ---- names of per-service objects -------------------------------------------------------------------------------

export const serviceChain = (id: number): string => `svc_${id}`;
export const bucketMap = (id: number): string => `bucket_${id}`;
export const enginesSet = (id: number): string => `engines_${id}`;
// Counters live in the elements of two sets per service (`counter` sets): a lookup counts on the element it hits,
// re-adding an element keeps its counter, and `nft list set` reads one set in ~20 ms, where any listing that
// involves the whole table (`list counters`) dumps the 196,608 static map entries and takes seconds.
export const bucketCounterSet = (id: number): string => `bseen_${id}`;
export const engineCounterSet = (id: number): string => `eseen_${id}`;
// Named counters (read one by one with `nft list counter`): new connections refused (fail closed) and new
// connections whose bucket has no engine (forwarded normally): Cisco's "Denied Redirect" and "Unassigned".
export const deniedCounter = (id: number): string => `denied_${id}`;
export const unassignedCounter = (id: number): string => `unassigned_${id}`;

// ---- text helpers ------------------------------------------------------------------------------------------------

const hex = (n: number): string => `0x${n.toString(16)}`;
const quote = (s: string): string => `"${s.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;

function elementLines(target: string, elements: readonly string[], chunk = 4096): string[] {
  const out: string[] = [];
  for (let i = 0; i < elements.length; i += chunk) {
    out.push(`add element ${T} ${target} { ${elements.slice(i, i + chunk).join(', ')} }`);
  }
  return out;
}

/**
 * The match of a service's client-side packets: arriving interface, IPv4 (WCCPv2 as implemented here is IPv4 only:
 * IPv6 traffic is never classified and flows direct), protocol, ports.
 */
export function serviceMatch(plan: ServicePlan): string {
  const parts = [`iifname { ${plan.clientInterfaces.map(quote).join(', ')} }`, 'meta nfproto ipv4'];
  const proto = plan.protocol === 6 ? 'tcp' : plan.protocol === 17 ? 'udp' : null;
  parts.push(`meta l4proto ${proto ?? String(plan.protocol)}`);
  if (plan.ports.length > 0) {
    const dir = plan.portsAreSource ? 'sport' : 'dport';
    parts.push(`${proto ?? 'th'} ${dir} { ${plan.ports.join(', ')} }`);
  }
  return parts.join(' ');
}

function refuseStatement(plan: ServicePlan): string {
  return plan.protocol === 6 ? 'reject with tcp reset' : 'reject';
}

// ---- the static part ---------------------------------------------------------------------------------------------

/** Removes our table if it exists (the `add` makes the `delete` safe when it does not). */
export function removeTableRuleset(): string {
  return `add table ${T}\ndelete table ${T}\n`;
}

/** The masks that keep one nibble of an address, most significant first. */
export const NIBBLE_MASKS: readonly string[] = [0, 1, 2, 3].flatMap((byte) => [0xf0, 0x0f].map((m) =>
  [0, 1, 2, 3].map((i) => (i === byte ? m : 0)).join('.')));

/** The static chain that leaves the hash (0-255) of the packet's `field` address in meta mark. */
export const hashChain = (field: 'daddr' | 'saddr'): string => `hash_${field}`;

/** @nib's entries: every address with one nibble kept, and that nibble's value in place within its byte. */
export function nibbleEntries(): Map<string, number> {
  const out = new Map<string, number>();
  for (let byte = 0; byte < 4; byte++) {
    for (let n = 0; n < 16; n++) {
      for (const value of [n << 4, n]) {
        out.set([0, 1, 2, 3].map((i) => (i === byte ? value : 0)).join('.'), value);
      }
    }
  }
  return out;
}

/** @nibxor's keys: any byte x with any in-place nibble y (0-15 or a multiple of 16). */
export function nibbleXorEntries(): [number, number, number][] {
  const nibbles = new Set<number>();
  for (let n = 0; n < 16; n++) nibbles.add(n).add(n << 4);
  const out: [number, number, number][] = [];
  for (let x = 0; x < 256; x++) for (const y of [...nibbles].sort((a, b) => a - b)) out.push([x, y, x ^ y]);
  return out;
}

function hashChainRules(field: 'daddr' | 'saddr'): string[] {
  const chain = `${T} ${hashChain(field)}`;
  const [first, ...rest] = NIBBLE_MASKS;
  return [
    `add rule ${chain} meta mark set ip ${field} & ${first ?? ''} map @nib`,
    ...rest.flatMap((mask) => [
      `add rule ${chain} ct mark set ip ${field} & ${mask} map @nib`,
      `add rule ${chain} meta mark set meta mark . ct mark map @nibxor`,
    ]),
  ];
}

/** The whole table from scratch: static hash maps and chains, the live-mark set and the two empty hook chains. */
export function baseRuleset(): string {
  return [
    removeTableRuleset().trimEnd(),
    `add table ${T}`,
    `add map ${T} nib { type ipv4_addr : mark; }`,
    `add map ${T} nibxor { type mark . mark : mark; }`,
    // The fwmarks of engines that have a route now; a flow whose ct mark is not here belongs to a gone engine.
    `add set ${T} live { type mark; }`,
    `add chain ${T} prerouting { type filter hook prerouting priority mangle; policy accept; }`,
    `add chain ${T} forward { type filter hook forward priority filter; policy accept; }`,
    ...elementLines('nib', [...nibbleEntries()].map(([k, v]) => `${k} : ${v}`)),
    ...elementLines('nibxor', nibbleXorEntries().map(([x, y, v]) => `${x} . ${y} : ${v}`)),
    `add chain ${T} ${hashChain('daddr')}`,
    ...hashChainRules('daddr'),
    `add chain ${T} ${hashChain('saddr')}`,
    ...hashChainRules('saddr'),
    '',
  ].join('\n');
}

// ---- the dynamic part: one transaction per change ---------------------------------------------------------------


/**
 * One atomic transaction: rewrites the hook chains and the live set, and every given service's chain, maps and
 * counter sets, and deletes removed services. Counter elements are `add`ed: existing ones keep counting.
 */
export function servicesRuleset(plans: readonly ServicePlan[], removed: readonly number[] = []): string {
  const live = new Set<number>();
  for (const p of plans) for (const m of p.engineMarks.values()) live.add(m);
  const lines: string[] = [
    `flush chain ${T} prerouting`,
    `flush chain ${T} forward`,
    `flush set ${T} live`,
  ];
  if (live.size > 0) lines.push(`add element ${T} live { ${[...live].sort((a, b) => a - b).map(hex).join(', ')} }`);

  for (const id of removed) {
    lines.push(`flush chain ${T} ${serviceChain(id)}`, `delete chain ${T} ${serviceChain(id)}`,
      `delete map ${T} ${bucketMap(id)}`, `delete set ${T} ${enginesSet(id)}`,
      `delete set ${T} ${bucketCounterSet(id)}`, `delete set ${T} ${engineCounterSet(id)}`,
      `delete counter ${T} ${deniedCounter(id)}`, `delete counter ${T} ${unassignedCounter(id)}`);
  }

  for (const p of plans) lines.push(...serviceObjects(p));
  for (const p of plans) lines.push(...hookRules(p));
  lines.push('');
  return lines.join('\n');
}

function serviceObjects(p: ServicePlan): string[] {
  const id = p.serviceId;
  const chain = serviceChain(id);
  const lines = [
    `add set ${T} ${enginesSet(id)} { type ipv4_addr; }`,
    `flush set ${T} ${enginesSet(id)}`,
    ...(p.engines.length > 0 ? [`add element ${T} ${enginesSet(id)} { ${p.engines.join(', ')} }`] : []),
    `add map ${T} ${bucketMap(id)} { type mark : mark; }`,
    `flush map ${T} ${bucketMap(id)}`,
    ...elementLines(bucketMap(id), p.bucketMarks.map((m, b) => `${b} : ${hex(m)}`)),
  ];
  const marksNow = new Set(p.engineMarks.values());
  const dropped = (p.previousEngineMarks ?? []).filter((m) => !marksNow.has(m));
  lines.push(
    `add set ${T} ${bucketCounterSet(id)} { type mark; counter; }`,
    `add element ${T} ${bucketCounterSet(id)} { ${Array.from({ length: BUCKET_COUNT }, (_, b) => b).join(', ')} }`,
    `add set ${T} ${engineCounterSet(id)} { type mark; counter; }`,
    `add counter ${T} ${deniedCounter(id)}`,
    `add counter ${T} ${unassignedCounter(id)}`,
    ...(dropped.length > 0 ? [`delete element ${T} ${engineCounterSet(id)} { ${dropped.map(hex).join(', ')} }`] : []),
    ...(marksNow.size > 0 ? [`add element ${T} ${engineCounterSet(id)} { ${[...marksNow].map(hex).join(', ')} }`] : []),
  );
  lines.push(
    `add chain ${T} ${chain}`,
    `flush chain ${T} ${chain}`,
    // Draft 4.10: never redirect what an engine sends (its own fetches to the origin).
    `add rule ${T} ${chain} ip saddr @${enginesSet(id)} return`,
    // Only NEW connections are classified: the exact WCCP hash (static chain), then bucket -> engine mark.
    `add rule ${T} ${chain} ct state new jump ${hashChain(p.hashField)}`,
    `add rule ${T} ${chain} ct state new meta mark @${bucketCounterSet(id)}`,
    `add rule ${T} ${chain} ct state new ct mark set meta mark map @${bucketMap(id)}`,
    // Unassigned (forwarded normally); while the service refuses, those count as denied instead.
    ...(p.refuse ? [] : [`add rule ${T} ${chain} ct state new ct mark 0 counter name ${unassignedCounter(id)}`]),
    // Stickiness: every packet of the flow carries the mark its first packet got; the policy route does the rest.
    `add rule ${T} ${chain} meta mark set ct mark`,
    `add rule ${T} ${chain} meta mark @${engineCounterSet(id)}`,
  );
  return lines;
}

function hookRules(p: ServicePlan): string[] {
  if (p.clientInterfaces.length === 0) return [];
  const match = serviceMatch(p);
  const lines = [`add rule ${T} prerouting ${match} jump ${serviceChain(p.serviceId)}`];
  const notEngine = `ip saddr != @${enginesSet(p.serviceId)}`;
  // A flow whose engine is gone cannot be saved: end it at once rather than let it hang.
  lines.push(`add rule ${T} forward ${match} ${notEngine} ct state != new ct mark != 0 ct mark != @live ` +
    refuseStatement(p));
  if (p.refuse) {
    lines.push(`add rule ${T} forward ${match} ${notEngine} ct state new counter name ${deniedCounter(p.serviceId)} ${refuseStatement(p)}`);
  }
  return lines;
}
