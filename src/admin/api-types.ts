// The JSON shapes of /api/v1 (docs/api.md, a contract admins' scripts rely on). The API builds them, wccpctl and the
// web page read them. A view of something another room keeps is derived from that room's own type (declared free of
// Node's types, for the page's checked script), so a field added there reaches the API and cannot be forgotten.
import type { MaskValueSet } from '../buckets/mask-sets.js';
import type { DetectionTimes } from '../cluster/detection.js';
import type { MaintenanceView } from '../cluster/maintenance.js';
import type { ServiceDefinition, ServiceMethods } from '../vocabulary.js';
import type {
  BridgeNetfilterState,
  Explanation,
  FastPathStatus,
  MovedBucket,
  RestoredObjects,
  UserlandStatus,
} from '../dataplane/views.js';

export type ServiceState = 'active' | 'bypass' | 'closed';

/** `T` with its times `K` (ms since the epoch) as ISO 8601 dates, as JSON carries them. */
export type Dated<T, K extends keyof T> = {
  readonly [P in keyof T]: P extends K ? string | Extract<T[P], null> : T[P];
};

/**
 * The bucket table the data plane last applied without error: its change number and when (ISO 8601). It trails the
 * decided change number while an apply runs or is retried after a failure; null before the first apply, and always
 * with a backend that redirects nothing (`none`).
 */
export interface InForceView {
  readonly changeNumber: number;
  readonly at: string;
}

export interface IpFamilyCountersView {
  readonly packetsRedirected: number;
  readonly bytesRedirected: number;
  readonly packetsDenied: number;
  readonly packetsUnassigned: number;
}

export interface ServiceCountersView {
  /** From the data plane; null where the backend does not count it (e.g. `none`). */
  readonly packetsRedirected: number | null;
  readonly bytesRedirected: number | null;
  /** New connections refused while failing closed. */
  readonly packetsDenied: number | null;
  /** New connections whose bucket had no engine (forwarded normally). */
  readonly packetsUnassigned: number | null;
  /**
   * The ingress backend: packets of new flows its full flow map (`dataplane.flows.max`) could not record, redirected
   * by the table without stickiness; null with the other backends.
   */
  readonly packetsFlowsFull: number | null;
  /**
   * The IPv6 part of the four figures above (which count both families): a service that redirects IPv6, with a
   * backend that counts the families apart (nft); null otherwise. IPv4's part is the figure less this one.
   */
  readonly ipv6: IpFamilyCountersView | null;
  readonly authFailures: number;
  readonly messagesDenied: number;
  readonly hereIAmReceived: number;
  readonly iSeeYouSent: number;
  readonly removalQueriesSent: number;
  readonly rebalances: number;
  /** Buckets moved by load-aware assignment (each a table event whose reason starts `load:`). */
  readonly loadMoves: number;
  /** Table recomputations that waited for timers.settle and were folded into one later table change. */
  readonly tableChangesCoalesced: number;
}

/**
 * GET /api/v1/services/:id/load?epoch=k: this gateway's per-bucket load of window k (its end: k x loadAware.window, ms
 * since 1970) as its peers read it, and the digest of its decision on the sum (null until decided).
 */
export interface LoadEpochView {
  readonly service: number;
  readonly epoch: number;
  readonly windowEnd: number;
  /** 256 loads by the service's measure; null: the first window read (no load, only the counters' baseline). */
  readonly load: readonly number[] | null;
  readonly connections: number;
  readonly digest: string | null;
  /**
   * Published windows: the holds, budget spent and bias kept when the window ended (a peer without any takes them);
   * absent from the load so far.
   */
  readonly memory?: LoadMemoryView | null;
}

/** Load-aware assignment's kept state (wall-clock ms): bucket holds, moves spent per window, count offsets, pins. */
export interface LoadMemoryView {
  readonly holds: readonly (readonly [number, number])[];
  readonly spent: readonly (readonly [number, number])[];
  readonly offsets: readonly (readonly [string, number])[];
  readonly pins: readonly (readonly [number, string])[];
}

/** A service's load-aware assignment: the last window decided, the hour's moves, the buckets held. */
export interface LoadStatusView {
  /** The end of the last window decided (ISO date), or null before one. */
  readonly lastWindowEnd: string | null;
  /** Each member's load / fair share in that window, after its moves. */
  readonly engines: readonly { readonly address: string; readonly ratio: number }[];
  /** Moves made in the hour before that window's end, and buckets held now. */
  readonly movesLastHour: number;
  readonly held: number;
}

