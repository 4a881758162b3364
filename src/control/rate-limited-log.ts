// Logs about bad input, rate-limited per (source, reason): the first one at once, then at most one summary per
// interval carrying how many were suppressed. A flood of junk datagrams cannot flood the journal.
import type { Clock } from '../cluster/index.js';
import type { Log } from '../log.js';

const MAX_KEYS = 4096;

export class RateLimitedLog {
  private readonly seen = new Map<string, { lastLogged: number; suppressed: number }>();

  constructor(private readonly log: Log, private readonly clock: Clock, private readonly intervalMs = 10_000) {}

  warn(source: string, reason: string, obj: object, msg: string): void {
    const key = `${source}|${reason}`;
    const now = this.clock.now();
    const entry = this.seen.get(key);
    if (entry && now - entry.lastLogged < this.intervalMs) {
      entry.suppressed++;
      return;
    }
    if (!entry && this.seen.size >= MAX_KEYS) this.seen.clear();
    const suppressed = entry?.suppressed ?? 0;
    this.seen.set(key, { lastLogged: now, suppressed: 0 });
    this.log.warn({ source, reason, ...obj, ...(suppressed > 0 ? { suppressed } : {}) },
      suppressed > 0 ? `${msg} (and ${suppressed} more like it since the last report)` : msg);
  }
}
