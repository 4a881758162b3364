// The warm-up as the daemon runs it (docs/warmup.md): the policy watching the cluster's snapshots, its events logged,
// the broker listening, and a tick every second that ends warm-ups whose time is over even when no query comes.
import type { Cluster } from '../cluster/index.js';
import type { Clock } from '../cluster/types.js';
import type { Log } from '../log.js';
import { RateLimitedLog } from '../rate-limited-log.js';
import { WarmupBroker, type BrokerOptions } from './broker.js';
import { WarmupPolicy, type WarmupEvent, type WarmupSettings, type WarmupView } from './policy.js';
import type { EngineAddress } from '../buckets/table.js';

/** A warming engine's figures (queries, peer hits, time run) are saved at least this often, so a crash loses little. */
const WARMUP_SAVE_MS = 30_000;
/** A failing tick (a bug, or a save that cannot be asked for) is logged at most this often; it is counted each time. */
const TICK_ERROR_LOG_MS = 60_000;

export interface RunningWarmupOptions {
  readonly settings: ReadonlyMap<number, WarmupSettings>;
  readonly clock: Clock;
  readonly log: Log;
  /** After each warm-up event is logged (the admin's event list, a save). */
  readonly onEvent: (e: WarmupEvent) => void;
  /** Asks for a save; `lastSave` is when the last one began (monotonic ms). */
  readonly save: () => void;
  readonly lastSave: () => number;
}

export class RunningWarmup {
  readonly policy: WarmupPolicy;
  private broker: WarmupBroker | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private tickErrors = 0;
  private readonly tickLog: RateLimitedLog;

  constructor(private readonly options: RunningWarmupOptions) {
    this.policy = new WarmupPolicy(options.settings, options.clock);
    this.tickLog = new RateLimitedLog(options.log, options.clock, TICK_ERROR_LOG_MS);
  }

  /** Watches the cluster's snapshots (those there now, and each after an event); logs the policy's events. */
  watch(cluster: Pick<Cluster, 'serviceIds' | 'service' | 'onEvent'>): void {
    const { policy } = this;
    for (const id of cluster.serviceIds()) {
      const s = cluster.service(id);
      if (s) policy.observe(s);
    }
    cluster.onEvent((e) => {
      const s = cluster.service(e.service);
      if (s) policy.observe(s);
    });
    policy.onEvent((e) => {
      const { type, service, engine, to, reason, queries, peerHits } = e;
      this.options.log.info(
        { event: type, service, engine, to, reason, queries, peerHits },
        to === 'warming'
          ? `engine ${engine} warming (service ${service}): ${reason}`
          : `engine ${engine} warm-up ended after ${peerHits}/${queries} peer hits (service ${service}): ${reason}`,
      );
      this.options.onEvent(e);
    });
  }

  /** Starts the broker (an error names the address and ports it could not listen on) and the tick. */
  async start(broker: Omit<BrokerOptions, 'policy' | 'clock' | 'log'>): Promise<void> {
    const { clock, log } = this.options;
    const b = new WarmupBroker({ ...broker, policy: this.policy, clock, log });
    try {
      await b.start();
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      throw new Error(
        `warm-up broker cannot listen on ${broker.listen} (ICP ${broker.icpPort}, HTTP ${broker.httpPort}): ${msg}`,
      );
    }
    this.broker = b;
    // The tick's boundary: the policy holds what outside input (HERE_I_AMs, ICP) made of it, and an error here would
    // otherwise end wccpd (exit 70). It is counted and logged, and the next tick tries again.
    this.timer = setInterval(() => {
      try {
        this.policy.tick();
        if (this.policy.warmingCount() > 0 && clock.now() - this.options.lastSave() >= WARMUP_SAVE_MS)
          this.options.save();
      } catch (err) {
        this.tickErrors++;
        const msg = err instanceof Error ? err.message : String(err);
        this.tickLog.warn(
          broker.listen,
          'tick-internal-error',
          { warmup: 'tick-internal-error', err: msg },
          `warm-up tick failed: ${msg}`,
        );
      }
    }, 1000);
    this.timer.unref();
    log.info(
      { warmup: `${broker.listen}`, icpPort: b.icpPort(), httpPort: b.httpPort() },
      `warm-up broker listening on ${broker.listen} (ICP ${b.icpPort() ?? '?'}, HTTP ${b.httpPort() ?? '?'})`,
    );
  }

  /** The broker's ICP and HTTP ports, or null before start. */
  ports(): { icp: number | null; http: number | null } | null {
    return this.broker ? { icp: this.broker.icpPort(), http: this.broker.httpPort() } : null;
  }

  /** New relay budgets (warmup.maxRelayRate, maxObjectSize) for the relays that start from now on. */
  setRelayBudgets(b: { maxRelayRate: number; maxObjectBytes: number }): void {
    this.broker?.setRelayBudgets(b);
  }

  /** An engine's warm-up as the admin views show it, or null. */
  view(service: number, engine: EngineAddress): WarmupView | null {
    return this.policy.view(service, engine);
  }

  /** Who holds bucket `i`, who held it before, and whether it came as a gain (warm-up applies). */
  bucket(service: number, i: number): ReturnType<WarmupPolicy['bucket']> {
    return this.policy.bucket(service, i);
  }

  /** The broker's counters and `tick-internal-error` (ticks that failed), once there is one. */
  counters(): Readonly<Record<string, number>> {
    const broker = this.broker?.snapshotCounters() ?? {};
    return this.tickErrors === 0 ? broker : { ...broker, 'tick-internal-error': this.tickErrors };
  }

  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    await this.broker?.stop();
  }
}