/** The methods and modes (forwarding, return, assignment, authority, mode, failMode) as the cluster runs them. */
export interface ServiceStatusView extends ServiceMethods {
  readonly id: number;
  /** 'web-cache' for 0, 'dynamic-<id>' otherwise. */
  readonly name: string;
  /** active: engines serve buckets; bypass: no usable engine, traffic goes direct; closed: traffic refused. */
  readonly state: ServiceState;
  readonly changeNumber: number;
  readonly memberChangeNumber: number;
  /** The table in force in the data plane (`changeNumber` is the one decided). */
  readonly inForce: InForceView | null;
  /**
   * Buckets in a move now (BucketsView `moved`, listed there); null where the data plane keeps no moves for the
   * service (every backend but ingress; with ingress, a service that records every flow).
   */
  readonly movedBuckets: number | null;
  readonly designatedEngine: string | null;
  /** Load-aware assignment (docs/buckets.md); absent where the service does not use it. */
  readonly load?: LoadStatusView;
  readonly engines: number;
  readonly usableEngines: number;
  readonly routers: readonly string[];
  /**
   * The Service Info in force: for a dynamic service what the first engine announced (null until one did); the
   * service flags as a number (e.g. 0x31 = Source IP Hash, Ports Defined, Ports Source) and `portsSource` spelt out.
   */
  readonly serviceInfo: (Omit<ServiceDefinition, 'id'> & { readonly portsSource: boolean }) | null;
  /** Worst-case time to notice a dead engine (ms): HERE_I_AM silence (3 x HERE_I_AM_T), and per active probe kind
   * interval x fall + timeout (null = that probe is off). */
  readonly detection: DetectionTimes;
  readonly counters: ServiceCountersView;
}

/** The admin HTTP server's own guards (docs/api.md): the event-stream cap and backpressure, the Host check. */
export interface AdminServerView {
  /** Event-stream (SSE) clients connected now, and the cap (admin.eventClients). */
  readonly eventClients: number;
  readonly eventClientsMax: number;
  /** Event-stream requests refused with 503 because the cap was reached. */
  readonly eventClientsRefused: number;
  /** Event-stream clients dropped because they did not read and their unsent bytes passed the bound. */
  readonly eventClientsDropped: number;
  /** Requests refused with 421 because their Host header named neither this server nor a name in admin.hosts. */
  readonly hostRefused: number;
  /** Connections closed at once because admin.eventClients + 128 were open. */
  readonly connectionsRefused: number;
  /**
   * Requests refused as malformed: node's parser refusals (400, headers over the limit 431, a head not finished in
   * time 408) and ours (400: a target that is no URL, a body over 4,096 bytes or not JSON); logged once a minute.
   */
  readonly badRequests: number;
  /** Changes refused 401: no `Authorization: Bearer` or the wrong token. */
  readonly unauthorized: number;
  /** Requests answered 500 because their handling threw: a bug, logged at most once a minute. */
  readonly internalErrors: number;
}

/** One service compared with a peer gateway: the same engine for every bucket, or not. */
export interface PeerServiceView {
  readonly id: number;
  /** true: every bucket names the same engine (or none) on both; null: the peer's table could not be read. */
  readonly agrees: boolean | null;
  readonly changeNumber: number | null;
  /** The peer's own change number: it counts its own changes, so it may differ even when the tables agree. */
  readonly peerChangeNumber: number | null;
  readonly differingBuckets: number | null;
  /** The first differing bucket numbers (at most 16). */
  readonly differing: readonly number[];
  /**
   * A mask service: how many mask values (counted over the Mask/Value Sets in order) name another engine, or another
   * mask or value, on the peer; a set only one side has counts all its values. null for hash assignment, or unread.
   */
  readonly differingMaskValues: number | null;
  readonly error: string | null;
}

/** A peer gateway (config `peers`) and whether its tables agree with ours, read from its admin API. */
export interface PeerStatusView {
  readonly address: string;
  readonly api: string;
  readonly checkedAt: string;
  /** Every service read and equal. */
  readonly agrees: boolean;
  readonly services: readonly PeerServiceView[];
  /** Checks since start, and those where a service could not be read. */
  readonly checks: number;
  readonly failures: number;
}
/** The warm-up broker's running totals (icp-*, http-*, resolver-*), or null when no broker runs. */
export type WarmupCountersView = Readonly<Record<string, number>> | null;

/**
 * br_netfilter in the gateway (docs/operations.md): `active` when bridged frames on `bridges` (client interfaces or
 * engines' segments) run the IP hooks; null until checked, and for backends without kernel rules.
 */
export type BridgeNetfilterView = BridgeNetfilterState;

/** The userland data plane's own counters since it started (docs/userland.md). */
export type UserlandView = UserlandStatus;

/**
 * The data plane in use; `fastPath` where the backend reports one (nft: the kernel's flowtable support), `userland`
 * with the userland backend.
 */
