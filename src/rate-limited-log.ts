// Logs about bad input, rate-limited per reason, not per source: a spoofer picks sources freely, so keying by source
// let 20,000 spoofed sources write 20,000 lines. The first line of a reason goes out at once, then at most one per
// interval, carrying how many were suppressed and from how many sources. Lines are bounded by
// reasons x (1 + elapsed / interval), whatever the number of sources. Used by the router (bad datagrams), the warm-up
// broker (bad and refused ICP) and the userland data plane (send failures). BurstLog, below, keeps a burst of lines
// per key and sums up the rest when its window ends (the daemon's engine-state lines).
import type { Log } from './log.js';

/** Reasons are a fixed vocabulary (drop counters); the bound only guards against a bug making them unbounded. */
const MAX_REASONS = 256;
/** Distinct sources remembered per reason between two lines (the count saturates here). */
const MAX_SOURCES = 1024;

interface Entry {
  lastLogged: number;
  suppressed: number;
  readonly sources: Set<string>;
}

export class RateLimitedLog {
  private readonly seen = new Map<string, Entry>();

  constructor(
    private readonly log: Log,
    private readonly clock: { now(): number },
    private readonly intervalMs = 10_000,
  ) {}

  warn(source: string, reason: string, obj: object, msg: string): void {
    const now = this.clock.now();
    const entry = this.seen.get(reason);
    // A report "in the future" (the clock was set back) must not silence the reason for as long as the step.
    if (entry && now >= entry.lastLogged && now - entry.lastLogged < this.intervalMs) {
      entry.suppressed++;
      if (entry.sources.size < MAX_SOURCES) entry.sources.add(source);
      return;
    }
    if (!entry && this.seen.size >= MAX_REASONS) this.seen.clear();
    const suppressed = entry?.suppressed ?? 0;
    const sources = entry?.sources.size ?? 0;
    this.seen.set(reason, { lastLogged: now, suppressed: 0, sources: new Set() });
    if (suppressed === 0) {
      this.log.warn({ source, reason, ...obj }, msg);
      return;
    }
    const from = sources >= MAX_SOURCES ? `${MAX_SOURCES}+ sources` : `${sources} source${sources === 1 ? '' : 's'}`;
    this.log.warn(
      { source, reason, ...obj, suppressed, suppressedSources: sources },
      `${msg} (and ${suppressed} more like it from ${from} since the last report)`,
    );
  }
}

/** Timers for BurstLog's windows (tests give their own; by default unref'd setTimeout). */
export interface WindowTimers {
  set(fn: () => void, ms: number): { cancel(): void };
}

const systemTimers: WindowTimers = {
  set(fn, ms) {
    const t = setTimeout(fn, ms);
    t.unref();
    return { cancel: () => clearTimeout(t) };
  },
};

interface BurstWindow<T> {
  written: number;
  held: number;
  last: T | null;
  timer: { cancel(): void } | null;
}

/**
 * At most `burst` lines per key in each window of `windowMs` from the key's first line: past the burst, lines are
 * counted and the last is written with that count (`coalesced`) when the window ends.
 */
export class BurstLog<T> {
  private readonly windows = new Map<string, BurstWindow<T>>();

  constructor(
    private readonly options: {
      readonly burst: number;
      readonly windowMs: number;
      /** Writes one line; `coalesced` is how many more were held back in the window (0: none). */
      readonly write: (line: T, coalesced: number) => void;
      readonly timers?: WindowTimers;
    },
  ) {}

  offer(key: string, line: T): void {
    let w = this.windows.get(key);
    if (w === undefined) {
      const entry: BurstWindow<T> = { written: 0, held: 0, last: null, timer: null };
      entry.timer = (this.options.timers ?? systemTimers).set(() => {
        if (entry.held > 0 && entry.last !== null) this.options.write(entry.last, entry.held - 1);
        this.windows.delete(key);
      }, this.options.windowMs);
      this.windows.set(key, entry);
      w = entry;
    }
    if (w.written < this.options.burst) {
      w.written++;
      this.options.write(line, 0);
      return;
    }
    w.held++;
    w.last = line;
  }

  /** Cancels the open windows (what they held is not written). */
  stop(): void {
    for (const w of this.windows.values()) w.timer?.cancel();
  }
}
