// Pure generation of the nft backend's own table (fed to `nft -f -`): its static part, the claims map and hook,
// and the one transaction per change. The language it shares with the ingress backend is ../kernel/rules.ts.
import { BUCKET_COUNT } from '../../buckets/table.js';
import {
  DIRECT_VALUE,
  MARK_MASK,
  MAX_SLOT,
  MIN_SLOT,
  NFT_FAMILY,
  NFT_TABLE,
  REFUSED_VALUE,
  fieldMark,
  hex,
  setField,
} from '../kernel/names.js';
import {
  CT_UNCLAIMED,
  bucketCounterSet,
  bucketMap,
  claimChain,
  classifyChain,
  classifyWhen,
  closedTableLines,
  compareServiceOrder,
  deniedCounter,
  elementLines,
  engineCounter,
  enginesSet,
  hashChain,
  hashStatics,
  maskKey,
  maskMap,
  maskMapLines,
  maskedFields,
  portProtocol,
  refuseAny,
  serviceChain,
  serviceMatch,
  slotChain,
  unassignedCounter,
  REFUSE_BUCKET,
  bucketCounterSet6,
  bucketMap6,
  classifyChain6,
  deniedCounter6,
  engineCounter6,
  enginesSet6,
  familiesOfPlan,
  hasIpv6,
  hashChain6,
  hashChains6,
  unassignedCounter6,
} from '../kernel/rules.js';
import type { ClosedPlan, ServicePlan } from '../kernel/rules.js';

const T = `${NFT_FAMILY} ${NFT_TABLE}`;
const M = hex(MARK_MASK);
/** The claim of a packet's connection (its ct mark field) -> what becomes of the packet: the first prerouting rule. */
const CLAIMS_MAP = 'claims';
/** Unclaimed packets: the services' hook rules, in priority order. */
const UNCLAIMED_CHAIN = 'unclaimed';
/** An engine claim whose slot is gone, and a refused claim. */
const GONE_CHAIN = 'gone';
const REJECT_CHAIN = 'reject_claim';

// ---- the static part ---------------------------------------------------------------------------------------------

const LOCAL_ACCEPT = 'fib daddr type local accept';

/** Removes our table if it exists (the `add` makes the `delete` safe when it does not). */
export function removeTableRuleset(): string {
  return `add table ${T}\ndelete table ${T}\n`;
}

/** Options of the whole ruleset (the config's `dataplane`). */
export interface RulesetOptions {
  /** Slots with an IPv6 counter (engine6_<slot>): released with it. */
  readonly ipv6Slots?: ReadonlySet<number>;
  /** `dataplane.conntrack: services`: packets no service can claim skip conntrack (the `untrack` chain). */
  readonly untrack?: boolean;
}

