// What survives a restart: per service group, the bucket table (and a mask service's values), the membership (with
// each departed engine's buckets, so a returning engine gets its cache share back), counters and the Receive ID
// counter.
import type { BucketTable, EngineAddress } from '../buckets/table.js';
import type { MaskTable } from '../buckets/mask.js';
import type { LoadMemory } from '../cluster/index.js';

export const STATE_VERSION = 1;

export interface PersistedEngine {
  readonly address: EngineAddress;
  readonly weight: number;
  /** The engine's lifecycle state when saved, as the cluster names it (e.g. `usable`, `draining`, `gone`). */
  readonly lastState: string;
  /** Milliseconds since the epoch when the engine left; null while it is a member. */
  readonly leftAt: number | null;
  /** The buckets it served when it left (remembered for the service's historyWindow); [] while a member. */
  readonly historicalBuckets: readonly number[];
}

export interface PersistedService {
  /** Service ID (0 = web-cache, 51-255 dynamic). */
  readonly id: number;
  readonly table: BucketTable;
  /**
   * A mask service's values: entry i is the engine of mask value i (src/buckets/mask.ts), with the mask and its own
   * change number. Absent for hash services and in files written before the values were persisted.
   */
  readonly mask?: MaskTable;
  readonly engines: readonly PersistedEngine[];
  readonly counters: Readonly<Record<string, number>>;
  /** The last Receive ID sent in an I_SEE_YOU for this service group (never 0 on the wire once used). */
  readonly receiveId: number;
  /** Engines an admin drained, kept until undrain (absent in files written before drains were persisted). */
  readonly adminDrained?: readonly EngineAddress[];
  /**
   * Weights an admin set (absent in files written before they were persisted); leftAt: when the engine left (ms since
   * the epoch; the weight is kept for the service's historyWindow), null while it was present.
   */
  readonly adminWeights?: readonly PersistedAdminWeight[];
  /** The warm-up broker's sessions and gained buckets (docs/warmup.md); absent without a broker and in older files. */
  readonly warmup?: PersistedWarmup;
  /**
   * Load-aware assignment (docs/buckets.md): each moved bucket's hold and the hour's moves, by the end of the window
   * (ms since the epoch), and what keeps the moves (count offsets per engine, pinned buckets). Absent without it.
   */
  readonly load?: LoadMemory;
}

export interface PersistedAdminWeight {
  readonly address: EngineAddress;
  readonly weight: number;
  readonly leftAt: number | null;
}

export interface PersistedWarmup {
  readonly sessions: readonly {
    readonly engine: EngineAddress;
    readonly elapsedMs: number;
    readonly queries: number;
    readonly peerHits: number;
    /** duration | max-peer-hits | min-hit-ratio once ended, else null. */
    readonly endReason: 'duration' | 'max-peer-hits' | 'min-hit-ratio' | null;
  }[];
  /** [bucket, owner, previous owner, ms since gained]. */
  readonly gained: readonly (readonly [number, EngineAddress, EngineAddress, number])[];
}

export interface PersistedState {
  readonly version: typeof STATE_VERSION;
  /** Milliseconds since the epoch when the caller saved it; 0 for the empty state. */
  readonly savedAt: number;
  readonly services: readonly PersistedService[];
}

export function emptyState(): PersistedState {
  return { version: STATE_VERSION, savedAt: 0, services: [] };
}
