// A reload (docs/operations.md, "Reload"): reads the config file again, refuses it whole or applies what differs to
// the running parts the daemon hands in (ReloadParts); keeps the config in force and the reload status that the admin
// API's config view and /metrics show. One reload at a time, none before wccpd has started nor once it stops.
import type { Cluster } from '../cluster/index.js';
import type { WallClock } from '../clock.js';
import type { ClusterTimers, MaintenanceScheduler, WccpRouter } from '../control/index.js';
import type { Config, ConfigDiff, LogLevel } from '../config/index.js';
import { ConfigError, configDiff, formatProblem, loadConfig } from '../config/index.js';
import { maintenanceWindows, routerServices, serviceGroupConfig, warmupSettings } from '../config/index.js';
import type { ApplyPipeline } from '../dataplane/apply.js';
import type { StateSaver } from '../state/persist.js';
import type { AdminServer } from '../admin/http.js';
import type { ConfigView, ReloadResultView } from '../admin/api-types.js';
import type { Log } from '../log.js';
import type { RunningWarmup } from '../warmup/index.js';
import { warnConfig } from './startup.js';

/** What a reload applies to; the parts started after the daemon is built (router, admin, timers) are read then. */
export interface ReloadParts {
  readonly log: Log;
  readonly clock: WallClock;
  readonly cluster: Pick<
    Cluster,
    'setTimers' | 'removeService' | 'addService' | 'reconfigure' | 'setHealth' | 'serviceIds'
  >;
  readonly pipeline: Pick<ApplyPipeline, 'removed' | 'changed'>;
  readonly saver: Pick<StateSaver, 'schedule'>;
  readonly warmup: Pick<RunningWarmup, 'policy' | 'setRelayBudgets'> | null;
  readonly router: () => Pick<WccpRouter, 'setServices'> | null;
  readonly admin: () => Pick<AdminServer, 'setAccess'> | null;
  readonly timers: () => Pick<ClusterTimers, 'rearm'> | null;
  readonly maintenance: () => Pick<MaintenanceScheduler, 'setWindows'> | null;
  /** The active probes stopped and started again by the new `health`. */
  readonly restartProbes: (config: Config) => Promise<void>;
  /** The peer gateways compared with us, by the new `peers`. */
  readonly setPeers: (config: Config) => void;
  /** A reload's logging.level (the logger is the caller's). */
  readonly setLogLevel?: (level: LogLevel) => void;
}

export class Reloads {
  /** The config in force: the one started with, then each reload's that was applied. */
  private inForce: Config;
  /** When the config in force was read (wall ms), counts, the last one. */
  private readonly status: { loadedAt: number; count: number; failures: number; last: ReloadResultView | null };
  /** The reload waiting to run (later requests join it), and the chain that runs them one at a time. */
  private queued: Promise<void> | null = null;
  private chain: Promise<void>;
  private markStarted: () => void = () => undefined;
  private stopping = false;

  constructor(
    private readonly parts: ReloadParts,
    config: Config,
  ) {
    this.inForce = config;
    this.status = { loadedAt: parts.clock.wall(), count: 0, failures: 0, last: null };
    // A reload asked for while wccpd starts runs once it has started.
    this.chain = new Promise((resolve) => (this.markStarted = resolve));
  }

  get config(): Config {
    return this.inForce;
  }

  /** wccpd has started (or failed to): the reloads asked for meanwhile run now. */
  started(): void {
    this.markStarted();
  }

  /** No reload runs after this; waits for the one running. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.markStarted();
    await this.chain;
  }

  /**
   * Reads the config file again and applies what differs; a file that is invalid, or that changes what only a restart
   * changes, is refused whole and wccpd runs on. One asked for while another runs runs after it, and the requests that
   * arrive meanwhile are that one. Never rejects.
   */
  request(): Promise<void> {
    if (this.queued !== null) return this.queued;
    const queued = this.chain
      .then(() => {
        this.queued = null;
        return this.stopping ? undefined : this.reloadOnce();
      })
      .catch((err: unknown) =>
        this.refused(this.inForce.file, [
          `reload failed inside wccpd: ${err instanceof Error ? err.message : String(err)}`,
        ]),
      );
    this.queued = queued;
    this.chain = queued;
    return queued;
  }