export interface DataplaneView {
  readonly backend: string;
  readonly detail: string;
  readonly fastPath?: FastPathStatus;
  readonly bridgeNetfilter: BridgeNetfilterView | null;
  readonly userland?: UserlandView;
  /** What the backend put back after someone else removed it (nft: the slots' ip rules and routes); else absent. */
  readonly restored?: RestoredObjectsView;
}

export type RestoredObjectsView = RestoredObjects;

/** The running wccpd's version (package.json) and the commit it was built from, or "unknown" (src/build-info.ts). */
export interface BuildView {
  readonly version: string;
  readonly commit: string;
}

/** The last reload's outcome (docs/operations.md, "Reload"). */
export interface ReloadResultView {
  readonly ok: boolean;
  /** When it ran (ISO 8601). */
  readonly at: string;
  /** What it applied, by key as the file names it (a failed reload applied nothing). */
  readonly changed: readonly string[];
  /** Why it was refused, each problem as check-config names it (`file: key: message`); empty when it succeeded. */
  readonly errors: readonly string[];
}

/** The config wccpd runs on and its reloads. */
export interface ConfigView {
  readonly file: string;
  /** When the running config was read: the start, or the last reload that succeeded (ISO 8601). */
  readonly loadedAt: string;
  readonly reloads: number;
  readonly reloadFailures: number;
  /** null before the first reload. */
  readonly lastReload: ReloadResultView | null;
}

export interface StatusView {
  readonly routerId: string;
  readonly build: BuildView;
  /** The config and its last reload; absent where no daemon runs the model (tests). */
  readonly config?: ConfigView;
  readonly protocolVersion: string;
  readonly uptimeSeconds: number;
  readonly dataplane: DataplaneView;
  readonly services: readonly ServiceStatusView[];
  readonly decodeErrors: Readonly<Record<string, number>>;
  readonly dropped: Readonly<Record<string, number>>;
  readonly admin: AdminServerView;
  /** The peer gateways' agreement, read from their APIs (GET status); absent from the synchronous snapshot. */
  readonly peers?: readonly PeerStatusView[];
  readonly warmup: WarmupCountersView;
  /** The router's WCCP socket as the kernel sees it; absent or null before it is bound. */
  readonly wccpSocket?: WccpSocketView | null;
  /**
   * Errors that a boundary caught and wccpd ran on after, by where (`cluster-tick`, `state-save`): each is a bug or a
   * failing disk, logged; absent where no daemon runs the model.
   */
  readonly internalErrors?: Readonly<Record<string, number>>;
}

/** The WCCP socket's receive buffer and the datagrams the kernel dropped on it (docs/operations.md). */
export interface WccpSocketView {
  /** What the kernel keeps for queued datagrams (half what it reports: the other half is its bookkeeping). */
  readonly receiveBufferBytes: number;
  /** Datagrams dropped because the buffer was full (/proc/net/udp `drops`); null where it cannot be read. */
  readonly kernelDrops: number | null;
}

/** An engine's warm-up (docs/warmup.md): null when it never warmed since wccpd started. */
export interface EngineWarmupView {
  /** True while its warm-up runs: the broker asks warm sources for its misses. */
  readonly warming: boolean;
  /** Queries the broker asked a source about, and how many a source answered HIT. */
  readonly queries: number;
  readonly peerHits: number;
  /** peerHits / queries; null before the first query. */
  readonly ratio: number | null;
  /** Peer-hit ratio over the last `window` queries; null before the first. */
  readonly windowRatio: number | null;
  readonly timeLeftMs: number;
  /** Buckets gained in this warm-up that it still holds. */
  readonly buckets: number;
  /** duration | max-peer-hits | min-hit-ratio once it ended, else null. */
  readonly endReason: string | null;
}

export interface EngineView {
  readonly address: string;
  readonly state: string;
  readonly flags: Readonly<Record<string, boolean | string | null>>;
  /** Human words for the flags that are set, e.g. "no Receive ID echo". */
  readonly flagsText: readonly string[];
  readonly weight: number;
  readonly buckets: number;
  /** 0..1 */
  readonly share: number;
  readonly lastHereIAm: string | null;
  readonly lastHereIAmAgoMs: number | null;
  readonly reason: string;
  readonly probeRttMs: number | null;
  /** Its maintenance windows: the running one's end, the next one's start (ISO 8601), or null without any. */
  readonly maintenance: Dated<MaintenanceView, 'activeUntil' | 'next'> | null;
  /** What keeps it out of the table while alive: `admin` (until undrain), `shutdown`, or the probes' reason. */
  readonly drains: readonly string[];
  readonly packets: number;
  readonly bytes: number;
  readonly warmup: EngineWarmupView | null;
}

export interface EnginesView {
  readonly service: number;
  /** Sorted by address (numerically): the order colours and letters follow. */
  readonly engines: readonly EngineView[];
}

