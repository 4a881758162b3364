// Pure generation of the ingress backend's ruleset text (docs/dataplane/ingress.md, "The ingress backend"). Nothing
// here runs a command.
//
// Table `netdev wccpd_ingress`: base chains in the ingress hook of the client interfaces, so a redirected packet is
// handed to its engine by L2 (`fwd ip to <engine> device <dev>`: the frame's destination MAC is the engine's, the IP
// header is untouched) before routing, conntrack or any ip rule sees it. Stickiness is a per-service flow map filled
// from the packet path: the first packet of a flow is classified by the current table (the same exact WCCP hash as
// the nft backend, ruleset.ts's @byte/@nibxor chains, or the mask maps) and its verdict recorded as an engine slot
// number; later packets look it up. `meta priority` (skb->priority) carries the bucket and the slot number as scratch:
// every path that wrote it sets it back to 0 before the packet leaves the hook, so no qdisc ever sees our value.
import { BUCKET_COUNT } from '../../buckets/table.js';
import { DIRECT_VALUE, INGRESS_FAMILY, INGRESS_TABLE, RESERVED_FIRST } from '../kernel/names.js';
import {
  bucketCounterSet,
  bucketMap,
  claimChain,
  classifyChain,
  compareServiceOrder,
  deniedCounter,
  elementLines,
  engineCounter,
  enginesSet,
  hashCacheMap,
  hashChain,
  hashStatics,
  maskKey,
  maskMap,
  maskMapLines,
  maskedFields,
  portProtocol,
  quote,
  serviceChain,
  slotChain,
  unassignedCounter,
} from '../kernel/rules.js';
import type { ServicePlan } from '../kernel/rules.js';

export { DIRECT_VALUE };

const I = `${INGRESS_FAMILY} ${INGRESS_TABLE}`;

/**
 * A flow's recorded value (an engine slot, or DIRECT_VALUE; with CLOSING_FLAG once its client sent FIN or RST) -> what
 * becomes of its packets. Both values of a slot (open and closing) name the same chain.
 */
export const SLOTS_MAP = 'slots';
/** A flow whose engine left: its packets are reset (TCP) or refused, never left to hang. */
export const GONE_CHAIN = 'gone';
/** A flow recorded as unassigned: forwarded normally (routed), by this and every later packet. */
export const DIRECT_CHAIN = 'direct';
/**
 * The recorded value of a connection older than its bucket's move whose engine has left since: reset by `gone` (never
 * a slot, DIRECT_VALUE or the nft backend's REFUSED_VALUE).
 */
export const LOST_VALUE = RESERVED_FIRST + 2;
/** After the client's first FIN or RST, its flow entry lasts this long (a later FIN or RST does not extend it). */
export const CLOSING_SECONDS = 10;
/**
 * A closing 4-tuple is opened again (a new SYN: classified anew, recorded open) at most once in this long; a SYN
 * within it is steered by the closing entry. Every open-close cycle of a 4-tuple leaves two deleted entries in the
 * flow map until its garbage collection (each second, and not while the table is being resized), all in one hash
 * chain: unbounded, a client sending SYN and FIN on one 4-tuple made the kernel rehash the whole map again and again
 * (docs/dataplane/ingress.md, "One 4-tuple's churn"). A client reusing a port to the same server more often than this
 * is not a real one: it takes a whole port range of connections in between.
 */
export const REOPEN_SECONDS = 1;
/**
 * A new flow's entry lasts this long after its first packet (flows.idle if that is shorter): its second packet
 * refreshes it, and the refresh names no timeout, so the entry then has the map's (flows.idle). A TCP SYN never
 * refreshes: a retransmitted SYN is steered by the entry but leaves its timeout, so an unanswered connection attempt
 * (or a forger's SYN sent twice) holds its entry 30 s, not the idle timeout. A forged packet of an unknown 4-tuple
 * (a SYN, a bare ACK, data, a UDP datagram) holds an entry for 30 s. Long enough for any flow's second packet in
 * normal use: TCP's is the handshake's ACK one round trip after the SYN-ACK, or after the SYN's retransmissions (sent
 * 1, 3, 7 and 15 s after the first SYN on Linux, RFC 6298's 1 s doubling: all within the 30 s); 30 s is conntrack's
 * unreplied-UDP timeout. A flow whose second packet comes later is classified again by the current table
 * (the same engine unless the table changed in between).
 */
