// One ingress service's objects in its table, written from its plan (docs/dataplane/ingress.md, "The ingress backend"):
// its flow map and the chains that record, steer, close and reset flows, its verdict maps and engines set, its mask
// rules, and its slots' chains; after an earlier write, only what differs from it.
import { BUCKET_COUNT } from '../../buckets/table.js';
import { DIRECT_VALUE } from '../kernel/names.js';
import {
  bucketCounterSet,
  bucketMap,
  claimChain,
  classifyChain,
  deniedCounter,
  elementLines,
  engineCounter,
  enginesSet,
  hashCacheMap,
  hashCacheMap6,
  hashChain,
  hashChain6,
  maskKey,
  maskMap,
  maskMapLines,
  maskedFields,
  quote,
  rawAddress6,
  serviceChain,
  slotChain,
  unassignedCounter,
} from '../kernel/rules.js';
import type { ServicePlan } from '../kernel/rules.js';
import {
  I,
  SLOTS_MAP,
  GONE_CHAIN,
  DIRECT_CHAIN,
  LOST_VALUE,
  CLOSING_SECONDS,
  REOPEN_SECONDS,
  newFlowSeconds,
  CLOSING_FLAG,
  closingValue,
  flowsMap,
  flowsFullCounter,
  reopenedSet,
  closeChain,
  closingChain,
  closeNewChain,
  hashedChain,
  passChain,
  movedChain,
  lostChain,
  newClaimMap,
  oldClaimMap,
  newSteerMap,
  tcpChains,
  CLAIM_GONE,
  CLAIM_REFUSED,
  recordsMovedOnly,
  unassignedChain,
  refusedChain,
  flowKeyKind,
  flowKey,
  flowKeyType,
  familyName,
  tcpMaps,
} from './names.js';
import type { AddressFamily } from '../../vocabulary.js';
import type { FlowLimits, FlowKeyKind } from './names.js';

/** One engine slot of a service: where its packets go. */
export interface IngressSlot {
  readonly slot: number;
  readonly engine: string;
  /** The engine's interface (`ip route get`: on-link). */
  readonly device: string;
  /**
   * IPv6 (a service with `families: [.., ipv6]`): the engine's MAC address, its IPv4 neighbour entry's (null: none
   * yet, its IPv6 frames are routed normally), and the device's own, the frame's new source.
   */
  readonly mac?: string | null;
  readonly deviceMac?: string | null;
}

/** A service of the transaction (every service in force; `plan.unchanged` ones only get their hook rule again). */
export interface IngressService {
  readonly plan: ServicePlan;
  /** Which of the service's packets these objects take: IPv4 (default) or IPv6 (its names familyName's). */
  readonly family?: AddressFamily;
  /** IPv6: the seed of the flow key's hash (names.ts, flowKey), the same for every service of the table. */
  readonly keySeed?: number;
  /**
   * false: the service does not redirect this family (`families: [ipv6]` has no IPv4): its objects are kept, the base
   * chain has no rule to them.
   */
  readonly hooked?: boolean;
  /** Its engine slots (those of `plan.engineSlots`), with their devices. */
  readonly slots: readonly IngressSlot[];
  /** The flow key its flow map has in the kernel (none: the service is new): another one makes it again. */
  readonly previousKind?: FlowKeyKind;
  /**
   * recordsMovedOnly: its buckets that moved within the last flows.idle -> their claim before (a slot, or CLAIM_*).
   */
  readonly moved?: ReadonlyMap<number, number>;
  /** What the last transaction that wrote it wrote (none: write it whole). */
  readonly written?: IngressWritten;
}

/**
 * What a transaction wrote of a service, for the next one to write only what differs: its own chains' rules, and its
 * verdict maps' elements (an engine leaving a group of 32 that moves only its 8 buckets: those 8 buckets' elements,
 * not 256 and every moved bucket's).
 */