/** The whole table from scratch: static hash maps and chains, the claims map, the prerouting hook and its chains. */
export function baseRuleset(options: RulesetOptions = {}): string {
  return [
    removeTableRuleset().trimEnd(),
    `add table ${T}`,
    // Field mark of a claim -> its packets' fate (servicesRuleset fills it): 0 -> the services' hook rules, a live
    // engine slot -> its slot chain, direct -> accept, refused -> reject_claim.
    `add map ${T} ${CLAIMS_MAP} { type mark : verdict; }`,
    `add chain ${T} ${UNCLAIMED_CHAIN}`,
    // The two claims without an engine (bucket map verdicts): forwarded normally, or refused (fail closed).
    `add chain ${T} direct`,
    `add rule ${T} direct ${setField('ct mark', DIRECT_VALUE)}`,
    `add chain ${T} refused`,
    `add rule ${T} refused ${setField('ct mark', REFUSED_VALUE)}`,
    // A packet for the gateway itself is never refused or reset: it never reached the forward hook that used to do it.
    `add chain ${T} ${GONE_CHAIN}`,
    `add rule ${T} ${GONE_CHAIN} ${LOCAL_ACCEPT}`,
    ...refuseAny(`${T} ${GONE_CHAIN}`, ''),
    `add chain ${T} ${REJECT_CHAIN}`,
    `add rule ${T} ${REJECT_CHAIN} ${LOCAL_ACCEPT}`,
    ...refuseAny(`${T} ${REJECT_CHAIN}`, ''),
    `add chain ${T} prerouting { type filter hook prerouting priority mangle; policy accept; }`,
    // An established packet leaves at the first rule, whatever service claimed it.
    `add rule ${T} prerouting ct mark and ${M} vmap @${CLAIMS_MAP}`,
    // Not in the map: an engine claim whose slot is gone (a flow whose engine is gone cannot be saved: it is ended at
    // once rather than left to hang), or a reserved value (accepted by the policy).
    `add rule ${T} prerouting ct mark and ${M} ${hex(fieldMark(MIN_SLOT))}-${hex(fieldMark(MAX_SLOT))} goto ${GONE_CHAIN}`,
    ...hashStatics(T),
    // Before conntrack (priority raw): filled by every transaction (untrackRules).
    ...(options.untrack === true
      ? [`add chain ${T} ${UNTRACK_CHAIN} { type filter hook prerouting priority raw; policy accept; }`]
      : []),
    '',
  ].join('\n');
}

const UNTRACK_CHAIN = 'untrack';

/**
 * `dataplane.conntrack: services`. Conntrack runs for the whole namespace once any rule reads it, and wccpd's
 * stickiness needs it; without this, every forwarded packet pays it. Here a packet that no service could ever claim
 * is marked `notrack` before conntrack sees it: not of a service's protocol and port (either direction: a claimed
 * connection's replies must be tracked too, and a source-port service claims the origin's side), and not addressed
 * to the gateway itself (its own connections stay tracked for its firewall). Wrong on a gateway that NATs or filters
 * forwarded traffic by state: docs/dataplane.md says so, and the redirector warns at start when it sees such rules.
 */
export function untrackRules(plans: readonly Pick<ServicePlan, 'protocol' | 'ports'>[]): string[] {
  const chain = `${T} ${UNTRACK_CHAIN}`;
  const name = (p: number): string => portProtocol(p) ?? String(p);
  const withPorts = new Set<string>();
  const anyPort = new Set<number>();
  for (const p of plans) {
    if (p.ports.length === 0 || (p.protocol !== 6 && p.protocol !== 17)) anyPort.add(p.protocol);
    else for (const port of p.ports) withPorts.add(`${name(p.protocol)} . ${port}`);
  }
  const keys = [...withPorts].sort();
  const lines = [`flush chain ${chain}`];
  if (keys.length > 0) {
    for (const dir of ['dport', 'sport'])
      lines.push(`add rule ${chain} meta l4proto . th ${dir} { ${keys.join(', ')} } return`);
  }
  if (anyPort.size > 0)
    lines.push(
      `add rule ${chain} meta l4proto { ${[...anyPort]
        .sort((a, b) => a - b)
        .map(name)
        .join(', ')} } return`,
    );
  lines.push(`add rule ${chain} fib daddr type { local, broadcast, multicast } return`, `add rule ${chain} notrack`);
  return lines;
}

// ---- the dynamic part: one transaction per change ---------------------------------------------------------------

/** The engine slots a transaction brings in and takes out (their chains are created first and deleted last). */
export interface SlotChanges {
  readonly added: readonly number[];
  readonly released: readonly number[];
}

/**
 * Deletes engine slots' own objects (claim chain, slot chain, counters); none may be referred to any more. `ipv6`: the
 * slots that have an IPv6 counter (those of an IPv6 service).
 */
