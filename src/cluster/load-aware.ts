// Load-aware assignment, one service group's side (issue 35, docs/buckets.md "Load-aware assignment",
// docs/decisions/0004): its settings, the data plane's per-bucket counters turned into a window's load, and what a
// load move leaves behind: each moved bucket's hold, the hour's budget spent, and the bias that keeps the moves through
// later table changes (buckets/load.ts, LoadBias). Windows are wall-clock aligned epochs (k x window) and every time
// kept here is the end of a window in wall-clock ms, so two gateways that made the same moves hold the same state.
import { BUCKET_COUNT } from '../buckets/table.js';
import type { EngineAddress } from '../buckets/table.js';
import { biasAfter, biasFor, NO_LOAD_BIAS } from '../buckets/load.js';
import type { LoadBias, LoadMove, LoadOptions } from '../buckets/load.js';
import { HOUR_MS } from '../duration.js';

export const LOAD_MEASURES = ['connections', 'bytes'] as const;
export type LoadMeasure = (typeof LOAD_MEASURES)[number];

/** A service's `loadAware` settings (docs/config.md). */
export interface LoadAwareSettings {
  readonly enabled: boolean;
  /** What a bucket's load is: its new connections, or its bytes (where the data plane counts every packet's). */
  readonly measure: LoadMeasure;
  /** The window (ms): the load of one window decides; windows are aligned to the wall clock (k x window). */
  readonly windowMs: number;
  /** An engine above tolerance x its fair share for a window sheds buckets. */
  readonly tolerance: number;
  /** At most this many load moves in any hour. */
  readonly maxMovesPerHour: number;
  /** A bucket moved by load is not moved by load again for this long (ms). */
  readonly holdMs: number;
  /** A window with fewer new connections than this (all engines together) decides nothing. */
  readonly minConnections: number;
}

export const DEFAULT_LOAD_AWARE: LoadAwareSettings = {
  enabled: false,
  measure: 'connections',
  windowMs: 5 * 60_000,
  tolerance: 1.15,
  maxMovesPerHour: 32,
  holdMs: 30 * 60_000,
  minConnections: 1000,
};

/** A bucket's counters as the data plane reads them (dataplane/redirector.ts BucketCounters). */
export interface BucketCount {
  readonly packets: number;
  readonly bytes: number;
}

/** One window's load: per bucket by the measure, and the new connections it counted (the floor's figure). */
export interface WindowLoad {
  readonly load: readonly number[];
  readonly connections: number;
}

/** What survives a restart (wall-clock ms throughout). */
export interface LoadMemory {
  /** bucket -> the end of the window it was moved at. */
  readonly holds: readonly (readonly [number, number])[];
  /** [end of window, moves made then], within the last hour. */
  readonly spent: readonly (readonly [number, number])[];
  readonly offsets: readonly (readonly [EngineAddress, number])[];
  readonly pins: readonly (readonly [number, EngineAddress])[];
}

/** Several gateways' loads of one window, bucket by bucket (null: one of them has none, so the sum has none). */
export function sumLoads(loads: readonly (WindowLoad | null)[]): WindowLoad | null {
  if (loads.some((w) => w === null)) return null;
  const all = loads as readonly WindowLoad[];
  return {
    load: Array.from({ length: BUCKET_COUNT }, (_, b) => all.reduce((t, w) => t + (w.load[b] ?? 0), 0)),
    connections: all.reduce((t, w) => t + w.connections, 0),
  };
}

/**
 * A rebalance plan's peers (mode consistent with peers): the window's end decides on the sum of every gateway's load,
 * so the plan sums the peers' load so far with this gateway's; a peer not read means the end decides nothing.
 */
export interface PeerLoads {
  /** The peers read (their addresses), and their loads so far in the same window. */
  readonly read: readonly string[];
  readonly loads: readonly (WindowLoad | null)[];
  /** The peers whose load so far could not be read (down, another window, a bad answer). */
  readonly unread: readonly string[];
}

/** The aligned window that ends at or before `wall`: its end (ms). */
export function windowEnd(wall: number, windowMs: number): number {
  return Math.floor(wall / windowMs) * windowMs;
}