export interface IngressWritten {
  readonly rules: string;
  /** Each verdict map's elements, bucket -> verdict. */
  readonly elements: ReadonlyMap<string, ReadonlyMap<number, string>>;
  /** The engines set's addresses. */
  readonly engines: readonly string[];
}

/**
 * The TCP header's flags byte, FIN or RST set: raw, as the flow key (the base chain matched TCP already; `tcp flags`
 * would add its `meta l4proto tcp` test, two expressions more).
 */
const FIN_OR_RST = '@th,104,8 & 0x5 != 0';
/**
 * FIN, SYN or RST: svc_<id>'s first rule, as costly as a FIN/RST test, so a SYN leaves the open-flow rule (its refresh)
 * without a rule more on a data packet's path.
 */
const FIN_SYN_OR_RST = '@th,104,8 & 0x7 != 0';
/** SYN without FIN or RST (ACK or not): a SYN|FIN or SYN|RST is taken as the FIN or RST it carries. */
const SYN_NOT_FIN_RST = '@th,104,8 & 0x7 == 0x2';
/** SYN without ACK (a new connection's first packet), raw for the same reason. */
const SYN_ALONE = '@th,104,8 & 0x12 == 0x2';

/** The engines set: flushed and filled, or (`before`: its addresses in force) the engines that left and came. */
function engineSetLines(set: string, engines: readonly string[], before: readonly string[] | undefined): string[] {
  if (before === undefined)
    return [
      `flush set ${I} ${set}`,
      ...(engines.length > 0 ? [`add element ${I} ${set} { ${engines.join(', ')} }`] : []),
    ];
  const now = new Set(engines);
  const was = new Set(before);
  const left = before.filter((e) => !now.has(e));
  const came = engines.filter((e) => !was.has(e));
  return [
    ...(left.length > 0 ? [`delete element ${I} ${set} { ${left.join(', ')} }`] : []),
    ...(came.length > 0 ? [`add element ${I} ${set} { ${came.join(', ')} }`] : []),
  ];
}

/**
 * A verdict map's elements: all of them, the map flushed, or (`before`: the elements in force, at most half of them
 * to go) only the buckets whose verdict changes or that leave or join it, deleted and added in the same transaction.
 */
function verdictMapLines(
  map: string,
  next: ReadonlyMap<number, string>,
  before: ReadonlyMap<number, string> | undefined,
): string[] {
  const add = (keys: number[]): string[] =>
    elementLines(
      map,
      keys.map((b) => `${b} : ${next.get(b)}`),
      4096,
      I,
    );
  const gone = before === undefined ? [] : [...before].flatMap(([b, v]) => (next.get(b) === v ? [] : [b]));
  // Most of it changes (an engine-made round-robin table when an engine comes or goes): one flush is cheaper.
  if (before === undefined || gone.length > before.size / 2) return [`flush map ${I} ${map}`, ...add([...next.keys()])];
  const added = [...next].flatMap(([b, v]) => (before.get(b) === v ? [] : [b]));
  return [...(gone.length > 0 ? [`delete element ${I} ${map} { ${gone.join(', ')} }`] : []), ...add(added)];
}

/**
 * A slot chain's one rule: its packets counted and handed to its engine on its device (engine-watch.ts rewrites it
 * when the engine moves to another interface).
 */
export function slotRule(x: IngressSlot, family: AddressFamily = 'ipv4'): string {
  if (family === 'ipv4')
    return (
      `add rule ${I} ${slotChain(x.slot)} counter name ${engineCounter(x.slot)} meta priority set 0 ` +
      `fwd ip to ${x.engine} device ${quote(x.device)}`
    );
  // IPv6: the engine's MAC as the frame's destination, the device's as its source (as a router's frame; a switch
  // must not see the client's address arrive from the gateway), out of the device as it is. `fwd ip to` cannot: it
  // takes only IPv4 frames. No MAC known yet: routed normally, not counted.
  const chain = `${I} ${familyName(family, slotChain(x.slot))}`;
  if (x.mac == null || x.deviceMac == null) return `add rule ${chain} meta priority set 0 goto ${DIRECT_CHAIN}`;
  return (
    `add rule ${chain} counter name ${familyName(family, engineCounter(x.slot))} meta priority set 0 ` +
    `ether saddr set ${x.deviceMac} ether daddr set ${x.mac} fwd to ${quote(x.device)}`
  );
}