export function releaseSlotLines(slots: readonly number[], ipv6: ReadonlySet<number> = new Set()): string[] {
  return slots.flatMap((s) => [
    `delete chain ${T} ${claimChain(s)}`,
    `delete chain ${T} ${slotChain(s)}`,
    `delete counter ${T} ${engineCounter(s)}`,
    ...(ipv6.has(s) ? [`delete counter ${T} ${engineCounter6(s)}`] : []),
  ]);
}

/** A service's IPv6 objects deleted (removed, or IPv6 no longer among its families); `add` first makes it safe. */
function dropIpv6Lines(id: number, slots: readonly number[]): string[] {
  return [
    `add chain ${T} ${classifyChain6(id)}`,
    `flush chain ${T} ${classifyChain6(id)}`,
    `delete chain ${T} ${classifyChain6(id)}`,
    `add map ${T} ${bucketMap6(id)} { typeof meta priority : verdict; }`,
    `delete map ${T} ${bucketMap6(id)}`,
    `add set ${T} ${enginesSet6(id)} { type ipv6_addr; }`,
    `delete set ${T} ${enginesSet6(id)}`,
    `add set ${T} ${bucketCounterSet6(id)} { typeof meta priority; counter; }`,
    `delete set ${T} ${bucketCounterSet6(id)}`,
    ...[deniedCounter6(id), unassignedCounter6(id), ...slots.map(engineCounter6)].flatMap((c) => [
      `add counter ${T} ${c}`,
      `delete counter ${T} ${c}`,
    ]),
  ];
}

/**
 * One atomic transaction: rewrites the claims map and the hook rules, every given service's chain, maps, counter
 * set and slot chains, deletes removed services, and keeps the closed table in step. Counter elements are `add`ed:
 * existing ones keep counting.
 *
 * The first prerouting rule looks up the packet's claim (its ct mark field) in @claims: a live engine slot jumps to
 * its slot chain (steer and count, then accept), direct accepts, refused is refused; a gone slot is reset by the next
 * rule; only an unclaimed packet (field 0) goes on, to the services' hook rules in compareServiceOrder. A connection
 * is claimed by the first service that classifies it: its ct mark field becomes one of that service's engine slots,
 * DIRECT_VALUE or REFUSED_VALUE, never 0, and the classification ends with the packet's verdict, so no later service
 * sees it. A slot belongs to one service, so another service's claim is never rewritten or counted, and a fail-closed
 * service refuses only what it claimed.
 */
