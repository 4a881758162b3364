// The composition root: config -> cluster (seeded from state) -> data plane -> UDP router + timers -> admin API.
// Starts the parts in that order and stops them in reverse: the data plane's rules are removed and the state is saved.
// It only wires: each part's work lives in its own room (the apply pipeline in dataplane/apply.ts, persistence in
// state/persist.ts, the warm-up in warmup/running.ts, the admin model in admin/cluster-model.ts, the cluster's event
// lines in control/event-log.ts).
import { randomInt } from 'node:crypto';
import { Cluster } from './cluster/index.js';
import type { ClusterEvent } from './cluster/index.js';
import { systemClock } from './clock.js';
import type { WallClock } from './clock.js';
import { ClusterEventLog, ClusterTimers, MaintenanceScheduler, WccpRouter } from './control/index.js';
import { createProbers, ProbeScheduler } from './control/probes/index.js';
import type { Probers } from './control/probes/index.js';
import type { Config, LogLevel } from './config/index.js';
import { ConfigError, configWarnings, formatProblem, hostInterfaces, loadConfig } from './config/index.js';
import { configDiff, maintenanceWindows, routerServices } from './config/index.js';
import type { ConfigDiff } from './config/index.js';
import { serviceGroupConfig, warmupSettings } from './config/index.js';
import { createRedirector, explain } from './dataplane/index.js';
import { ApplyPipeline } from './dataplane/apply.js';
import type { CheckBridgeNetfilter } from './dataplane/kernel/bridge-netfilter.js';
import type { Redirector } from './dataplane/redirector.js';
import { loadState } from './state/index.js';
import { restoredTime, StateSaver, toMemory } from './state/persist.js';
import { AdminServer, idleAdminCounters } from './admin/http.js';
import { ClusterModel, dataplaneView, trafficOf } from './admin/cluster-model.js';
import { PeerChecker } from './admin/peers.js';
import { createMetrics } from './admin/metrics.js';
import type { Metrics } from './admin/metrics.js';
import type { ConfigView, ReloadResultView } from './admin/api-types.js';
import type { Log } from './log.js';
import { buildInfo } from './build-info.js';
import { RunningWarmup } from './warmup/index.js';
import { SQUID_HTTP_PORT, SQUID_ICP_PORT } from './vocabulary.js';

export interface DaemonOptions {
  readonly config: Config;
  readonly log: Log;
  /** Monotonic time for durations, wall time for dates (src/clock.ts); tests step each on its own. */
  readonly clock?: WallClock;
  /** Overrides the configured data plane (tests). */
  readonly redirector?: Redirector;
  /** Replaces the br_netfilter check (tests); by default it reads the sysctl and lists bridges with `ip`. */
  readonly checkBridgeNetfilter?: CheckBridgeNetfilter;
  /** A reload's logging.level (the logger is the caller's). */
  readonly setLogLevel?: (level: LogLevel) => void;
}

export class Daemon {
  readonly cluster: Cluster;
  private readonly redirector: Redirector;
  private readonly pipeline: ApplyPipeline;
  private readonly saver: StateSaver;
  /** The cluster's events as log lines (engine-state lines rate-limited). */
  private readonly eventLog: ClusterEventLog;
  private readonly model: ClusterModel;
  private readonly metrics: Metrics;
  private router: WccpRouter | null = null;
  private timers: ClusterTimers | null = null;
  private probes: { scheduler: ProbeScheduler; probers: Probers } | null = null;
  private maintenance: MaintenanceScheduler | null = null;
  private admin: AdminServer | null = null;
  private readonly clock: WallClock;
  /** The warm-up policy and broker, when `warmup.listen` is set (docs/warmup.md). */
  private readonly warmup: RunningWarmup | null;
  /** The config in force: the one started with, then each reload's that was applied. */
  private config: Config;
  /** Reloads (docs/operations.md, "Reload"): when the config in force was read (wall ms), counts, the last one. */
  private readonly reloads: { loadedAt: number; count: number; failures: number; last: ReloadResultView | null };
  /** The reload waiting to run (later requests join it), and the chain that runs them one at a time. */
  private reloadQueued: Promise<void> | null = null;
  private reloadChain: Promise<void>;
  private markStarted: () => void = () => undefined;
  /** The peer gateways compared with us: the config's, then a reload's. */
  private peers: PeerChecker;
  private stopping = false;