/**
 * Every object of one service, written from its plan (maps flushed and filled, chains flushed and refilled; after an
 * earlier write, `s.written`, only what differs from it), and what this writes.
 */
export function ingressServiceObjects(
  s: IngressService,
  limits: FlowLimits,
  added: ReadonlySet<number> = new Set(s.slots.map((x) => x.slot)),
): { lines: string[]; written: IngressWritten } {
  const p = s.plan;
  const id = p.serviceId;
  const family = s.family ?? 'ipv4';
  const v4 = family === 'ipv4';
  // Every name of the family's objects (IPv4's as they always were).
  const n = (name: string): string => familyName(family, name);
  const kind = flowKeyKind(p.protocol);
  const K = flowKey(kind, family, s.keySeed);
  const keyType = flowKeyType(kind, family);
  const flows = `@${n(flowsMap(id))}`;
  // The group's engines as the hook sees their own packets: IPv4 source addresses, or (IPv6, whose addresses the
  // engines never tell) the MAC addresses of their frames.
  const engines = v4 ? p.engines : [...new Set(s.slots.flatMap((x) => (x.mac != null ? [x.mac] : [])))].sort();
  const fromEngine = `${v4 ? 'ip saddr' : 'ether saddr'} @${n(enginesSet(id))}`;
  const claimOf = (slot: number): string =>
    slot !== 0
      ? `goto ${n(claimChain(slot))}`
      : p.refuse
        ? `goto ${n(refusedChain(id))}`
        : `goto ${n(unassignedChain(id))}`;
  const remade = s.previousKind !== undefined && s.previousKind !== kind;
  const movedOnly = recordsMovedOnly(p);
  const moved = movedOnly ? (s.moved ?? new Map<number, number>()) : new Map<number, number>();
  // recordsMovedOnly: a bucket that did not move is steered without a record (its slot, or routed, or refused).
  const steerOf = (slot: number): string =>
    slot !== 0 ? `goto ${n(slotChain(slot))}` : p.refuse ? `goto ${n(refusedChain(id))}` : `goto ${n(passChain(id))}`;
  const steadyOf = (slot: number, b: number): string => (moved.has(b) ? `goto ${n(movedChain(id))}` : steerOf(slot));
  const oldClaimOf = (old: number): string =>
    old === CLAIM_GONE
      ? `goto ${n(lostChain(id))}`
      : old === CLAIM_REFUSED
        ? `goto ${n(refusedChain(id))}`
        : claimOf(old);
  // The verdict maps' elements, bucket -> verdict: the bucket map, and a moved bucket's claim now, its claim before
  // and the table's steering now (TCP).
  const elements = new Map<string, Map<number, string>>([
    [n(bucketMap(id)), new Map(p.bucketSlots.map((slot, b) => [b, movedOnly ? steadyOf(slot, b) : claimOf(slot)]))],
  ]);
  if (kind === 'tcp') {
    const now = (b: number): number => p.bucketSlots[b] ?? 0;
    elements.set(n(newClaimMap(id)), new Map([...moved.keys()].map((b) => [b, claimOf(now(b))])));
    elements.set(n(oldClaimMap(id)), new Map([...moved].map(([b, old]) => [b, oldClaimOf(old)])));
    elements.set(n(newSteerMap(id)), new Map([...moved.keys()].map((b) => [b, steerOf(now(b))])));
  }
  // A record the full flow map refused: recordsMovedOnly, the bucket's steering now (newsteer_<id> holds every moved
  // bucket, and only a moved bucket's packet gets here: the last rule is unreached), otherwise the claim's own.
  const whenFull = (chain: string, own: string): string[] => [
    `add rule ${I} ${chain} counter name ${n(flowsFullCounter(id))} ${movedOnly ? `meta priority vmap @${n(newSteerMap(id))}` : own}`,
    ...(movedOnly ? [`add rule ${I} ${chain} meta priority set 0 accept`] : []),
  ];
  // A slot's chains name only its engine, its device and the service's flow map: written when the slot comes (or the
  // flow map is made anew), not again at every change of the service (32 engines in 8 services: ~2,000 lines fewer
  // when an engine leaves every group).
  const slots = remade ? s.slots : s.slots.filter((x) => added.has(x.slot));
  const ownChains = [
    serviceChain(id),
    classifyChain(id),
    unassignedChain(id),
    refusedChain(id),
    ...(kind === 'tcp' ? tcpChains(id) : []),
  ].map(n);
  const slotChains = slots.flatMap((x) => [claimChain(x.slot), slotChain(x.slot)].map(n));
  // Emptied first (the heads below): their rules may refer to maps this transaction deletes and writes anew.
  const lines: string[] = [];
  const own: string[] = [];
  if (remade) {
    // No longer TCP: its close and closing chains go (emptied before the flow map they name, after svc_<id>).
    const gone = s.previousKind === 'tcp' && kind !== 'tcp' ? tcpChains(id).map(n) : [];
    // Emptied, then the verdict maps they and the bucket map name (written again below), then deleted: a map or chain
    // still named is EBUSY.
    for (const ch of gone) lines.push(`flush chain ${I} ${ch}`);
    if (gone.length > 0)
      lines.push(`flush map ${I} ${n(bucketMap(id))}`, ...tcpMaps(id).map((m) => `delete map ${I} ${n(m)}`));
    for (const ch of gone) lines.push(`delete chain ${I} ${ch}`);
    if (gone.length > 0) lines.push(`delete set ${I} ${n(reopenedSet(id))}`);
    lines.push(`delete map ${I} ${n(flowsMap(id))}`);
  }
  lines.push(
    `add map ${I} ${n(flowsMap(id))} { typeof ${keyType} : meta priority; size ${limits.max}; ` +
      `timeout ${limits.idleSeconds}s; flags dynamic; }`,
    ...(kind === 'tcp'
      ? [
          `add set ${I} ${n(reopenedSet(id))} { typeof ${keyType}; size ${limits.max}; timeout ${REOPEN_SECONDS}s; ` +
            `flags dynamic; }`,
        ]
      : []),
    ...(p.previousMaskMaps ?? []).map((k) => `delete map ${I} ${maskMap(id, k)}`),
    ...(p.maskSets ?? []).flatMap((set, k) => maskMapLines(maskMap(id, k), set, claimOf, I)),
    `add set ${I} ${n(enginesSet(id))} { type ${v4 ? 'ipv4_addr' : 'ether_addr'}; }`,
    ...engineSetLines(n(enginesSet(id)), engines, remade ? undefined : s.written?.engines),
    ...[bucketMap(id), ...(kind === 'tcp' ? tcpMaps(id) : [])]
      .map(n)
      .flatMap((m) => [
        `add map ${I} ${m} { typeof meta priority : verdict; }`,
        ...verdictMapLines(m, elements.get(m) ?? new Map(), remade ? undefined : s.written?.elements.get(m)),
      ]),
    `add set ${I} ${n(bucketCounterSet(id))} { typeof meta priority; counter; }`,
    ...(p.countersExist === true
      ? []
      : [
          `add element ${I} ${n(bucketCounterSet(id))} { ${Array.from({ length: BUCKET_COUNT }, (_, b) => b).join(', ')} }`,
        ]),
    ...[deniedCounter, unassignedCounter, flowsFullCounter].map((c) => `add counter ${I} ${n(c(id))}`),
  );
  // A first packet's entry: short, until the flow's second packet (svc_<id>'s refresh) gives it the map's timeout.
  const firstTimeout = `timeout ${newFlowSeconds(limits)}s`;
  // TCP: a FIN or RST classified here had no entry: recorded closing by closenew_<id>, its value in `meta priority`.
  const closeNew = (value: number): string[] =>
    kind === 'tcp' ? [`${FIN_OR_RST} meta priority set ${closingValue(value)} goto ${n(closeNewChain(id))}`] : [];
  for (const x of slots) {
    lines.push(
      `add counter ${I} ${n(engineCounter(x.slot))}`,
      ...closeNew(x.slot).map((r) => `add rule ${I} ${n(claimChain(x.slot))} ${r}`),
      // A new flow: recorded (until its second packet, for NEW_FLOW_SECONDS only), then steered; with the map full,
      // steered all the same (not sticky, counted).
      `add rule ${I} ${n(claimChain(x.slot))} add ${flows} { ${K} ${firstTimeout} : ${x.slot} } goto ${n(slotChain(x.slot))}`,
      ...whenFull(n(claimChain(x.slot)), `goto ${n(slotChain(x.slot))}`),
      slotRule(x, family),
    );
  }
  const unassigned = `${I} ${n(unassignedChain(id))}`;
  own.push(
    // Cisco's "Unassigned": counted once per flow, recorded so the flow stays direct when its bucket gets an engine.
    `add rule ${unassigned} counter name ${n(unassignedCounter(id))}`,
    ...closeNew(DIRECT_VALUE).map((r) => `add rule ${unassigned} ${r}`),
    `add rule ${unassigned} add ${flows} { ${K} ${firstTimeout} : ${DIRECT_VALUE} } goto ${DIRECT_CHAIN}`,
    ...whenFull(n(unassignedChain(id)), `goto ${DIRECT_CHAIN}`),
    // Cisco's "Denied Redirect" (fail closed, no usable engine): refused, not recorded.
    `add rule ${I} ${n(refusedChain(id))} counter name ${n(deniedCounter(id))} goto ${GONE_CHAIN}`,
  );
  const classify = `${I} ${n(classifyChain(id))}`;
  const hash = v4 ? hashChain(p.hashField) : hashChain6(p.hashField);
  // Never the gateway's own address: such a packet was never the service's to redirect.
  own.push(`add rule ${classify} fib daddr type local accept`);
  // Draft 4.10: what an engine of the group sends is never redirected (its own fetches from the origin). Tested here,
  // not before the flow lookup: an engine's flow is never recorded, so a recorded flow's packets skip this lookup.
  if (engines.length > 0) own.push(`add rule ${classify} ${fromEngine} return`);
  if (p.maskSets !== undefined) own.push(...ingressMaskRules(p, classify, claimOf));
  else if (movedOnly) {
    own.push(`add rule ${classify} jump ${hash}`, `add rule ${classify} goto ${n(hashedChain(id))}`);
    const hashed = `${I} ${n(hashedChain(id))}`;
    const pass = `${I} ${n(passChain(id))}`;
    const movedRules = `${I} ${n(movedChain(id))}`;
    own.push(
      // New connections per bucket (the admin's chart): its SYNs, since no other packet of it is classified once.
      `add rule ${hashed} ${SYN_ALONE} meta priority @${n(bucketCounterSet(id))}`,
      `add rule ${hashed} meta priority vmap @${n(bucketMap(id))}`,
      `add rule ${pass} ${SYN_ALONE} counter name ${n(unassignedCounter(id))}`,
      `add rule ${pass} goto ${DIRECT_CHAIN}`,
      // A moved bucket's SYN: a new connection, the bucket's engine now; any other packet without an entry belongs to
      // a connection older than the move: its engine before (reset if that one left). Both recorded, as claimed.
      `add rule ${movedRules} ${SYN_ALONE} meta priority vmap @${n(newClaimMap(id))}`,
      `add rule ${movedRules} meta priority vmap @${n(oldClaimMap(id))}`,
      // Unreached (both maps hold every moved bucket): routed, the scratch cleared.
      `add rule ${movedRules} meta priority set 0 accept`,
      // An older connection of an engine that left: reset, recorded closing so its retransmissions are; the map full:
      // the table now (it may be a new connection whose SYN found the map full).
      `add rule ${I} ${n(lostChain(id))} add ${flows} { ${K} timeout ${CLOSING_SECONDS}s : ${closingValue(LOST_VALUE)} } ` +
        `goto ${GONE_CHAIN}`,
      ...whenFull(n(lostChain(id)), `goto ${GONE_CHAIN}`),
    );
  } else {
    own.push(
      `add rule ${classify} jump ${hash}`,
      `add rule ${classify} meta priority @${n(bucketCounterSet(id))}`,
      `add rule ${classify} meta priority vmap @${n(bucketMap(id))}`,
    );
  }
  const svc = `${I} ${n(serviceChain(id))}`;
  const lookup = `meta priority set ${K} map ${flows}`;
  const steer = `meta priority vmap @${n(SLOTS_MAP)}`;
  if (kind === 'tcp') {
    const flag = `0x${CLOSING_FLAG.toString(16)}`;
    own.push(
      // The client's FIN or RST (the entry becomes closing) or a SYN (not refreshed): close_<id> sorts them.
      `add rule ${svc} ${FIN_SYN_OR_RST} ${lookup} goto ${n(closeChain(id))}`,
      // An open flow: its idle time starts again (a new flow's second packet: from NEW_FLOW_SECONDS to the map's
      // timeout, as the update names none), and its value (slot or direct) decides. A closing one's value has
      // the flag: the rule ends before the refresh, so the last ACK of a close does not give it the idle timeout back.
      // A SYN never gets here (the rule above took it): a retransmitted SYN is no sign the flow is established.
      `add rule ${svc} ${lookup} meta priority & ${flag} == 0 update ${flows} { ${K} : meta priority } ${steer}`,
      // A closing flow (or, after a miss, a priority with that bit from an earlier filter: the chain looks again).
      `add rule ${svc} meta priority & ${flag} != 0 goto ${n(closingChain(id))}`,
    );
    const close = `${I} ${n(closeChain(id))}`;
    own.push(
      // A SYN on an open entry (the SYN's retransmission, or a forger's second SYN): steered by the entry, which keeps
      // its timeout (NEW_FLOW_SECONDS until the handshake's ACK); on a closing entry: closing_<id> (a new connection).
      `add rule ${close} ${SYN_NOT_FIN_RST} meta priority & ${flag} == 0 ${steer}`,
      `add rule ${close} ${SYN_NOT_FIN_RST} goto ${n(closingChain(id))}`,
      // A FIN or RST on a closing entry (a retransmission, or a flood of them): steered, the entry left as it is, so
      // its 10 s run from the first and no such packet makes the map write.
      `add rule ${close} meta priority & ${flag} != 0 ${steer}`,
      // A packet path update cannot change an entry's value: the open entry is deleted (freed by the set's garbage
      // collection) and added again, closing, with CLOSING_SECONDS.
      `add rule ${close} meta priority set meta priority | ${flag} delete ${flows} { ${K} : meta priority } ` +
        `add ${flows} { ${K} timeout ${CLOSING_SECONDS}s : meta priority } ${steer}`,
      // The map full (the deleted entry counts until collected): steered by its value once, counted; its later packets
      // are new flows.
      `add rule ${close} counter name ${n(flowsFullCounter(id))} ${steer}`,
      `add rule ${close} meta priority set 0 goto ${n(classifyChain(id))}`,
    );
    const closing = `${I} ${n(closingChain(id))}`;
    const reopened = `@${n(reopenedSet(id))}`;
    own.push(
      // A new SYN on a closing 4-tuple (the port reused within CLOSING_SECONDS): a new connection, classified by the
      // current table and recorded open. Not if the 4-tuple was opened again within REOPEN_SECONDS, nor with the
      // reopened set full: then the rule below steers it by the closing entry (the same engine while the table is the
      // same), nothing written.
      `add rule ${closing} ${SYN_ALONE} ${K} != ${reopened} add ${reopened} { ${K} } ${lookup} meta priority set 0 ` +
        `delete ${flows} { ${K} : meta priority } goto ${n(classifyChain(id))}`,
      // Any other packet of a closing flow: steered by its entry, which is not refreshed.
      `add rule ${closing} ${lookup} ${steer}`,
      `add rule ${closing} goto ${n(classifyChain(id))}`,
    );
    const closeNewRules = `${I} ${n(closeNewChain(id))}`;
    own.push(
      // A FIN or RST with no entry, classified (claim_<s> or unassigned_<id> set its value, closing): recorded for
      // CLOSING_SECONDS, so the flow's last packets follow it (a table change within them included) and a flood of
      // them holds no entry for the idle timeout. Never back to classify: that would be a loop (claim -> here).
      `add rule ${closeNewRules} add ${flows} { ${K} timeout ${CLOSING_SECONDS}s : meta priority } ${steer}`,
      // The map full: steered by its value all the same, counted (as a new flow is).
      `add rule ${closeNewRules} counter name ${n(flowsFullCounter(id))} ${steer}`,
      // Unreached (@slots has both values of every live slot and of the direct value): routed, the scratch cleared.
      `add rule ${closeNewRules} meta priority set 0 accept`,
    );
  } else {
    // A recorded flow: its idle time starts again (from NEW_FLOW_SECONDS to the map's timeout at its second packet),
    // and its value (slot or direct) decides.
    own.push(`add rule ${svc} ${lookup} update ${flows} { ${K} : meta priority } ${steer}`);
  }
  if (movedOnly) {
    // No entry, and the destination's bucket known (hashed within HASH_CACHE's minute): steered by the bucket, nothing
    // recorded where it did not move. An engine's own packets first, as classify_<id> does; a destination in the cache
    // was not the gateway's own when it was hashed (classify_<id> tests that first).
    if (engines.length > 0) own.push(`add rule ${svc} ${fromEngine} return`);
    const cached = v4
      ? `ip daddr map @${hashCacheMap('daddr')}`
      : `${rawAddress6('daddr')} map @${hashCacheMap6('daddr')}`;
    own.push(`add rule ${svc} meta priority set ${cached} goto ${n(hashedChain(id))}`);
  }
  // No entry: a new flow, one older than the table, or one idle past the timeout.
  own.push(`add rule ${svc} goto ${n(classifyChain(id))}`);
  // Its own chains' rules name no slot and no bucket: unless they differ from what the last transaction wrote, they are
  // left as they are (8 services: ~350 rules fewer per change, each one's vmaps walked again by the kernel). Not when
  // the flow map or a mask map is made anew: their rules must let go of it first.
  const ownText = own.join('\n');
  const keepOwn =
    !remade &&
    (p.maskSets ?? []).length === 0 &&
    (p.previousMaskMaps ?? []).length === 0 &&
    s.written?.rules === ownText;
  const heads = (keepOwn ? slotChains : [...ownChains, ...slotChains]).flatMap((ch) => [
    `add chain ${I} ${ch}`,
    `flush chain ${I} ${ch}`,
  ]);
  return {
    lines: [...heads, ...lines, ...(keepOwn ? [] : own)],
    written: { rules: ownText, elements, engines },
  };
}

/** A mask service's classification: each set in order, the first hit decides; no hit: unassigned or refused. */
function ingressMaskRules(p: ServicePlan, classify: string, claimOf: (slot: number) => string): string[] {
  const rules: string[] = [];
  for (const [k, set] of (p.maskSets ?? []).entries()) {
    if (maskedFields(set).length === 0) {
      const first = set.values[0];
      if (first !== undefined) {
        rules.push(`add rule ${classify} ${claimOf(first.slot)}`);
        return rules;
      }
      continue;
    }
    rules.push(`add rule ${classify} ${maskKey(set)} vmap @${maskMap(p.serviceId, k)}`);
  }
  rules.push(`add rule ${classify} ${claimOf(0)}`);
  return rules;
}