export const NEW_FLOW_SECONDS = 30;
/** The first packet's entry timeout for these limits: NEW_FLOW_SECONDS, never longer than the idle timeout. */
export const newFlowSeconds = (limits: FlowLimits): number => Math.min(NEW_FLOW_SECONDS, limits.idleSeconds);
/**
 * In a TCP flow's recorded value: its client sent FIN or RST (the entry lasts CLOSING_SECONDS and no packet refreshes
 * it). Above every slot and DIRECT_VALUE (13 bits); `nft list map` shows it as major 1 (`1:5` is slot 5, closing).
 */
export const CLOSING_FLAG = 0x10000;
/** A recorded value with the closing mark. */
export const closingValue = (value: number): number => value | CLOSING_FLAG;
/** An admin's own ingress filter at `filter` (0) runs before ours. */
export const HOOK_PRIORITY = 'filter + 10';

export const flowsMap = (id: number): string => `flows_${id}`;
export const flowsFullCounter = (id: number): string => `flows_full_${id}`;
/** TCP: the 4-tuples opened again within the last REOPEN_SECONDS. */
export const reopenedSet = (id: number): string => `reopened_${id}`;
/**
 * TCP: a packet with FIN, SYN or RST of a flow with an entry. The client's FIN or RST rewrites an open entry as closing
 * (value with CLOSING_FLAG, CLOSING_SECONDS) and is steered by a closing one; a SYN (a retransmission) is steered by an
 * open entry without refreshing it, and on a closing entry goes on to closing_<id> (a new connection on the 4-tuple).
 */
export const closeChain = (id: number): string => `close_${id}`;
/**
 * TCP: a packet of a closing flow: steered by its entry without refreshing it; a new SYN is a new flow (once in
 * REOPEN_SECONDS per 4-tuple).
 */
export const closingChain = (id: number): string => `closing_${id}`;
/**
 * TCP: a FIN or RST with no entry (a late one of a flow whose entry is gone, or forged), classified like a new flow's
 * first packet: recorded closing (CLOSING_SECONDS), not open for the idle timeout.
 */
export const closeNewChain = (id: number): string => `closenew_${id}`;
/**
 * TCP, hashed on the destination: a packet with no flow entry whose bucket is known (the hash cache, or classify_<id>
 * just hashed it): a SYN counted in the bucket's counter, then the bucket's verdict (docs/dataplane/ingress.md,
 * "Recorded only where a bucket moved").
 */
export const hashedChain = (id: number): string => `hashed_${id}`;
/** TCP: an unassigned bucket that did not move: routed, nothing recorded; a SYN counted as Unassigned. */
export const passChain = (id: number): string => `pass_${id}`;
/**
 * TCP: a packet with no flow entry in a bucket that moved within the last flows.idle: a SYN is a new connection (the
 * bucket's engine now, recorded), anything else one older than the move (the bucket's engine before it, recorded).
 */
export const movedChain = (id: number): string => `moved_${id}`;
/**
 * TCP: a packet without an entry in a moved bucket whose claim before the move was an engine that has left since: a
 * connection of that engine, reset (recorded for CLOSING_SECONDS, so its retransmissions are too).
 */
export const lostChain = (id: number): string => `lost_${id}`;
/** TCP: a moved bucket -> the claim of its engine now (a new connection's). */
export const newClaimMap = (id: number): string => `newclaim_${id}`;
/** TCP: a moved bucket -> the claim of its engine before the move (a connection older than it). */
export const oldClaimMap = (id: number): string => `oldclaim_${id}`;
/**
 * TCP: a moved bucket -> its steering now without a record: where the flow map is full, a packet without an entry
 * follows the table (a new connection's SYN could not be recorded, so its other packets cannot be told from an older
 * connection's; as every flow was steered before this design, with a full map).
 */
export const newSteerMap = (id: number): string => `newsteer_${id}`;
/** The chains a TCP service has beyond every service's. */
export const tcpChains = (id: number): string[] => [
  closeChain(id),
  closingChain(id),
  closeNewChain(id),
  hashedChain(id),
  passChain(id),
  movedChain(id),
  lostChain(id),
];
/** The verdict maps a TCP service has beyond every service's (deleted before the chains their elements name). */
const tcpMaps = (id: number): string[] => [newClaimMap(id), oldClaimMap(id), newSteerMap(id)];