export function servicesRuleset(
  plans: readonly ServicePlan[],
  removed: readonly number[] = [],
  slots: SlotChanges = { added: [], released: [] },
  closed?: ClosedPlan,
  maskMapsOf: (serviceId: number) => readonly number[] = () => [],
  options: RulesetOptions = {},
  /** Services removed now that had IPv6 objects. */
  removedIpv6: readonly number[] = [],
): string {
  const live = new Set<number>();
  for (const p of plans) for (const s of p.engineSlots.values()) live.add(s);
  const sorted = [...live].sort((a, b) => a - b);
  const lines: string[] = [];
  for (const s of slots.added) {
    lines.push(
      // Its rule is written with its service's objects (the service's match).
      `add chain ${T} ${slotChain(s)}`,
      `flush chain ${T} ${slotChain(s)}`,
      `add counter ${T} ${engineCounter(s)}`,
      `add chain ${T} ${claimChain(s)}`,
      `flush chain ${T} ${claimChain(s)}`,
      `add rule ${T} ${claimChain(s)} ${setField('ct mark', s)} goto ${slotChain(s)}`,
    );
  }
  lines.push(
    `flush chain ${T} ${UNCLAIMED_CHAIN}`,
    `flush map ${T} ${CLAIMS_MAP}`,
    ...elementLines(CLAIMS_MAP, [
      `${hex(0)} : goto ${UNCLAIMED_CHAIN}`,
      ...sorted.map((s) => `${hex(fieldMark(s))} : goto ${slotChain(s)}`),
      `${hex(fieldMark(DIRECT_VALUE))} : accept`,
      `${hex(fieldMark(REFUSED_VALUE))} : goto ${REJECT_CHAIN}`,
    ]),
  );

  for (const id of removed) {
    lines.push(
      `flush chain ${T} ${serviceChain(id)}`,
      `delete chain ${T} ${serviceChain(id)}`,
      `flush chain ${T} ${classifyChain(id)}`,
      `delete chain ${T} ${classifyChain(id)}`,
      ...maskMapsOf(id).map((k) => `delete map ${T} ${maskMap(id, k)}`),
      `delete map ${T} ${bucketMap(id)}`,
      `delete set ${T} ${enginesSet(id)}`,
      `delete set ${T} ${bucketCounterSet(id)}`,
      `delete counter ${T} ${deniedCounter(id)}`,
      `delete counter ${T} ${unassignedCounter(id)}`,
      // Its slots' IPv6 counters go with the slots (releaseSlotLines).
      ...(removedIpv6.includes(id) ? dropIpv6Lines(id, []) : []),
    );
  }

  const ordered = [...plans].sort(compareServiceOrder);
  if (plans.some((p) => hasIpv6(p) && p.unchanged !== true)) lines.push(...hashChains6(T));
  for (const p of ordered)
    if (p.dropIpv6 === true) {
      lines.push(...dropIpv6Lines(p.serviceId, [...new Set(p.engineSlots.values())]));
    }
  for (const p of ordered) if (p.unchanged !== true) lines.push(...serviceObjects(p));
  for (const p of ordered) lines.push(...hookRules(p));
  if (options.untrack === true) lines.push(...untrackRules(plans));
  // Last: nothing refers to a released slot's chains any more (the claim chain refers to the slot chain).
  lines.push(...releaseSlotLines(slots.released, options.ipv6Slots));
  if (closed !== undefined) lines.push(...closedTableLines(closed));
  lines.push('');
  return lines.join('\n');
}

