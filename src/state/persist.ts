// Between the cluster's memory of its groups (monotonic times) and the state file (wall-clock times, it outlives the
// process), and the saver that writes it at most every PERSIST_DEBOUNCE_MS, one save after another.
import type { ServiceMemory } from '../cluster/index.js';
import { wallTimeOf, type WallClock } from '../clock.js';
import type { Log } from '../log.js';
import { saveState } from './store.js';
import { STATE_VERSION, type PersistedService, type PersistedState } from './types.js';

const PERSIST_DEBOUNCE_MS = 250;

/**
 * The monotonic time (of `clock`) at which something happened that the state file dates `at` (wall-clock ms), saved
 * at `savedAt`. Monotonic time starts again with the process, so the age is the age when saved (a duration the old
 * process measured, exact) plus the time since the save by the wall clock, never negative: a clock set back while
 * wccpd was down (or a file from the future) counts as no time down, one set forward as that much more (nothing
 * tells it from a real outage). Before the save (no savedAt) the wall clock alone, from now at the latest.
 */
export function restoredTime(clock: WallClock, at: number, savedAt: number): number {
  const wall = clock.wall();
  const age = savedAt > 0 ? Math.max(0, savedAt - at) + Math.max(0, wall - savedAt) : Math.max(0, wall - at);
  return clock.now() - age;
}

/** A persisted group as the cluster restores it; `when` turns the file's wall-clock times into monotonic ones. */
export function toMemory(p: PersistedService, when: (at: number) => number): ServiceMemory {
  return {
    id: p.id,
    table: p.table,
    ...(p.mask !== undefined ? { mask: p.mask } : {}),
    receiveId: p.receiveId,
    memberChangeNumber: 0,
    counters: p.counters,
    adminDrained: p.adminDrained ?? [],
    ...(p.load !== undefined ? { load: p.load } : {}),
    adminWeights: (p.adminWeights ?? []).map((w) => ({ ...w, leftAt: w.leftAt === null ? null : when(w.leftAt) })),
    engines: p.engines.map((e) => ({
      address: e.address,
      weight: e.weight,
      state: e.lastState === 'gone' ? 'gone' : 'joining',
      buckets: e.historicalBuckets,
      leftAt: e.leftAt === null ? null : when(e.leftAt),
    })),
  };
}

/** `wall` turns the cluster's monotonic times into wall-clock ones (the file outlives the process). */
export function toPersisted(m: ServiceMemory, wall: (t: number) => number): PersistedService {
  return {
    id: m.id,
    table: m.table,
    ...(m.mask !== undefined ? { mask: m.mask } : {}),
    receiveId: m.receiveId,
    counters: m.counters,
    adminDrained: m.adminDrained,
    ...(m.load !== undefined ? { load: m.load } : {}),
    adminWeights: (m.adminWeights ?? []).map((w) => ({ ...w, leftAt: w.leftAt === null ? null : wall(w.leftAt) })),
    engines: m.engines.map((e) => ({
      address: e.address,
      weight: e.weight,
      lastState: e.state,
      leftAt: e.leftAt === null ? null : wall(e.leftAt),
      historicalBuckets: e.leftAt === null ? [] : e.buckets,
    })),
  };
}

export interface StateSaverOptions {
  readonly dir: string;
  readonly clock: WallClock;
  readonly log: Log;
  /** The groups' memory now, and what else a group persists beside it (its warm-up). */
  readonly memory: () => readonly ServiceMemory[];
  readonly extra?: (id: number) => Partial<PersistedService> | null;
}

/** Saves the state file: soon after a change (schedule), or now (save); saves run one after another. */
export class StateSaver {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private saving: Promise<void> = Promise.resolve();
  private savedAt = 0;
  private failed = 0;

  constructor(private readonly options: StateSaverOptions) {}

  /** Saves that failed (the state could not be gathered or written) since the start; each is logged. */
  failures(): number {
    return this.failed;
  }

  /** Monotonic time of the last save begun (0: none yet). */
  lastSave(): number {
    return this.savedAt;
  }

  schedule(): void {
    if (this.timer !== null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.save();
    }, PERSIST_DEBOUNCE_MS);
  }

  /**
   * Saves now (a scheduled save is folded into this one). Never throws, never rejects: a save that fails is counted
   * and logged, wccpd runs on with its state in memory, and the next change saves again.
   */
  save(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const { dir, log } = this.options;
    const failed = (err: unknown, what: string): void => {
      this.failed++;
      log.error({ err: err instanceof Error ? err.message : String(err), stateDir: dir }, what);
    };
    let state: PersistedState;
    try {
      state = this.gather();
    } catch (err) {
      // Gathering runs in the debounce timer's callback: a throw here would end wccpd.
      failed(err, 'cannot save state: gathering it failed');
      return this.saving;
    }
    this.savedAt = this.options.clock.now();
    this.saving = this.saving
      .then(() => saveState(dir, state))
      .catch((err: unknown) => failed(err, 'cannot save state'));
    return this.saving;
  }

  private gather(): PersistedState {
    const { clock, extra } = this.options;
    return {
      version: STATE_VERSION,
      savedAt: clock.wall(),
      services: this.options.memory().map((m) => {
        const more = extra?.(m.id) ?? null;
        const p = toPersisted(m, (t) => wallTimeOf(clock, t));
        return more === null ? p : { ...p, ...more };
      }),
    };
  }
}