// A moved bucket's claim before the move where that was no live engine slot: no engine (routed); an engine whose slot
// was released since (it left: its connections are reset, as a recorded flow's are); no engine, the service refusing.
export const CLAIM_UNASSIGNED = 0;
export const CLAIM_GONE = -1;
export const CLAIM_REFUSED = -2;

/**
 * A service whose buckets are recorded only where they moved: TCP (a SYN tells a new connection from an older one) and
 * hashed on the destination (the hash cache's key). Others record every flow.
 */
export const recordsMovedOnly = (p: Pick<ServicePlan, 'protocol' | 'maskSets' | 'hashField'>): boolean =>
  flowKeyKind(p.protocol) === 'tcp' && p.maskSets === undefined && p.hashField === 'daddr';
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
export const unassignedChain = (id: number): string => `unassigned_${id}`;
export const refusedChain = (id: number): string => `refused_${id}`;
/** The base chain; a change of the client interfaces makes a new one (the next number) in the same transaction. */
export const hookChain = (n: number): string => `ingress_${n}`;

/** The flow maps' bounds (config `dataplane.flows`). */
export interface FlowLimits {
  /** Entries per service; beyond it new flows are redirected but not recorded. */
  readonly max: number;
  /** An entry goes this long after its flow's last packet from the client. */
  readonly idleSeconds: number;
}

/**
 * As the config's defaults (FLOWS_MAX_DEFAULT: 262,143, not 262,144, because the kernel also takes the map's size,
 * in 16 bits, as its first hash table size: this one starts at 131,072 buckets instead of 64).
 */
export const DEFAULT_FLOW_LIMITS: FlowLimits = { max: 262_143, idleSeconds: 600 };

/** What identifies a flow of a service: the 4-tuple for TCP and UDP, the address pair for other protocols. */
export type FlowKeyKind = 'tcp' | 'udp' | 'addresses';

export const flowKeyKind = (protocol: number): FlowKeyKind => portProtocol(protocol) ?? 'addresses';

/** The packet's flow key, as a map key expression (also its `typeof`). */
export const flowKey = (kind: FlowKeyKind): string => (kind === 'addresses' ? '@nh,96,64' : '@nh,96,64 . @th,0,32');

/** Removes our table if it exists (the `add` makes the `delete` safe when it does not). */
export function removeIngressTableRuleset(): string {
  return `add table ${I}\ndelete table ${I}\n`;
}

/**
 * The static part (start()): the hash maps and chains, the slots map, `gone` and `direct`. No hook yet: nothing
 * passes through the table until a service with client interfaces is applied.
 */
export function ingressBaseRuleset(): string {
  return [
    removeIngressTableRuleset().trimEnd(),
    `add table ${I}`,
    ...hashStatics(I, { cache: true }),
    `add map ${I} ${SLOTS_MAP} { typeof meta priority : verdict; }`,
    `add chain ${I} ${GONE_CHAIN}`,
    `add rule ${I} ${GONE_CHAIN} meta priority set 0`,
    `add rule ${I} ${GONE_CHAIN} meta l4proto tcp reject with tcp reset`,
    `add rule ${I} ${GONE_CHAIN} reject`,
    `add chain ${I} ${DIRECT_CHAIN}`,
    `add rule ${I} ${DIRECT_CHAIN} meta priority set 0 accept`,
    `add element ${I} ${SLOTS_MAP} { ${DIRECT_VALUE} : goto ${DIRECT_CHAIN}, ${closingValue(DIRECT_VALUE)} : goto ${DIRECT_CHAIN} }`,
    `add element ${I} ${SLOTS_MAP} { ${closingValue(LOST_VALUE)} : goto ${GONE_CHAIN} }`,
    '',
  ].join('\n');
}

/** One engine slot of a service: where its packets go. */
export interface IngressSlot {
  readonly slot: number;
  readonly engine: string;
  /** The engine's interface (`ip route get`: on-link). */
  readonly device: string;
}

