// The cluster's inputs and outputs, in the protocol's words. The control layer turns decoded WCCP messages into
// these; the cluster never sees bytes, sockets or real timers.
import type { AssignmentBucket } from '../wire/wccp2/index.js';
import type {
  AssignmentMethod,
  ForwardingMethod,
  ReturnMethod,
  ServiceDefinition,
  ServiceMethods,
} from '../vocabulary.js';
import type { AssignOptions, Member } from '../buckets/assign.js';
import type { BucketTable, EngineAddress } from '../buckets/table.js';
import type { MaskTable, MaskValueSet } from '../buckets/mask.js';
import type { DetectionTimes, ProbeKind } from './detection.js';
import type { EngineState } from './engine-state.js';
import type { MaintenanceView } from './maintenance.js';
import type { LoadAwareSettings, LoadMemory } from './load-aware.js';

export type { MaskValueSet } from '../buckets/mask.js';
export type { DetectionTimes, ProbeKind, ProbeVerdictFigures } from './detection.js';
export type { EngineState } from './engine-state.js';
export type { MaintenanceView } from './maintenance.js';

export type { Clock, WallClock } from '../clock.js';

export type {
  AssignmentMethod,
  AssignmentMode,
  Authority,
  FailMode,
  ForwardingMethod,
  ReturnMethod,
  ServiceDefinition,
  ServiceKind,
} from '../vocabulary.js';

/** A service group's counters, by name: what the admin views, /metrics and the state file read back. */
export const SERVICE_COUNTERS = [
  'here-i-am',
  'i-see-you',
  'removal-query',
  'auth-failures',
  'stale-receive-id',
  'capability-refused',
  'conflicting-definition',
  'too-many-engines',
  'defined-by-engine',
  'table-changes-coalesced',
  'redirect-assign-ignored',
  'redirect-assign-obeyed',
] as const;
export type ServiceCounter = (typeof SERVICE_COUNTERS)[number];
/** Absent = never counted. */
export type ServiceCounters = Readonly<Partial<Record<ServiceCounter, number>>>;

/** The cluster's view of one configured service group (config's ServiceConfig, reduced by the daemon). */
export interface ServiceGroupConfig extends ServiceMethods {
  readonly id: number;
  /** HERE_I_AMs without our Receive ID before such an engine is usable; 0 = strict (echo required). */
  readonly lenientReceiveId: number;
  /** Engine IP -> weight that overrides the engine's Assignment Weight. */
  readonly weights?: Readonly<Record<string, number>>;
  /** Engine IP -> priority (primary-standby: highest first). */
  readonly priorities?: Readonly<Record<string, number>>;
  /** How long a departed engine's buckets are remembered for its return (ms). */
  readonly historyWindowMs: number;
  /** primary-standby: a returning higher-priority engine takes over only after this long usable (ms). */
  readonly failbackHoldMs?: number;
  /** Other routers of the group, listed in the Router View. */
  readonly peers?: readonly string[];
  /** Load-aware assignment (load-aware.ts); absent or not enabled: buckets follow weights only. */
  readonly loadAware?: LoadAwareSettings;
  /**
   * Dynamic services (51-255): the definition, when the config gives one. Absent: the first engine's HERE_I_AM
   * defines the service (draft 4.2), later conflicting descriptions are refused.
   */
  readonly definition?: Omit<ServiceDefinition, 'id' | 'type'>;
  /**
   * Dynamic services: what the config redirects. An engine whose Service Info names another protocol or port set, or
   * disagrees on the Ports Source flag (which direction the ports are), is refused: the data plane would redirect
   * traffic the engine does not expect. `priority` when the config sets one. The hash flags stay the engine's.
   */
  readonly expect?: {
    readonly protocol: number;
    readonly ports: readonly number[];
    readonly portsSource: boolean;
    readonly priority?: number;
  };
}

/** Capability bits an engine advertised; undefined = element absent (draft: GRE / hash / GRE). */
export interface AdvertisedCapabilities {
  readonly forwarding?: number;
  readonly assignment?: number;
  readonly return?: number;
}

/** A well-formed, decoded HERE_I_AM, reduced to what the cluster decides on. */
export interface HereIAm {
  readonly service: ServiceDefinition;
  /** The engine's address (Web-Cache Identity, WC Address). */
  readonly engine: EngineAddress;
  readonly weight: number;
  readonly status: number;
  /** Buckets the engine reports as historical (U flag set), if any. */
  readonly historicalBuckets?: readonly number[];
  readonly capabilities: AdvertisedCapabilities;
  /** The Receive ID the engine reflects for this router in its Web-Cache View (0 = none). */
  readonly receivedId: number;
  /** Command Extension SHUTDOWN present. */
  readonly shutdown?: boolean;
}

