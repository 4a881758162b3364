// The names and numbers of the ingress backend's table (docs/dataplane/ingress.md, "The ingress backend"): its maps,
// chains, counters and recorded values, the flow entries' timeouts and the flow maps' bounds.
import { FLOWS_IDLE_DEFAULT_MS, FLOWS_MAX_DEFAULT } from '../settings.js';
import { DIRECT_VALUE, INGRESS_FAMILY, INGRESS_TABLE, RESERVED_FIRST } from '../kernel/names.js';
import { portProtocol } from '../kernel/rules.js';
import type { ServicePlan } from '../kernel/rules.js';
import type { AddressFamily } from '../../vocabulary.js';

export { DIRECT_VALUE };

/** Our table, as nft names it. */
export const I = `${INGRESS_FAMILY} ${INGRESS_TABLE}`;

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
/** A new flow's entry lasts this long until its second packet (docs/dataplane/ingress.md, "A new flow's entry"). */
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
export const tcpMaps = (id: number): string[] => [newClaimMap(id), oldClaimMap(id), newSteerMap(id)];

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

/** The config's defaults (dataplane/settings.ts: why 262,143). */
export const DEFAULT_FLOW_LIMITS: FlowLimits = { max: FLOWS_MAX_DEFAULT, idleSeconds: FLOWS_IDLE_DEFAULT_MS / 1000 };

/** What identifies a flow of a service: the 4-tuple for TCP and UDP, the address pair for other protocols. */
export type FlowKeyKind = 'tcp' | 'udp' | 'addresses';

export const flowKeyKind = (protocol: number): FlowKeyKind => portProtocol(protocol) ?? 'addresses';

/** The packet's flow key, as a map key expression (also its `typeof`). */
export const flowKey = (kind: FlowKeyKind, family: AddressFamily = 'ipv4', seed = 0): string => {
  if (family === 'ipv4') return kind === 'addresses' ? '@nh,96,64' : '@nh,96,64 . @th,0,32';
  // IPv6 (docs/dataplane/ingress.md, "IPv6"): 16 bytes, a keyed hash of the address pair, the ports, the destination's
  // low 64 bits. nft 1.0.6 cannot write a longer key with a value from the packet path: it puts the value in a
  // register the key still uses (a raw key of 36 bytes is stored with the value in its bytes 16-19) or aborts (a
  // concatenation of more than 16 bytes).
  const pair = `jhash @nh,64,256 mod 4294967295 seed 0x${seed.toString(16)}`;
  return kind === 'addresses' ? `${pair} . @nh,256,64` : `${pair} . @th,0,32 . @nh,256,64`;
};

/** A flow map's `typeof`: the key's, the hash (which nft cannot list as a map's type) as the 32-bit integer it is. */
export const flowKeyType = (kind: FlowKeyKind, family: AddressFamily = 'ipv4'): string =>
  family === 'ipv4'
    ? flowKey(kind)
    : kind === 'addresses'
      ? '@nh,0,32 . @nh,256,64'
      : '@nh,0,32 . @th,0,32 . @nh,256,64';

/**
 * An object's name for one family's packets: IPv4's as it always was, IPv6's with the family's digit after its kind
 * (`svc_0` -> `svc6_0`, `flows_full_0` -> `flows6_full_0`, `slots` -> `slots6`; docs/dataplane/ingress.md, "IPv6").
 * The chains `gone` and `direct` serve both families.
 */
export const familyName = (family: AddressFamily, name: string): string =>
  family === 'ipv4' ? name : name.includes('_') ? name.replace('_', '6_') : `${name}6`;