/**
 * A bucket in a move (the ingress backend, docs/dataplane/ingress.md "Recorded only where a bucket moved"): its engine
 * changed within the last `dataplane.flows.idle`, so connections older than the move still go where it went before,
 * new ones to the engine the table names, until `until`; then the table alone steers it again.
 */
export interface MovedBucketView extends MovedBucket {
  /** When the move ends (ISO 8601); `endsInMs` is 0 once ended, while the data plane makes it steady. */
  readonly until: string;
}

/** A bucket being warmed: its engine (the newcomer) and the previous owner the broker asks. */
export interface WarmingBucketView {
  readonly bucket: number;
  readonly engine: string;
  readonly previousOwner: string;
}

export interface BucketsView {
  readonly service: number;
  /** The table as wccpd decided it; `inForce` says which change number the data plane applied. */
  readonly changeNumber: number;
  readonly inForce: InForceView | null;
  /** Exactly 256 entries. */
  readonly buckets: ReadonlyArray<string | null>;
  /**
   * Per bucket, the new connections (and their first packets' bytes) the data plane classified into it since it
   * started; null where the backend does not count them.
   */
  readonly counters: ReadonlyArray<{ readonly connections: number; readonly bytes: number }> | null;
  /** The buckets in a move, by bucket number (at most 256); null where the data plane keeps no moves. */
  readonly moved: readonly MovedBucketView[] | null;
  /**
   * The buckets being warmed (docs/warmup.md): gained by an engine whose warm-up runs, so the broker asks the bucket's
   * previous owner about its misses there; `[]` when none, `null` without a warm-up broker.
   */
  readonly warming: readonly WarmingBucketView[] | null;
  /**
   * A mask assignment service: the Mask/Value Sets its engines are sent and the data plane redirects by (masks and
   * values as numbers, addresses read big-endian; the draft's lookup: each set in order, first equal value wins);
   * null for hash assignment.
   */
  readonly mask: readonly MaskValueSet[] | null;
}

/** Where a new connection to `address` goes (the data plane's own answer), and why. */
export interface WhichView extends Omit<Explanation, 'serviceId'> {
  readonly service: number;
}

export interface EventView {
  readonly time: number;
  readonly type: string;
  readonly [key: string]: unknown;
}

/** One slot that changes engine in a plan: a bucket (or a mask service's value), from and to (null: unassigned). */
export interface PlanMoveView {
  readonly bucket: number;
  readonly from: string | null;
  readonly to: string | null;
}

/** An engine of a planned service: its state, weight and share after the change (and before). */
export interface PlanEngineView {
  readonly address: string;
  /** After the change; 'gone' for an engine that leaves. */
  readonly state: string;
  /** Its effective weight after the change. */
  readonly weight: number;
  readonly bucketsBefore: number;
  readonly bucketsAfter: number;
  /** bucketsAfter / 256. */
  readonly shareAfter: number;
  /** Mask services: its mask values before and after. */
  readonly valuesBefore?: number;
  readonly valuesAfter?: number;
  /** A rebalance plan: its load / fair share of the window's load before and after the moves (0: no share). */
  readonly loadBefore?: number;
  readonly loadAfter?: number;
}

/** What a change would do to one service's table (GET /api/v1/plan). */
export interface ServicePlanView {
  readonly service: number;
  readonly mode: string;
  readonly authority: string;
  readonly assignment: string;
  /** The change number of the table in force the plan starts from. */
  readonly changeNumber: number;
  /** The table after the change: exactly 256 entries, as `buckets` in BucketsView. */
  readonly after: ReadonlyArray<string | null>;
  /** Every bucket that would change engine, by bucket number. */
  readonly moves: readonly PlanMoveView[];
  /** Every engine present before or after, in Squid's order. */
  readonly engines: readonly PlanEngineView[];
  /** A mask service: its Mask/Value Sets after (as `mask` in BucketsView) and the values that change engine. */
  readonly mask: { readonly after: BucketsView['mask']; readonly moves: readonly PlanMoveView[] } | null;
  /** What the plan assumes or what follows later (a weight assumed, the restart grace, the designated engine). */
  readonly notes: readonly string[];
  /**
   * A rebalance plan: the load counted so far in the window (by loadAware.measure), the end of the window whose moves
   * these are (ISO date) and why the moves stop where they do; null when nothing is decided (the notes say why).
   */
  readonly load?: {
    readonly total: number;
    readonly windowEnd: string;
    readonly stop: 'within-tolerance' | 'budget' | 'no-improvement' | 'no-load';
  } | null;
}

export interface PlanView {
  readonly change: 'join' | 'leave' | 'drain' | 'weight' | 'rebalance';
  /** The engine changed ('' for rebalance). */
  readonly engine: string;
  /** The weight asked for (join --weight, weight W), else null. */
  readonly weight: number | null;
  readonly services: readonly ServicePlanView[];
}
