// The one place that turns the cluster's due times into real timers: one setTimeout armed for the earliest due time,
// re-armed after every tick and whenever activity may have moved the due times.
import type { Cluster, Clock, RemovalQueryPlan } from '../cluster/index.js';
import type { Log } from '../log.js';
import { RateLimitedLog } from '../rate-limited-log.js';

/** Longest single wait: the cluster's due times are re-read at least this often, whatever moved them. */
const MAX_WAIT_MS = 60_000;
/**
 * After a tick that threw, the next waits at least this long, doubling per failure in a row up to the cap: the due
 * time that made it throw is still due, so re-arming for it alone would spin the event loop.
 */
const TICK_RETRY_FIRST_MS = 1_000;
const TICK_RETRY_MAX_MS = 30_000;
/** A failing tick is logged at most this often; each is counted. */
const TICK_ERROR_LOG_MS = 60_000;

export class ClusterTimers {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private armedFor: number | null = null;
  private stopped = false;
  private failures = 0;
  private failuresInARow = 0;
  /** No tick before this (monotonic ms) after one threw; null when the last tick went well. */
  private retryAt: number | null = null;
  private readonly errorLog: RateLimitedLog;

  constructor(
    private readonly cluster: Cluster,
    private readonly clock: Clock,
    private readonly onRemovalQueries: (plans: readonly RemovalQueryPlan[]) => void,
    log: Log,
  ) {
    this.errorLog = new RateLimitedLog(log, clock, TICK_ERROR_LOG_MS);
  }

  /** Ticks that threw since the start (status internalErrors, wccpd_internal_errors_total{where="cluster-tick"}). */
  tickErrors(): number {
    return this.failures;
  }

  start(): void {
    this.stopped = false;
    this.rearm();
  }

  /** Re-arms if the earliest due time changed (call after anything that may change it). */
  rearm(): void {
    if (this.stopped) return;
    const next = this.cluster.nextDue();
    const due = next === null || this.retryAt === null ? next : Math.max(next, this.retryAt);
    if (due === this.armedFor && this.timer !== null) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.armedFor = due;
    if (due === null) return;
    const wait = Math.min(Math.max(0, due - this.clock.now()), MAX_WAIT_MS);
    this.timer = setTimeout(() => this.fire(), wait);
  }

  // The timers' boundary: a tick runs what HERE_I_AMs, probes and admin commands made of the cluster, and an error
  // here would otherwise end wccpd (exit 70) with every table. It is counted and logged; the next tick tries again
  // after a backoff.
  private fire(): void {
    this.timer = null;
    this.armedFor = null;
    try {
      const plans = this.cluster.tick();
      this.failuresInARow = 0;
      this.retryAt = null;
      if (plans.length > 0) this.onRemovalQueries(plans);
    } catch (err) {
      this.failures++;
      this.failuresInARow++;
      const backoff = Math.min(TICK_RETRY_FIRST_MS * 2 ** Math.min(this.failuresInARow - 1, 16), TICK_RETRY_MAX_MS);
      this.retryAt = this.clock.now() + backoff;
      const msg = err instanceof Error ? err.message : String(err);
      this.errorLog.warn(
        'cluster',
        'cluster-tick-internal-error',
        { err: msg, failures: this.failures, retryInMs: backoff },
        `cluster timers: a tick failed (${msg}); the tables stay as they are, next try in ${backoff} ms`,
      );
    }
    this.rearm();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}