  constructor(private readonly options: DaemonOptions) {
    const { config, log } = options;
    this.config = config;
    const clock = (this.clock = options.clock ?? systemClock);
    this.reloads = { loadedAt: clock.wall(), count: 0, failures: 0, last: null };
    // A reload asked for while wccpd starts runs once it has started.
    this.reloadChain = new Promise((resolve) => (this.markStarted = resolve));
    this.cluster = new Cluster({
      clock,
      routerAddress: config.router.address,
      hereIAmMs: config.timers.hereIAmMs,
      services: config.services.map(serviceGroupConfig),
      health: config.health,
      firstReceiveId: () => randomInt(1, 0xffffffff),
      settleMs: config.timers.settleMs,
    });
    // The userland backend loads its packet I/O (native pcap/raw-socket or the shims) in start().
    const redirector = (this.redirector =
      options.redirector ??
      createRedirector(config.dataplane.backend, {
        userland: { log },
        ingress: { flowMax: config.dataplane.flows.max, flowIdleSeconds: config.dataplane.flows.idleMs / 1000, log },
        nft: {
          stateDir: config.stateDir,
          configuredServices: config.services.map((s) => s.id),
          conntrack: config.dataplane.conntrack,
          log,
        },
      }));
    this.pipeline = new ApplyPipeline({
      redirector,
      log,
      wall: () => clock.wall(),
      services: () => this.config.services,
      routes: (id) => this.cluster.routes(id),
      observe: (seconds, ok) => this.metrics.observeApply(redirector.name, seconds, ok),
      ...(options.checkBridgeNetfilter ? { checkBridgeNetfilter: options.checkBridgeNetfilter } : {}),
    });
    const warmup = (this.warmup =
      config.warmup.listen === null
        ? null
        : new RunningWarmup({
            settings: warmupSettings(config),
            clock,
            log,
            onEvent: ({ type, service, engine, to, reason, queries, peerHits }) => {
              this.model.recordEvent({ type, service, engine, to, reason, queries, peerHits });
              this.saver.schedule();
            },
            save: () => this.saver.schedule(),
            lastSave: () => this.saver.lastSave(),
          }));
    this.saver = new StateSaver({
      dir: config.stateDir,
      clock,
      log,
      memory: () => this.cluster.memory(),
      extra: (id) => {
        const w = warmup?.policy.memory(id) ?? null;
        return w === null ? null : { warmup: w };
      },
    });
    this.eventLog = new ClusterEventLog(log);
    this.peers = this.peerChecker(config);
    this.model = new ClusterModel({
      cluster: this.cluster,
      build: buildInfo(),
      clock,
      dataplane: () => dataplaneView(redirector, this.pipeline.bridgeNetfilter()),
      inForce: (service) => this.pipeline.tableInForce(service),
      bucketMoves: () => redirector.bucketMoves?.() ?? null,
      traffic: async (b) => trafficOf(await redirector.counters({ buckets: b === undefined ? [] : [b] })),
      commanded: () => this.saver.schedule(),
      dropped: () => this.router?.counters().dropped ?? {},
      wccpSocket: () => {
        const reported = this.router?.receiveBuffer() ?? null;
        return reported === null
          ? null
          : { receiveBufferBytes: reported / 2, kernelDrops: this.router?.socketDrops() ?? null };
      },
      which: (service, address) => {
        const r = this.pipeline.redirect(service);
        if (r === null) return null;
        const e = explain(r, address);
        return { service, address, bucket: e.bucket, engine: e.engine, why: e.why };
      },
      admin: () => this.admin?.counters() ?? idleAdminCounters(config.admin.eventClients),
      config: () => this.configView(),
      peers: () => (this.config.peers.length > 0 ? this.peers.check() : Promise.resolve(undefined)),
      ...(warmup !== null ? { warmup } : {}),
    });
    this.metrics = createMetrics(this.model);
  }

