// Load-aware assignment's windows (docs/buckets.md, "Load-aware assignment"): at the end of each wall-clock aligned
// window of a service with `loadAware`, the data plane's per-bucket counters are read and handed to the cluster, which
// turns them into the window's load and makes the moves it calls for (cluster/table-keeper.ts). The config in force
// is read at every window, so a service a reload adds is measured from its next window on.
import type { Cluster, LoadAwarePort, LoadOutcome, WindowLoad } from '../cluster/index.js';
import { windowEnd } from '../cluster/index.js';
import type { ServiceConfig } from '../config/index.js';
import type { RedirectCounters } from '../dataplane/redirector.js';
import type { WallClock } from '../clock.js';
import type { Log } from '../log.js';
import { formatDuration } from '../duration.js';
import { BUCKET_COUNT } from '../buckets/table.js';

export interface LoadWindowsDeps {
  readonly cluster: Cluster;
  readonly counters: (services: readonly number[]) => Promise<RedirectCounters>;
  readonly clock: WallClock;
  readonly services: () => readonly ServiceConfig[];
  readonly log: Log;
  /**
   * Gateways in mode consistent with peers decide on the sum of their loads and agree before moving
   * (src/daemon/load-peers.ts); the others decide alone.
   */
  readonly peers?: {
    shared(service: ServiceConfig): boolean;
    decide(service: ServiceConfig, end: number, load: WindowLoad | null): Promise<void>;
  };
}

const NO_COUNTS = Array.from({ length: BUCKET_COUNT }, () => ({ packets: 0, bytes: 0 }));

/** A window's end is read this long after it, so that a counter read never races the boundary. */
const SLACK_MS = 20;

export class LoadWindows {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private stopped = false;
  /** The last window end read per service. */
  private readonly lastEnd = new Map<number, number>();

  constructor(private readonly deps: LoadWindowsDeps) {}

  private enabled(): ServiceConfig[] {
    return this.deps.services().filter((s) => s.loadAware.enabled && s.assignment === 'hash');
  }

  start(): void {
    this.stopped = false;
    this.arm();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  /** Sleeps until the next window end of any service with load-aware assignment (looks again every minute). */
  private arm(): void {
    if (this.stopped) return;
    const wall = this.deps.clock.wall();
    const ends = this.enabled().map((s) => windowEnd(wall, s.loadAware.windowMs) + s.loadAware.windowMs);
    const next = ends.length > 0 ? Math.min(...ends) : wall + 60_000;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        void this.windowsEnded().finally(() => this.arm());
      },
      Math.max(0, Math.min(next - wall, 60_000)) + SLACK_MS,
    );
    this.timer.unref?.();
  }

  /** Reads the counters of every service whose window ended and hands each its window. Never rejects. */
  async windowsEnded(): Promise<void> {
    const wall = this.deps.clock.wall();
    const due = this.enabled()
      .map((s) => ({ s, end: windowEnd(wall, s.loadAware.windowMs) }))
      .filter(({ s, end }) => this.lastEnd.get(s.id) !== end);
    if (due.length === 0) return;
    let counters: RedirectCounters;
    try {
      counters = await this.deps.counters(due.map(({ s }) => s.id));
    } catch (err) {
      this.deps.log.warn(
        { err: err instanceof Error ? err.message : String(err) },
        'load-aware: the per-bucket counters could not be read; this window decides nothing',
      );
      return;
    }
    await Promise.all(due.map(({ s, end }) => this.window(s, end, counters)));
  }

  private async window(s: ServiceConfig, end: number, counters: RedirectCounters): Promise<void> {
    this.lastEnd.set(s.id, end);
    // A service the data plane has counted nothing for yet (or a backend that counts none): zeros.
    const counts = counters.buckets.get(s.id) ?? NO_COUNTS;
    const port = this.deps.cluster.loadAware(s.id);
    if (port === null) return;
    // The window's boundary: the read turns the data plane's counters into the window's load, and a throw anywhere
    // here would reject windowsEnded, which the window timer does not await (an unhandled rejection ends wccpd).
    try {
      const w = port.loadRead(end, counts);
      if (this.deps.peers?.shared(s) === true) await this.deps.peers.decide(s, end, w);
      else decideAlone(this.deps.log, s, port, end, w);
    } catch (err) {
      this.deps.log.warn(
        { service: s.id, err: err instanceof Error ? err.message : String(err) },
        'load-aware: the window could not be decided',
      );
    }
  }
}

/** One gateway: the window's own load decides, and its moves are made at once. */
function decideAlone(log: Log, s: ServiceConfig, port: LoadAwarePort, end: number, w: WindowLoad | null): void {
  const outcome = port.loadDecision(end, w);
  port.loadApply(outcome);
  logOutcome(log, s, outcome);
}

/** A debug line per window: what it decided and why no more. */
export function logOutcome(log: Log, s: ServiceConfig, outcome: LoadOutcome): void {
  const window = formatDuration(s.loadAware.windowMs);
  if (outcome.kind === 'decided') {
    const { decision } = outcome;
    log.debug(
      { service: s.id, moves: decision.moves.length, total: decision.total, stop: decision.stop },
      `load-aware: the ${window} window ending ${new Date(outcome.windowEnd).toISOString()} made ${decision.moves.length} move(s) (${decision.stop})`,
    );
  } else log.debug({ service: s.id, outcome: outcome.kind }, `load-aware: the ${window} window decided nothing`);
}