function serviceObjects(p: ServicePlan): string[] {
  const id = p.serviceId;
  const chain = serviceChain(id);
  const classify = classifyChain(id);
  const claimOf = (slot: number): string =>
    slot !== 0 ? `jump ${claimChain(slot)}` : p.refuse ? 'jump refused' : 'jump direct';
  const lines = [
    // Emptied first: its rules may refer to mask maps this transaction writes anew.
    `add chain ${T} ${classify}`,
    `flush chain ${T} ${classify}`,
    ...(p.previousMaskMaps ?? []).map((k) => `delete map ${T} ${maskMap(id, k)}`),
    ...(p.maskSets ?? []).flatMap((set, k) => maskMapLines(maskMap(id, k), set, claimOf)),
    `add set ${T} ${enginesSet(id)} { type ipv4_addr; }`,
    `flush set ${T} ${enginesSet(id)}`,
    ...(p.engines.length > 0 ? [`add element ${T} ${enginesSet(id)} { ${p.engines.join(', ')} }`] : []),
    `add map ${T} ${bucketMap(id)} { typeof meta priority : verdict; }`,
    `flush map ${T} ${bucketMap(id)}`,
    ...elementLines(
      bucketMap(id),
      p.bucketSlots.map((s, b) => `${b} : ${claimOf(s)}`),
    ),
  ];
  // Each engine slot's chain: the direction the service steers (its match: client interfaces, protocol, ports) is
  // counted and marked; the other direction (the engine's or the origin's answers) and anything else of the
  // connection passes unmarked. A service without client interfaces claims nothing: its slot chains stay empty.
  const v6 = hasIpv6(p);
  for (const s of [...new Set(p.engineSlots.values())].sort((a, b) => a - b)) {
    lines.push(`flush chain ${T} ${slotChain(s)}`);
    if (p.clientInterfaces.length > 0) {
      lines.push(
        `add rule ${T} ${slotChain(s)} ${serviceMatch(p)} counter name ${engineCounter(s)} ` +
          `${setField('meta mark', s)} accept`,
      );
      if (v6) {
        lines.push(
          `add counter ${T} ${engineCounter6(s)}`,
          `add rule ${T} ${slotChain(s)} ${serviceMatch(p, 'ipv6')} counter name ${engineCounter6(s)} ` +
            `${setField('meta mark', s)} accept`,
        );
      }
    }
    if (v6) {
      // The IPv6 hash leaves the bucket in meta priority, and IPv6 forwarding (unlike IPv4's, which sets it from the
      // TOS) keeps it: the claiming packet leaves with priority 0, as it arrived on any interface without a QoS map.
      lines.push(
        `flush chain ${T} ${claimChain(s)}`,
        `add rule ${T} ${claimChain(s)} meta nfproto ipv6 meta priority set 0`,
        `add rule ${T} ${claimChain(s)} ${setField('ct mark', s)} goto ${slotChain(s)}`,
      );
    }
  }
  lines.push(
    `add set ${T} ${bucketCounterSet(id)} { typeof meta priority; counter; }`,
    ...(p.countersExist === true
      ? []
      : [
          `add element ${T} ${bucketCounterSet(id)} { ${Array.from({ length: BUCKET_COUNT }, (_, b) => b).join(', ')} }`,
        ]),
    `add counter ${T} ${deniedCounter(id)}`,
    `add counter ${T} ${unassignedCounter(id)}`,
  );
  lines.push(
    ...(p.maskSets !== undefined
      ? maskClassifyRules(p, classify)
      : [
          // The exact WCCP hash (static chain, into meta priority), then bucket -> the claim: claim_<slot> (the
          // engine's slot into the conntrack mark field, then its slot chain: marked, counted, accepted), direct
          // (forward normally) or refused (fail closed). Never 0.
          `add rule ${T} ${classify} jump ${hashChain(p.hashField)}`,
          `add rule ${T} ${classify} meta priority @${bucketCounterSet(id)}`,
          `add rule ${T} ${classify} meta priority vmap @${bucketMap(id)}`,
        ]),
    // Cisco's "Unassigned" (forwarded normally) and "Denied Redirect" (refused while failing closed). Either way the
    // packet's fate is decided here, so no later service meets a connection this one claimed.
    `add rule ${T} ${classify} ct mark and ${M} == ${hex(fieldMark(DIRECT_VALUE))} counter name ${unassignedCounter(id)} accept`,
    `add rule ${T} ${classify} ct mark and ${M} == ${hex(fieldMark(REFUSED_VALUE))} counter name ${deniedCounter(id)} goto ${REJECT_CHAIN}`,
    `add chain ${T} ${chain}`,
    `flush chain ${T} ${chain}`,
    // Draft 4.10: never redirect what an engine sends (its own fetches to the origin).
    // Unclaimed: this service claims it (when its first packet is one the service classifies), unless an engine of
    // the group sent it: such a connection stays unclaimed. Only unclaimed packets reach a service's chain (the claims
    // map, and every classification ends with a verdict); the ct mark test keeps it so should that ever change.
    ...classifyWhen(p).map(
      (when) => `add rule ${T} ${chain} ${CT_UNCLAIMED} ${when}ip saddr != @${enginesSet(id)} jump ${classify}`,
    ),
  );
  if (v6) lines.push(...ipv6Objects(p, chain));
  return lines;
}

/**
 * A service's IPv6 classification (docs/dataplane/nft.md, "IPv6"): the same hash field folded from 128 bits
 * (hash6_*), its own bucket map (an engine without an IPv6 next hop: direct, or refused when failing closed), bucket
 * counters and unassigned/denied counters; the claims are the service's slots, as for IPv4.
 */