  private peerChecker(config: Config): PeerChecker {
    return new PeerChecker({
      peers: config.peers,
      clock: this.clock,
      serviceIds: () => this.cluster.serviceIds(),
      ours: (id) => this.cluster.service(id) ?? null,
    });
  }

  async start(): Promise<void> {
    try {
      await this.startParts();
    } finally {
      this.markStarted();
    }
  }

  private async startParts(): Promise<void> {
    const { config, log } = this.options;
    for (const w of configWarnings(config, { interfaces: await hostInterfaces() }))
      log.warn({ file: config.file, key: w.key }, `${config.file}: ${w.key}: ${w.message}`);
    const loaded = await loadState(config.stateDir);
    for (const bad of loaded.bad)
      log.warn({ file: bad.file, reason: bad.reason }, `state file ${bad.file} is bad: ${bad.reason}`);

    await this.redirector.start();
    const fastPath = this.redirector.fastPath?.() ?? null;
    if (fastPath !== null) {
      log.info(
        { dataplane: this.redirector.name, flowtable: fastPath.flowtable, fastPath: fastPath.used },
        fastPath.detail,
      );
    }
    await this.pipeline.checkBridges();
    // Seed the cluster only now, so the data plane loads the persisted table; the restart grace time (3 x HERE_I_AM_T
    // or more, during which returning engines get their persisted buckets back) starts again once the router listens.
    const savedAt = loaded.state.savedAt;
    for (const s of loaded.state.services)
      if (this.cluster.hasService(s.id))
        this.cluster.restore(toMemory(s, (at) => restoredTime(this.clock, at, savedAt)));
    // A warm-up running when wccpd stopped goes on with the time it had left (docs/warmup.md).
    // Without saved sessions (an older file) the persisted owners still matter: getting their buckets back is no gain.
    for (const s of loaded.state.services)
      this.warmup?.policy.restore(s.id, s.warmup ?? { sessions: [], gained: [] }, s.table.buckets);
    log.info(
      { stateDir: config.stateDir, source: loaded.source, services: loaded.state.services.length },
      'state loaded',
    );
    this.cluster.onEvent((e) => this.onClusterEvent(e));
    // A change waiting for timers.settle (an admin command, say) needs the timers re-armed for its due time.
    this.cluster.onWake(() => this.timers?.rearm());
    this.warmup?.watch(this.cluster);
    await this.pipeline.changed(this.cluster.serviceIds());

    const router = new WccpRouter({
      address: config.router.address,
      port: config.router.port,
      cluster: this.cluster,
      log,
      clock: this.clock,
      services: routerServices(config),
      onActivity: () => this.timers?.rearm(),
    });
    await router.start();
    this.router = router;
    this.cluster.startRestartGrace();
    this.timers = new ClusterTimers(this.cluster, this.clock, (plans) => router.sendRemovalQueries(plans));
    this.timers.start();
    await this.startProbes(config);
    this.maintenance = new MaintenanceScheduler({
      cluster: this.cluster,
      clock: this.clock,
      log,
      windows: maintenanceWindows(config),
    });
    this.maintenance.start();

    if (this.warmup !== null && config.warmup.listen !== null) {
      await this.warmup.start({
        listen: config.warmup.listen,
        icpPort: config.warmup.icpPort,
        httpPort: config.warmup.httpPort,
        sourceIcpPort: config.health.icp.port ?? SQUID_ICP_PORT,
        sourceHttpPort: config.health.http.port ?? SQUID_HTTP_PORT,
        limits: { maxRelayRate: config.warmup.maxRelayRate, maxObjectBytes: config.warmup.maxObjectBytes },
      });
    }

    this.admin = new AdminServer({
      host: config.admin.listen.host,
      port: config.admin.listen.port,
      token: config.admin.token,
      hosts: config.admin.hosts,
      eventClients: config.admin.eventClients,
      log,
      context: { model: this.model, metrics: this.metrics },
    });
    await this.admin.start();
    const { version, commit } = buildInfo();
    log.info(
      {
        router: `${config.router.address}:${router.port()}`,
        admin: `${config.admin.listen.host}:${this.admin.port()}`,
        dataplane: this.redirector.name,
        version,
        commit,
        services: this.cluster.serviceIds(),
      },
      'wccpd started',
    );
  }