/** A service of the transaction (every service in force; `plan.unchanged` ones only get their hook rule again). */
export interface IngressService {
  readonly plan: ServicePlan;
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

/** A service whose objects go. */
export interface IngressRemoved {
  readonly serviceId: number;
  /** The mask maps it had. */
  readonly maskMaps: readonly number[];
  /** Its flow key (TCP services have the close, closing and closenew chains too). */
  readonly kind: FlowKeyKind;
}

export interface IngressChange {
  readonly services: readonly IngressService[];
  readonly removed?: readonly IngressRemoved[];
  /** Slots no service holds any more: their chains and counter go, their flows are reset (@slots -> gone). */
  readonly released?: readonly number[];
  /** Slots new in this transaction (their @slots entry is written; a `gone` one replaced). */
  readonly added?: readonly number[];
  /** Slots whose @slots entry is `goto gone` before this transaction. */
  readonly goneBefore?: ReadonlySet<number>;
  /** The base chain now (null: none, no service has a client interface) and the one in force before. */
  readonly hook: { readonly chain: number | null; readonly previous: number | null };
  readonly limits: FlowLimits;
}

/** Every client interface of the services, sorted: the base chain's devices. */
export function hookDevices(plans: readonly Pick<ServicePlan, 'clientInterfaces'>[]): string[] {
  return [...new Set(plans.flatMap((p) => p.clientInterfaces))].sort();
}

/**
 * The match of a service's client packets in the base chain: its ports first, then IPv4 (an IPv6 packet never
 * matches), protocol, and the arriving interface only where the service does not listen on every device of the
 * chain. Ports first: every packet on a client interface meets this rule, and one of another port (unrelated traffic,
 * most of it) fails at the first compare, 2 expressions where the protocol tests first made it 6. `th` reads the
 * transport header raw, with no protocol test of its own (the tests after it make the match exact; a packet with no
 * transport header, ARP or a fragment, fails the load).
 */
export function ingressMatch(
  p: Pick<ServicePlan, 'clientInterfaces' | 'protocol' | 'ports' | 'portsAreSource'>,
  devices: readonly string[],
): string {
  const mine = new Set(p.clientInterfaces);
  const parts: string[] = [];
  if (p.ports.length > 0) parts.push(`th ${p.portsAreSource ? 'sport' : 'dport'} { ${p.ports.join(', ')} }`);
  parts.push('meta protocol ip', `meta l4proto ${portProtocol(p.protocol) ?? String(p.protocol)}`);
  if (devices.some((d) => !mine.has(d))) parts.push(`iifname { ${[...mine].sort().map(quote).join(', ')} }`);
  return parts.join(' ');
}

/**
 * One atomic transaction: the base chain and its rules (one per service with client interfaces, in
 * compareServiceOrder), the written services' objects, the removed services' and released slots' objects gone, and
 * @slots in step (a released slot's flows are reset by `gone` until its number is placed again).
 */
export function ingressServicesRuleset(c: IngressChange): string {
  return ingressServicesWrite(c).text;
}

/** ingressServicesRuleset, and what it writes of each service it writes (for the next change's `written`). */
export function ingressServicesWrite(c: IngressChange): { text: string; written: Map<number, IngressWritten> } {
  const written = new Map<number, IngressWritten>();
  const removed = c.removed ?? [];
  const released = c.released ?? [];
  const added = c.added ?? [];
  const lines: string[] = [];
  const devices = hookDevices(c.services.map((s) => s.plan));
  const { chain: hook, previous } = c.hook;
  if (hook !== null && hook === previous) lines.push(`flush chain ${I} ${hookChain(hook)}`);
  else {
    if (previous !== null) lines.push(`flush chain ${I} ${hookChain(previous)}`);
    if (hook !== null) {
      lines.push(
        `add chain ${I} ${hookChain(hook)} { type filter hook ingress devices = { ${devices.map(quote).join(', ')} } ` +
          `priority ${HOOK_PRIORITY}; policy accept; }`,
      );
    }
  }
  const removedChains = (r: IngressRemoved): string[] => [
    ...[serviceChain, classifyChain, unassignedChain, refusedChain].map((ch) => ch(r.serviceId)),
    ...(r.kind === 'tcp' ? tcpChains(r.serviceId) : []),
  ];
  for (const r of removed) for (const ch of removedChains(r)) lines.push(`flush chain ${I} ${ch}`);
  for (const s of released) lines.push(`flush chain ${I} ${claimChain(s)}`, `flush chain ${I} ${slotChain(s)}`);
  const ordered = [...c.services].sort((a, b) => compareServiceOrder(a.plan, b.plan));
  const fresh = new Set(added);
  for (const s of ordered) {
    if (s.plan.unchanged === true) continue;
    const objects = ingressServiceObjects(s, c.limits, fresh);
    lines.push(...objects.lines);
    written.set(s.plan.serviceId, objects.written);
  }
  // Both values of a slot, open and closing, go to the same chain.
  const both = (s: number, chain: string): string => `${s} : goto ${chain}, ${closingValue(s)} : goto ${chain}`;
  for (const s of added) {
    if (c.goneBefore?.has(s) === true) lines.push(`delete element ${I} ${SLOTS_MAP} { ${s}, ${closingValue(s)} }`);
    lines.push(`add element ${I} ${SLOTS_MAP} { ${both(s, slotChain(s))} }`);
  }
  for (const s of released) {
    lines.push(
      `delete element ${I} ${SLOTS_MAP} { ${s}, ${closingValue(s)} }`,
      `add element ${I} ${SLOTS_MAP} { ${both(s, GONE_CHAIN)} }`,
    );
  }
  for (const r of removed) {
    const id = r.serviceId;
    lines.push(
      // The verdict maps first: their elements name unassigned_<id> and refused_<id> (`goto`), which the kernel will
      // not delete while they do (EBUSY).
      ...r.maskMaps.map((k) => `delete map ${I} ${maskMap(id, k)}`),
      `delete map ${I} ${bucketMap(id)}`,
      ...(r.kind === 'tcp' ? tcpMaps(id).map((m) => `delete map ${I} ${m}`) : []),
      ...removedChains(r).map((ch) => `delete chain ${I} ${ch}`),
      `delete map ${I} ${flowsMap(id)}`,
      ...(r.kind === 'tcp' ? [`delete set ${I} ${reopenedSet(id)}`] : []),
      `delete set ${I} ${enginesSet(id)}`,
      `delete set ${I} ${bucketCounterSet(id)}`,
      ...[deniedCounter, unassignedCounter, flowsFullCounter].map((n) => `delete counter ${I} ${n(id)}`),
    );
  }
  for (const s of released) {
    lines.push(
      `delete chain ${I} ${claimChain(s)}`,
      `delete chain ${I} ${slotChain(s)}`,
      `delete counter ${I} ${engineCounter(s)}`,
    );
  }
  if (hook !== null) {
    for (const s of ordered) {
      if (s.plan.clientInterfaces.length === 0) continue;
      lines.push(
        `add rule ${I} ${hookChain(hook)} ${ingressMatch(s.plan, devices)} jump ${serviceChain(s.plan.serviceId)}`,
      );
    }
  }
  if (previous !== null && previous !== hook) lines.push(`delete chain ${I} ${hookChain(previous)}`);
  lines.push('');
  return { text: lines.join('\n'), written };
}

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
 * A slot chain's one rule: its packets counted and handed to its engine on its device (ingress.ts rewrites it when the
 * engine moves to another interface).
 */