  view(): ConfigView {
    const r = this.status;
    return {
      file: this.inForce.file,
      loadedAt: new Date(r.loadedAt).toISOString(),
      reloads: r.count,
      reloadFailures: r.failures,
      lastReload: r.last,
    };
  }

  private async reloadOnce(): Promise<void> {
    const { log } = this.parts;
    const file = this.inForce.file;
    let next: Config;
    try {
      next = await loadConfig(file);
    } catch (e) {
      if (e instanceof ConfigError)
        return this.refused(
          file,
          e.problems.map((p) => formatProblem(e.file, p)),
        );
      return this.refused(file, [`${file}: cannot read: ${e instanceof Error ? e.message : String(e)}`]);
    }
    const diff = configDiff(this.inForce, next);
    if (diff.restart.length > 0)
      return this.refused(
        file,
        diff.restart.map((p) => formatProblem(file, p)),
      );
    await warnConfig(next, log);
    if (this.stopping) return;
    await this.apply(next, diff);
    this.record({ ok: true, changed: diff.changed, errors: [] });
    log.info(
      { config: file, changed: diff.changed },
      diff.changed.length === 0
        ? `reload: ${file} is valid; nothing changed`
        : `reload: ${file} applied: ${diff.changed.join(', ')}`,
    );
  }

  /**
   * A reload's live differences, part by part (src/config/reload.ts says which keys are live): a service removed goes
   * from the cluster and the data plane, one added starts empty, one changed takes its new settings; the others'
   * tables are not touched.
   */
  private async apply(next: Config, diff: ConfigDiff): Promise<void> {
    const { cluster, pipeline, warmup } = this.parts;
    const changed = (key: string) => diff.changed.includes(key);
    this.inForce = next;
    if (changed('logging.level')) this.parts.setLogLevel?.(next.logging.level);
    const { token, hosts, eventClients } = next.admin;
    this.parts.admin()?.setAccess({ token, hosts, eventClients });
    this.parts.router()?.setServices(routerServices(next));
    if (changed('timers.hereIAm') || changed('timers.settle'))
      cluster.setTimers(next.timers.hereIAmMs, next.timers.settleMs);
    for (const id of diff.removed) cluster.removeService(id);
    for (const s of next.services) {
      if (diff.added.includes(s.id)) cluster.addService(serviceGroupConfig(s));
      else if (diff.reconfigured.includes(s.id)) cluster.reconfigure(serviceGroupConfig(s));
    }
    warmup?.policy.setSettings(warmupSettings(next));
    if (changed('warmup.maxRelayRate') || changed('warmup.maxObjectSize'))
      warmup?.setRelayBudgets({
        maxRelayRate: next.warmup.maxRelayRate,
        maxObjectBytes: next.warmup.maxObjectBytes,
      });
    this.parts.maintenance()?.setWindows(maintenanceWindows(next));
    if (changed('health')) {
      cluster.setHealth(next.health);
      await this.parts.restartProbes(next);
    }
    if (changed('peers')) this.parts.setPeers(next);
    for (const id of diff.removed) void pipeline.removed(id);
    void pipeline.changed([...diff.added, ...diff.reconfigured]);
    this.parts.saver.schedule();
    this.parts.timers()?.rearm();
    if (diff.added.length > 0 || diff.removed.length > 0)
      this.parts.log.info({ services: cluster.serviceIds() }, `services now: ${cluster.serviceIds().join(', ')}`);
  }

  private refused(file: string, errors: readonly string[]): void {
    const { log } = this.parts;
    this.record({ ok: false, changed: [], errors });
    for (const e of errors) log.error({ config: file, problem: e }, `reload refused: ${e}`);
    const loaded = new Date(this.status.loadedAt).toISOString();
    log.error(
      { config: file, errors },
      `reload: ${file} refused (${errors.length} problem${errors.length === 1 ? '' : 's'}); wccpd runs on the config loaded ${loaded}`,
    );
  }

  private record(r: Omit<ReloadResultView, 'at'>): void {
    const now = this.parts.clock.wall();
    this.status.count += 1;
    if (r.ok) this.status.loadedAt = now;
    else this.status.failures += 1;
    this.status.last = { ...r, at: new Date(now).toISOString() };
  }
}