  /** The active probes by `config.health` (at start, and after a reload that changed it). */
  private async startProbes(config: Config): Promise<void> {
    const probers = await createProbers(config.health, this.options.log, {
      routerAddress: config.router.address,
      httpPort: config.health.http.port ?? undefined,
      tcpPort: config.health.tcp.port ?? undefined,
      icpPort: config.health.icp.port ?? undefined,
    });
    const scheduler = new ProbeScheduler({
      cluster: this.cluster,
      settings: config.health,
      probers: probers.probers,
      log: this.options.log,
    });
    scheduler.start();
    this.probes = { scheduler, probers };
  }

  private stopProbes(): void {
    this.probes?.scheduler.stop();
    this.probes?.probers.close();
    this.probes = null;
  }

  private onClusterEvent(e: ClusterEvent): void {
    this.eventLog.write(e);
    void this.pipeline.changed([e.service]);
    this.saver.schedule();
    this.timers?.rearm();
  }

  /**
   * Reads the config file again and applies what differs (docs/operations.md, "Reload"); a file that is invalid, or
   * that changes what only a restart changes, is refused whole and wccpd runs on. One reload at a time: one asked for
   * while another runs runs after it, and the requests that arrive meanwhile are that one. Never rejects.
   */
  reload(): Promise<void> {
    if (this.reloadQueued !== null) return this.reloadQueued;
    const queued = this.reloadChain
      .then(() => {
        this.reloadQueued = null;
        return this.stopping ? undefined : this.reloadOnce();
      })
      .catch((err: unknown) =>
        this.reloadRefused(this.config.file, [
          `reload failed inside wccpd: ${err instanceof Error ? err.message : String(err)}`,
        ]),
      );
    this.reloadQueued = queued;
    this.reloadChain = queued;
    return queued;
  }