/** A decoded REDIRECT_ASSIGN (hash form), reduced to what authority checks need. */
export interface RedirectAssign {
  readonly serviceId: number;
  /** The datagram's source. */
  readonly from: EngineAddress;
  readonly key: { readonly address: EngineAddress; readonly changeNumber: number };
  /** Router Assignment Elements. */
  readonly routers: readonly { readonly routerId: string; readonly receiveId: number; readonly changeNumber: number }[];
  /** Web-cache list; buckets index into it. */
  readonly engines: readonly EngineAddress[];
  /** 256 buckets as decoded: cache index and A flag, or null (unassigned). */
  readonly buckets: readonly AssignmentBucket[];
}

/** One probe kind's knobs (the same shape as the config's health.<kind>). */
export interface ProbeSettings {
  readonly enabled: boolean;
  readonly intervalMs: number;
  readonly timeoutMs: number;
  /** Consecutive passes (of every enabled kind) before an unhealthy engine is usable again. */
  readonly rise: number;
  /** Consecutive failures of one kind before the engine is unhealthy. */
  readonly fall: number;
  /**
   * Consecutive hard failures (connection refused or reset, ICMP unreachable, an answer that is not the protocol's)
   * before the engine is unhealthy: loss only ever silences a probe, it never makes a host refuse.
   */
  readonly hardFall: number;
}

export type HealthSettings = Readonly<Record<ProbeKind, ProbeSettings>>;

/** What one probe of one engine found. An ICP probe that got an answer carries the reply's opcode. */
export type ProbeOutcome =
  | { readonly kind: ProbeKind; readonly ok: true; readonly rttMs: number; readonly icpOpcode?: string }
  | { readonly kind: ProbeKind; readonly ok: false; readonly detail: string; readonly hard?: boolean };

/** The health verdict on one engine, from its probes. */
export interface HealthVerdict {
  /** Why the engine is unhealthy (fall reached), or null. */
  readonly unhealthy: string | null;
  /** Why the engine asks to be drained (ICP MISS_NOFETCH), or null. */
  readonly drain: string | null;
  /** Round-trip time of the latest passing probe (ICMP, else TCP, else HTTP, else ICP), or null. */
  readonly probeRttMs: number | null;
  /**
   * Every enabled kind passed recently and none has reached its fall: the engine's proxy answers, so HERE_I_AMs lost
   * on the way (or merely late) do not remove it before the longer silence limit (docs/health.md).
   */
  readonly vouched?: boolean;
  /** A maintenance window or another non-admin drain holds the engine's historical buckets until it ends. */
  readonly holdHistory?: boolean;
}

export interface EngineFlags {
  /** Usable although it never echoed our Receive ID (lenient mode; e.g. Squid 5.7). */
  readonly noReceiveIdEcho: boolean;
  /** Drained by an admin: stays drained (also while gone and across restarts) until `undrain`. */
  readonly adminDrain: boolean;
  /** Weight set by the admin at run time. */
  readonly weightOverride: boolean;
  /** Why the engine is refused (capabilities), if it is. */
  readonly refused: string | null;
}

export interface EngineStateEvent {
  readonly type: 'engine-state';
  readonly service: number;
  readonly engine: EngineAddress;
  readonly from: EngineState | 'new';
  readonly to: EngineState;
  readonly reason: string;
  readonly at: number;
}

export interface TableEvent {
  readonly type: 'table';
  readonly service: number;
  readonly changeNumber: number;
  readonly moved: number;
  readonly reason: string;
  /** A load-aware change: each engine's load / fair share before and after its moves. */
  readonly load?: TableLoad;
}

/** What a load-aware table change did to the engines' loads. */
export interface TableLoad {
  /** The end of the window that decided (wall-clock ms). */
  readonly windowEnd: number;
  readonly engines: readonly { readonly address: EngineAddress; readonly before: number; readonly after: number }[];
}

export type ClusterEvent = EngineStateEvent | TableEvent;

/** The assignment function (src/buckets assignBuckets); injected so the cluster stays testable. */
export type AssignFn = (previous: BucketTable, members: readonly Member[], options: AssignOptions) => BucketTable;

export interface EngineSnapshot {
  readonly address: EngineAddress;
  readonly state: EngineState;
  readonly flags: EngineFlags;
  readonly weight: number;
  readonly buckets: number;
  /** Fraction of the 256 buckets, 0..1. */
  readonly share: number;
  /** Clock time of the last HERE_I_AM, null if none yet. */
  readonly lastHereIAm: number | null;
  readonly usableSince: number | null;
  readonly reason: string;
  /** Round-trip time of the latest passing health probe, null without one. */
  readonly probeRttMs: number | null;
  /**
   * Why the engine is kept out of the table while alive, each cause on its own: `admin` (until undrain),
   * `shutdown` (Command Extension SHUTDOWN, until a HERE_I_AM without it), and the probes' drain reason
   * (e.g. `ICP MISS_NOFETCH`). Empty when nothing drains it.
   */
  readonly drains: readonly string[];
  /** Its maintenance windows (running or next), or null without any. */
  readonly maintenance?: MaintenanceView | null;
}