export function slotRule(x: IngressSlot): string {
  return (
    `add rule ${I} ${slotChain(x.slot)} counter name ${engineCounter(x.slot)} meta priority set 0 ` +
    `fwd ip to ${x.engine} device ${quote(x.device)}`
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
  const kind = flowKeyKind(p.protocol);
  const K = flowKey(kind);
  const flows = `@${flowsMap(id)}`;
  const claimOf = (slot: number): string =>
    slot !== 0 ? `goto ${claimChain(slot)}` : p.refuse ? `goto ${refusedChain(id)}` : `goto ${unassignedChain(id)}`;
  const remade = s.previousKind !== undefined && s.previousKind !== kind;
  const movedOnly = recordsMovedOnly(p);
  const moved = movedOnly ? (s.moved ?? new Map<number, number>()) : new Map<number, number>();
  // recordsMovedOnly: a bucket that did not move is steered without a record (its slot, or routed, or refused).
  const steerOf = (slot: number): string =>
    slot !== 0 ? `goto ${slotChain(slot)}` : p.refuse ? `goto ${refusedChain(id)}` : `goto ${passChain(id)}`;
  const steadyOf = (slot: number, b: number): string => (moved.has(b) ? `goto ${movedChain(id)}` : steerOf(slot));
  const oldClaimOf = (old: number): string =>
    old === CLAIM_GONE ? `goto ${lostChain(id)}` : old === CLAIM_REFUSED ? `goto ${refusedChain(id)}` : claimOf(old);
  // The verdict maps' elements, bucket -> verdict: the bucket map, and a moved bucket's claim now, its claim before
  // and the table's steering now (TCP).
  const elements = new Map<string, Map<number, string>>([
    [bucketMap(id), new Map(p.bucketSlots.map((slot, b) => [b, movedOnly ? steadyOf(slot, b) : claimOf(slot)]))],
  ]);
  if (kind === 'tcp') {
    const now = (b: number): number => p.bucketSlots[b] ?? 0;
    elements.set(newClaimMap(id), new Map([...moved.keys()].map((b) => [b, claimOf(now(b))])));
    elements.set(oldClaimMap(id), new Map([...moved].map(([b, old]) => [b, oldClaimOf(old)])));
    elements.set(newSteerMap(id), new Map([...moved.keys()].map((b) => [b, steerOf(now(b))])));
  }
  // A record the full flow map refused: recordsMovedOnly, the bucket's steering now (newsteer_<id> holds every moved
  // bucket, and only a moved bucket's packet gets here: the last rule is unreached), otherwise the claim's own.
  const whenFull = (chain: string, own: string): string[] => [
    `add rule ${I} ${chain} counter name ${flowsFullCounter(id)} ${movedOnly ? `meta priority vmap @${newSteerMap(id)}` : own}`,
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
  ];
  const slotChains = slots.flatMap((x) => [claimChain(x.slot), slotChain(x.slot)]);
  // Emptied first (the heads below): their rules may refer to maps this transaction deletes and writes anew.
  const lines: string[] = [];
  const own: string[] = [];
  if (remade) {
    // No longer TCP: its close and closing chains go (emptied before the flow map they name, after svc_<id>).
    const gone = s.previousKind === 'tcp' && kind !== 'tcp' ? tcpChains(id) : [];
    // Emptied, then the verdict maps they and the bucket map name (written again below), then deleted: a map or chain
    // still named is EBUSY.
    for (const ch of gone) lines.push(`flush chain ${I} ${ch}`);
    if (gone.length > 0)
      lines.push(`flush map ${I} ${bucketMap(id)}`, ...tcpMaps(id).map((m) => `delete map ${I} ${m}`));
    for (const ch of gone) lines.push(`delete chain ${I} ${ch}`);
    if (gone.length > 0) lines.push(`delete set ${I} ${reopenedSet(id)}`);
    lines.push(`delete map ${I} ${flowsMap(id)}`);
  }
  lines.push(
    `add map ${I} ${flowsMap(id)} { typeof ${K} : meta priority; size ${limits.max}; ` +
      `timeout ${limits.idleSeconds}s; flags dynamic; }`,
    ...(kind === 'tcp'
      ? [
          `add set ${I} ${reopenedSet(id)} { typeof ${K}; size ${limits.max}; timeout ${REOPEN_SECONDS}s; ` +
            `flags dynamic; }`,
        ]
      : []),
    ...(p.previousMaskMaps ?? []).map((k) => `delete map ${I} ${maskMap(id, k)}`),
    ...(p.maskSets ?? []).flatMap((set, k) => maskMapLines(maskMap(id, k), set, claimOf, I)),
    `add set ${I} ${enginesSet(id)} { type ipv4_addr; }`,
    ...engineSetLines(enginesSet(id), p.engines, remade ? undefined : s.written?.engines),
    ...[bucketMap(id), ...(kind === 'tcp' ? tcpMaps(id) : [])].flatMap((m) => [
      `add map ${I} ${m} { typeof meta priority : verdict; }`,
      ...verdictMapLines(m, elements.get(m) ?? new Map(), remade ? undefined : s.written?.elements.get(m)),
    ]),
    `add set ${I} ${bucketCounterSet(id)} { typeof meta priority; counter; }`,
    ...(p.countersExist === true
      ? []
      : [
          `add element ${I} ${bucketCounterSet(id)} { ${Array.from({ length: BUCKET_COUNT }, (_, b) => b).join(', ')} }`,
        ]),
    ...[deniedCounter, unassignedCounter, flowsFullCounter].map((n) => `add counter ${I} ${n(id)}`),
  );
  // A first packet's entry: short, until the flow's second packet (svc_<id>'s refresh) gives it the map's timeout.
  const firstTimeout = `timeout ${newFlowSeconds(limits)}s`;
  // TCP: a FIN or RST classified here had no entry: recorded closing by closenew_<id>, its value in `meta priority`.
  const closeNew = (value: number): string[] =>
    kind === 'tcp' ? [`${FIN_OR_RST} meta priority set ${closingValue(value)} goto ${closeNewChain(id)}`] : [];
  for (const x of slots) {
    lines.push(
      `add counter ${I} ${engineCounter(x.slot)}`,
      ...closeNew(x.slot).map((r) => `add rule ${I} ${claimChain(x.slot)} ${r}`),
      // A new flow: recorded (until its second packet, for NEW_FLOW_SECONDS only), then steered; with the map full,
      // steered all the same (not sticky, counted).
      `add rule ${I} ${claimChain(x.slot)} add ${flows} { ${K} ${firstTimeout} : ${x.slot} } goto ${slotChain(x.slot)}`,
      ...whenFull(claimChain(x.slot), `goto ${slotChain(x.slot)}`),
      slotRule(x),
    );
  }
  const unassigned = `${I} ${unassignedChain(id)}`;
  own.push(
    // Cisco's "Unassigned": counted once per flow, recorded so the flow stays direct when its bucket gets an engine.
    `add rule ${unassigned} counter name ${unassignedCounter(id)}`,
    ...closeNew(DIRECT_VALUE).map((r) => `add rule ${unassigned} ${r}`),
    `add rule ${unassigned} add ${flows} { ${K} ${firstTimeout} : ${DIRECT_VALUE} } goto ${DIRECT_CHAIN}`,
    ...whenFull(unassignedChain(id), `goto ${DIRECT_CHAIN}`),
    // Cisco's "Denied Redirect" (fail closed, no usable engine): refused, not recorded.
    `add rule ${I} ${refusedChain(id)} counter name ${deniedCounter(id)} goto ${GONE_CHAIN}`,
  );
  const classify = `${I} ${classifyChain(id)}`;
  // Never the gateway's own address: such a packet was never the service's to redirect.
  own.push(`add rule ${classify} fib daddr type local accept`);
  // Draft 4.10: what an engine of the group sends is never redirected (its own fetches from the origin). Tested here,
  // not before the flow lookup: an engine's flow is never recorded, so a recorded flow's packets skip this lookup.
  if (p.engines.length > 0) own.push(`add rule ${classify} ip saddr @${enginesSet(id)} return`);
  if (p.maskSets !== undefined) own.push(...ingressMaskRules(p, classify, claimOf));
  else if (movedOnly) {
    own.push(`add rule ${classify} jump ${hashChain(p.hashField)}`, `add rule ${classify} goto ${hashedChain(id)}`);
    const hashed = `${I} ${hashedChain(id)}`;
    const pass = `${I} ${passChain(id)}`;
    const movedRules = `${I} ${movedChain(id)}`;
    own.push(
      // New connections per bucket (the admin's chart): its SYNs, since no other packet of it is classified once.
      `add rule ${hashed} ${SYN_ALONE} meta priority @${bucketCounterSet(id)}`,
      `add rule ${hashed} meta priority vmap @${bucketMap(id)}`,
      `add rule ${pass} ${SYN_ALONE} counter name ${unassignedCounter(id)}`,
      `add rule ${pass} goto ${DIRECT_CHAIN}`,
      // A moved bucket's SYN: a new connection, the bucket's engine now; any other packet without an entry belongs to
      // a connection older than the move: its engine before (reset if that one left). Both recorded, as claimed.
      `add rule ${movedRules} ${SYN_ALONE} meta priority vmap @${newClaimMap(id)}`,
      `add rule ${movedRules} meta priority vmap @${oldClaimMap(id)}`,
      // Unreached (both maps hold every moved bucket): routed, the scratch cleared.
      `add rule ${movedRules} meta priority set 0 accept`,
      // An older connection of an engine that left: reset, recorded closing so its retransmissions are; the map full:
      // the table now (it may be a new connection whose SYN found the map full).
      `add rule ${I} ${lostChain(id)} add ${flows} { ${K} timeout ${CLOSING_SECONDS}s : ${closingValue(LOST_VALUE)} } ` +
        `goto ${GONE_CHAIN}`,
      ...whenFull(lostChain(id), `goto ${GONE_CHAIN}`),
    );
  } else {
    own.push(
      `add rule ${classify} jump ${hashChain(p.hashField)}`,
      `add rule ${classify} meta priority @${bucketCounterSet(id)}`,
      `add rule ${classify} meta priority vmap @${bucketMap(id)}`,
    );
  }
  const svc = `${I} ${serviceChain(id)}`;
  const lookup = `meta priority set ${K} map ${flows}`;
  const steer = `meta priority vmap @${SLOTS_MAP}`;
  if (kind === 'tcp') {
    const flag = `0x${CLOSING_FLAG.toString(16)}`;
    own.push(
      // The client's FIN or RST (the entry becomes closing) or a SYN (not refreshed): close_<id> sorts them.
      `add rule ${svc} ${FIN_SYN_OR_RST} ${lookup} goto ${closeChain(id)}`,
      // An open flow: its idle time starts again (a new flow's second packet: from NEW_FLOW_SECONDS to the map's
      // timeout, as the update names none), and its value (slot or direct) decides. A closing one's value has
      // the flag: the rule ends before the refresh, so the last ACK of a close does not give it the idle timeout back.
      // A SYN never gets here (the rule above took it): a retransmitted SYN is no sign the flow is established.
      `add rule ${svc} ${lookup} meta priority & ${flag} == 0 update ${flows} { ${K} : meta priority } ${steer}`,
      // A closing flow (or, after a miss, a priority with that bit from an earlier filter: the chain looks again).
      `add rule ${svc} meta priority & ${flag} != 0 goto ${closingChain(id)}`,
    );
    const close = `${I} ${closeChain(id)}`;
    own.push(
      // A SYN on an open entry (the SYN's retransmission, or a forger's second SYN): steered by the entry, which keeps
      // its timeout (NEW_FLOW_SECONDS until the handshake's ACK); on a closing entry: closing_<id> (a new connection).
      `add rule ${close} ${SYN_NOT_FIN_RST} meta priority & ${flag} == 0 ${steer}`,
      `add rule ${close} ${SYN_NOT_FIN_RST} goto ${closingChain(id)}`,
      // A FIN or RST on a closing entry (a retransmission, or a flood of them): steered, the entry left as it is, so
      // its 10 s run from the first and no such packet makes the map write.
      `add rule ${close} meta priority & ${flag} != 0 ${steer}`,
      // A packet path update cannot change an entry's value: the open entry is deleted (freed by the set's garbage
      // collection) and added again, closing, with CLOSING_SECONDS.
      `add rule ${close} meta priority set meta priority | ${flag} delete ${flows} { ${K} : meta priority } ` +
        `add ${flows} { ${K} timeout ${CLOSING_SECONDS}s : meta priority } ${steer}`,
      // The map full (the deleted entry counts until collected): steered by its value once, counted; its later packets
      // are new flows.
      `add rule ${close} counter name ${flowsFullCounter(id)} ${steer}`,
      `add rule ${close} meta priority set 0 goto ${classifyChain(id)}`,
    );
    const closing = `${I} ${closingChain(id)}`;
    const reopened = `@${reopenedSet(id)}`;
    own.push(
      // A new SYN on a closing 4-tuple (the port reused within CLOSING_SECONDS): a new connection, classified by the
      // current table and recorded open. Not if the 4-tuple was opened again within REOPEN_SECONDS, nor with the
      // reopened set full: then the rule below steers it by the closing entry (the same engine while the table is the
      // same), nothing written.
      `add rule ${closing} ${SYN_ALONE} ${K} != ${reopened} add ${reopened} { ${K} } ${lookup} meta priority set 0 ` +
        `delete ${flows} { ${K} : meta priority } goto ${classifyChain(id)}`,
      // Any other packet of a closing flow: steered by its entry, which is not refreshed.
      `add rule ${closing} ${lookup} ${steer}`,
      `add rule ${closing} goto ${classifyChain(id)}`,
    );
    const closeNewRules = `${I} ${closeNewChain(id)}`;
    own.push(
      // A FIN or RST with no entry, classified (claim_<s> or unassigned_<id> set its value, closing): recorded for
      // CLOSING_SECONDS, so the flow's last packets follow it (a table change within them included) and a flood of
      // them holds no entry for the idle timeout. Never back to classify: that would be a loop (claim -> here).
      `add rule ${closeNewRules} add ${flows} { ${K} timeout ${CLOSING_SECONDS}s : meta priority } ${steer}`,
      // The map full: steered by its value all the same, counted (as a new flow is).
      `add rule ${closeNewRules} counter name ${flowsFullCounter(id)} ${steer}`,
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
    if (p.engines.length > 0) own.push(`add rule ${svc} ip saddr @${enginesSet(id)} return`);
    own.push(`add rule ${svc} meta priority set ip daddr map @${hashCacheMap('daddr')} goto ${hashedChain(id)}`);
  }
  // No entry: a new flow, one older than the table, or one idle past the timeout.
  own.push(`add rule ${svc} goto ${classifyChain(id)}`);
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
    written: { rules: ownText, elements, engines: p.engines },
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