  private async reloadOnce(): Promise<void> {
    const { log } = this.options;
    const file = this.config.file;
    let next: Config;
    try {
      next = await loadConfig(file);
    } catch (e) {
      if (e instanceof ConfigError)
        return this.reloadRefused(
          file,
          e.problems.map((p) => formatProblem(e.file, p)),
        );
      return this.reloadRefused(file, [`${file}: cannot read: ${e instanceof Error ? e.message : String(e)}`]);
    }
    const diff = configDiff(this.config, next);
    if (diff.restart.length > 0)
      return this.reloadRefused(
        file,
        diff.restart.map((p) => formatProblem(file, p)),
      );
    for (const w of configWarnings(next, { interfaces: await hostInterfaces() }))
      log.warn({ file, key: w.key }, `${file}: ${w.key}: ${w.message}`);
    if (this.stopping) return;
    await this.applyReload(next, diff);
    this.recordReload({ ok: true, changed: diff.changed, errors: [] });
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
  private async applyReload(next: Config, diff: ConfigDiff): Promise<void> {
    const changed = (key: string) => diff.changed.includes(key);
    this.config = next;
    if (changed('logging.level')) this.options.setLogLevel?.(next.logging.level);
    const { token, hosts, eventClients } = next.admin;
    this.admin?.setAccess({ token, hosts, eventClients });
    this.router?.setServices(routerServices(next));
    if (changed('timers.hereIAm') || changed('timers.settle'))
      this.cluster.setTimers(next.timers.hereIAmMs, next.timers.settleMs);
    for (const id of diff.removed) this.cluster.removeService(id);
    for (const s of next.services) {
      if (diff.added.includes(s.id)) this.cluster.addService(serviceGroupConfig(s));
      else if (diff.reconfigured.includes(s.id)) this.cluster.reconfigure(serviceGroupConfig(s));
    }
    this.warmup?.policy.setSettings(warmupSettings(next));
    if (changed('warmup.maxRelayRate') || changed('warmup.maxObjectSize'))
      this.warmup?.setRelayBudgets({
        maxRelayRate: next.warmup.maxRelayRate,
        maxObjectBytes: next.warmup.maxObjectBytes,
      });
    this.maintenance?.setWindows(maintenanceWindows(next));
    if (changed('health')) {
      this.cluster.setHealth(next.health);
      this.stopProbes();
      await this.startProbes(next);
    }
    if (changed('peers')) this.peers = this.peerChecker(next);
    for (const id of diff.removed) void this.pipeline.removed(id);
    void this.pipeline.changed([...diff.added, ...diff.reconfigured]);
    this.saver.schedule();
    this.timers?.rearm();
    if (diff.added.length > 0 || diff.removed.length > 0)
      this.options.log.info(
        { services: this.cluster.serviceIds() },
        `services now: ${this.cluster.serviceIds().join(', ')}`,
      );
  }

  private reloadRefused(file: string, errors: readonly string[]): void {
    const { log } = this.options;
    this.recordReload({ ok: false, changed: [], errors });
    for (const e of errors) log.error({ config: file, problem: e }, `reload refused: ${e}`);
    const loaded = new Date(this.reloads.loadedAt).toISOString();
    log.error(
      { config: file, errors },
      `reload: ${file} refused (${errors.length} problem${errors.length === 1 ? '' : 's'}); wccpd runs on the config loaded ${loaded}`,
    );
  }

  private recordReload(r: Omit<ReloadResultView, 'at'>): void {
    const now = this.clock.wall();
    this.reloads.count += 1;
    if (r.ok) this.reloads.loadedAt = now;
    else this.reloads.failures += 1;
    this.reloads.last = { ...r, at: new Date(now).toISOString() };
  }

  private configView(): ConfigView {
    const r = this.reloads;
    return {
      file: this.config.file,
      loadedAt: new Date(r.loadedAt).toISOString(),
      reloads: r.count,
      reloadFailures: r.failures,
      lastReload: r.last,
    };
  }

  /** Stops in reverse order: no more input, then state saved, then the data plane's rules removed. */
  async stop(): Promise<void> {
    const { log } = this.options;
    this.stopping = true;
    this.markStarted();
    await this.reloadChain;
    this.pipeline.stop();
    this.eventLog.stop();
    this.timers?.stop();
    this.stopProbes();
    this.maintenance?.stop();
    await this.warmup?.stop();
    await this.router?.stop();
    await this.admin?.stop();
    await this.saver.save();
    await this.pipeline.idle();
    try {
      await this.redirector.stop();
    } catch (err) {
      log.error({ err: err instanceof Error ? err.message : String(err) }, 'data plane stop failed');
    }
    log.info({}, 'wccpd stopped');
  }

  routerPort(): number | null {
    return this.router?.port() ?? null;
  }

  /** The warm-up broker's ICP and HTTP ports, or null without a broker. */
  warmupPorts(): { icp: number | null; http: number | null } | null {
    return this.warmup?.ports() ?? null;
  }

  adminPort(): number | null {
    return this.admin?.port() ?? null;
  }
}