function ipv6Objects(p: ServicePlan, chain: string): string[] {
  const id = p.serviceId;
  const classify = classifyChain6(id);
  const claimOf = (slot: number): string =>
    slot > 0 ? `jump ${claimChain(slot)}` : slot === REFUSE_BUCKET || p.refuse ? 'jump refused' : 'jump direct';
  const engines = p.engines6 ?? [];
  const slots6 = p.bucketSlots6 ?? p.bucketSlots;
  return [
    `add chain ${T} ${classify}`,
    `flush chain ${T} ${classify}`,
    `add set ${T} ${enginesSet6(id)} { type ipv6_addr; }`,
    `flush set ${T} ${enginesSet6(id)}`,
    ...(engines.length > 0 ? [`add element ${T} ${enginesSet6(id)} { ${engines.join(', ')} }`] : []),
    `add map ${T} ${bucketMap6(id)} { typeof meta priority : verdict; }`,
    `flush map ${T} ${bucketMap6(id)}`,
    ...elementLines(
      bucketMap6(id),
      slots6.map((s, b) => `${b} : ${claimOf(s)}`),
    ),
    `add set ${T} ${bucketCounterSet6(id)} { typeof meta priority; counter; }`,
    ...(p.counters6Exist === true
      ? []
      : [
          `add element ${T} ${bucketCounterSet6(id)} { ${Array.from({ length: BUCKET_COUNT }, (_, b) => b).join(', ')} }`,
        ]),
    `add counter ${T} ${deniedCounter6(id)}`,
    `add counter ${T} ${unassignedCounter6(id)}`,
    `add rule ${T} ${classify} jump ${hashChain6(p.hashField)}`,
    `add rule ${T} ${classify} meta priority @${bucketCounterSet6(id)}`,
    `add rule ${T} ${classify} meta priority vmap @${bucketMap6(id)}`,
    // Back from direct or refused (a claim never comes back): the scratch priority is not left on the packet.
    `add rule ${T} ${classify} meta priority set 0`,
    `add rule ${T} ${classify} ct mark and ${M} == ${hex(fieldMark(DIRECT_VALUE))} counter name ${unassignedCounter6(id)} accept`,
    `add rule ${T} ${classify} ct mark and ${M} == ${hex(fieldMark(REFUSED_VALUE))} counter name ${deniedCounter6(id)} goto ${REJECT_CHAIN}`,
    ...classifyWhen(p).map(
      (when) => `add rule ${T} ${chain} ${CT_UNCLAIMED} ${when}ip6 saddr != @${enginesSet6(id)} jump ${classify}`,
    ),
  ];
}

/**
 * The classify rules of a mask service: each set in order, the packet's masked fields looked up in its map (a hit
 * claims the connection, so the next sets see it claimed and pass); no hit anywhere: unassigned (direct) or refused.
 * A set whose mask is all zeros matches every packet with its first all-zero value, if any.
 */
function maskClassifyRules(p: ServicePlan, classify: string): string[] {
  const rules: string[] = [];
  (p.maskSets ?? []).forEach((set, k) => {
    const guard = k === 0 ? '' : `${CT_UNCLAIMED} `;
    const fields = maskedFields(set);
    if (fields.length === 0) {
      const first = set.values[0];
      if (first !== undefined) {
        rules.push(
          `add rule ${T} ${classify} ${guard}jump ${first.slot !== 0 ? claimChain(first.slot) : p.refuse ? 'refused' : 'direct'}`,
        );
      }
      return;
    }
    rules.push(`add rule ${T} ${classify} ${guard}${maskKey(set)} vmap @${maskMap(p.serviceId, k)}`);
  });
  rules.push(`add rule ${T} ${classify} ${CT_UNCLAIMED} jump ${p.refuse ? 'refused' : 'direct'}`);
  return rules;
}

function hookRules(p: ServicePlan): string[] {
  if (p.clientInterfaces.length === 0) return [];
  return familiesOfPlan(p).map(
    (family) => `add rule ${T} ${UNCLAIMED_CHAIN} ${serviceMatch(p, family)} jump ${serviceChain(p.serviceId)}`,
  );
}