export class LoadState {
  /** The counters read at the last window's end (a counter that went back, e.g. a data plane restart, starts over). */
  private baseline: { readonly end: number; readonly counts: readonly BucketCount[] } | null = null;
  private readonly holds = new Map<number, number>();
  private spent: [number, number][] = [];
  private biasNow: LoadBias = NO_LOAD_BIAS;

  get bias(): LoadBias {
    return this.biasNow;
  }

  /** The bias of the engines still members (a membership change drops the others' offsets and pins). */
  prune(members: ReadonlySet<EngineAddress>): void {
    this.biasNow = biasFor(this.biasNow, members);
  }

  /** Drops every bias (load-aware assignment turned off, or a mode that keeps none). */
  clear(): void {
    this.biasNow = NO_LOAD_BIAS;
  }

  /** The load since the last window's end (changes nothing); null before a first read. */
  since(counts: readonly BucketCount[], measure: LoadMeasure): WindowLoad | null {
    const base = this.baseline;
    if (base === null) return null;
    let connections = 0;
    const load = counts.map((c, b) => {
      const was = base.counts[b] ?? { packets: 0, bytes: 0 };
      // A counter below its last reading started again from zero: all it counts is new.
      const packets = c.packets >= was.packets ? c.packets - was.packets : c.packets;
      const bytes = c.bytes >= was.bytes ? c.bytes - was.bytes : c.bytes;
      connections += packets;
      return measure === 'bytes' ? bytes : packets;
    });
    return { load, connections };
  }

  /**
   * The counters read at the end of the window ending at `end`: its load (null for the first read, or a window not
   * directly after the last one read: its load covers more than one window), and they become the next baseline.
   */
  read(end: number, counts: readonly BucketCount[], settings: LoadAwareSettings): WindowLoad | null {
    const last = this.baseline;
    const load = last !== null && last.end === end - settings.windowMs ? this.since(counts, settings.measure) : null;
    if (last !== null && last.end >= end) return null;
    this.baseline = { end, counts: counts.map((c) => ({ packets: c.packets, bytes: c.bytes })) };
    return load;
  }

  /** The options of a decision at the end of the window ending at `end`. */
  options(end: number, settings: LoadAwareSettings): LoadOptions {
    const budget = Math.max(0, settings.maxMovesPerHour - this.spentSince(end - HOUR_MS));
    return {
      tolerance: settings.tolerance,
      budget,
      held: (bucket) => {
        const at = this.holds.get(bucket);
        return at !== undefined && end < at + settings.holdMs;
      },
    };
  }

  private spentSince(from: number): number {
    return this.spent.reduce((s, [at, n]) => (at > from ? s + n : s), 0);
  }

  /** Load moves made at the end of the window ending at `end`. */
  made(end: number, moves: readonly LoadMove[], settings: LoadAwareSettings): void {
    if (moves.length === 0) return;
    for (const m of moves) this.holds.set(m.bucket, end);
    this.spent = [...this.spent.filter(([at]) => at > end - HOUR_MS), [end, moves.length]];
    for (const [b, at] of this.holds) if (end >= at + settings.holdMs) this.holds.delete(b);
    this.biasNow = biasAfter(this.biasNow, moves);
  }

  /** Moves spent in the hour before `end`, and the buckets held then. */
  summary(end: number, settings: LoadAwareSettings): { spent: number; held: number } {
    const held = [...this.holds.values()].filter((at) => end < at + settings.holdMs).length;
    return { spent: this.spentSince(end - HOUR_MS), held };
  }

  memory(): LoadMemory {
    return {
      holds: [...this.holds],
      spent: this.spent.map(([a, n]) => [a, n] as const),
      offsets: [...this.biasNow.offsets],
      pins: [...this.biasNow.pins],
    };
  }

  restore(m: LoadMemory): void {
    this.holds.clear();
    for (const [b, at] of m.holds) this.holds.set(b, at);
    this.spent = m.spent.map(([a, n]) => [a, n]);
    this.biasNow = { offsets: new Map(m.offsets), pins: new Map(m.pins) };
  }
}