export interface ServiceSnapshot extends ServiceMethods {
  readonly id: number;
  /** null while a dynamic service waits for its first engine to define it. */
  readonly definition: ServiceDefinition | null;
  readonly changeNumber: number;
  readonly memberChangeNumber: number;
  readonly receiveId: number;
  readonly designatedEngine: EngineAddress | null;
  readonly buckets: ReadonlyArray<EngineAddress | null>;
  /** Mask assignment services: the Mask/Value Sets the engines are sent (empty for hash assignment). */
  readonly maskSets: readonly MaskValueSet[];
  readonly engines: readonly EngineSnapshot[];
  /**
   * After a restart, while the restart grace lasts: the engines of the persisted table not heard since (none usable).
   * The data plane keeps their routes, so connections redirected to them before the restart still reach them.
   */
  readonly awaited: readonly EngineAddress[];
  readonly routers: readonly string[];
  readonly counters: ServiceCounters;
  /** How long, at worst, a dead or unhealthy engine keeps its buckets, per detector. */
  readonly detection: DetectionTimes;
}

/**
 * What the data plane needs of a service group, apart from the admin's snapshot: its table (and a mask service's
 * values), the definition in force (its hash flags and priority), and the engines that keep a route (keepsRoute, any
 * that still holds buckets while a table change waits for timers.settle, and those a restart grace awaits).
 */
export interface ServiceRoutes {
  readonly definition: ServiceDefinition | null;
  readonly table: BucketTable;
  /** Mask assignment services only. */
  readonly maskSets?: readonly MaskValueSet[];
  /** Those present in Squid's order, then the other bucket holders in bucket order, then those awaited. */
  readonly targets: readonly EngineAddress[];
}

/**
 * What a HERE_I_AM leads to. `stale`: an engine that has echoed our Receive ID before sent one that does not echo
 * an I_SEE_YOU sent to it since its last counted HERE_I_AM (a replay, a restart, or our last I_SEE_YOU was lost):
 * dropped (no liveness, no state change), counted `stale-receive-id`; `answer` says whether to send it a fresh
 * I_SEE_YOU (at most one per HERE_I_AM_T/10), so an engine that restarted can prove itself with its next HERE_I_AM.
 */
export type HereIAmOutcome =
  | { readonly kind: 'answer'; readonly shutdownResponse: boolean }
  | { readonly kind: 'refused'; readonly reason: string; readonly counter: string; readonly answer: boolean }
  | { readonly kind: 'stale'; readonly reason: string; readonly answer: boolean };

/** Everything needed to encode one unicast I_SEE_YOU (the Receive ID is already advanced and recorded). */
export interface ISeeYouPlan {
  readonly service: ServiceDefinition;
  readonly routerAddress: string;
  readonly receiveId: number;
  /** The engine the I_SEE_YOU goes to (Received From). */
  readonly engine: EngineAddress;
  readonly memberChangeNumber: number;
  readonly assignmentKey: { readonly address: string; readonly changeNumber: number };
  readonly routers: readonly string[];
  /** Usable engines with their bucket sets. */
  readonly engines: readonly {
    readonly address: EngineAddress;
    readonly weight: number;
    readonly buckets: readonly number[];
  }[];
  readonly table: BucketTable;
  /** Mask assignment services: the Mask/Value Sets to send (src/buckets form). */
  readonly maskSets: readonly MaskValueSet[];
  readonly capabilities: {
    readonly forwarding: ForwardingMethod;
    readonly assignment: AssignmentMethod;
    readonly return: ReturnMethod;
  };
}

export interface RemovalQueryPlan {
  readonly service: ServiceDefinition;
  readonly routerAddress: string;
  readonly receiveId: number;
  readonly engine: EngineAddress;
}

/** What the cluster persists per service (mapped to src/state by the daemon). */
export interface ServiceMemory {
  readonly id: number;
  readonly table: BucketTable;
  /** A mask service's values (absent for hash, and in state written before they were persisted). */
  readonly mask?: MaskTable;
  readonly receiveId: number;
  readonly memberChangeNumber: number;
  readonly engines: readonly {
    readonly address: EngineAddress;
    readonly weight: number;
    readonly state: EngineState;
    readonly buckets: readonly number[];
    /** When it left (its buckets are then historical), or null while present. */
    readonly leftAt: number | null;
  }[];
  readonly counters: Readonly<Record<string, number>>;
  /** Engines drained by an admin (kept until undrain, also while they are gone). */
  readonly adminDrained: readonly EngineAddress[];
  /**
   * Weights set by an admin; leftAt: when the engine left (the weight is kept for historyWindow), null while present.
   * Absent in state written before they were persisted.
   */
  readonly adminWeights?: readonly {
    readonly address: EngineAddress;
    readonly weight: number;
    readonly leftAt: number | null;
  }[];
  /** Load-aware assignment's holds, budget and bias (absent without it, and in older state). */
  readonly load?: LoadMemory;
}
