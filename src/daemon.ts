// The composition root: config -> cluster (seeded from state) -> data plane -> UDP router + timers -> admin API.
// Starts the parts in that order and stops them in reverse: the data plane's rules are removed and the state is saved.
// It only wires: each part's work lives in its own room (the apply pipeline in dataplane/apply.ts, persistence in
// state/persist.ts, the warm-up in warmup/running.ts, the admin model in admin/cluster-model.ts, the cluster's event
// lines in control/event-log.ts); what is the daemon's own lives beside it in src/daemon/ (the reload in reload.ts,
// the state read and seeded at start in startup.ts, the active probes in probes.ts, the peer gateways in peers.ts).
import { randomInt } from 'node:crypto';
import { Cluster } from './cluster/index.js';
import type { ClusterEvent } from './cluster/index.js';
import { systemClock } from './clock.js';
import type { WallClock } from './clock.js';
import { ClusterEventLog, ClusterTimers, MaintenanceScheduler, WccpRouter } from './control/index.js';
import type { Config, LogLevel } from './config/index.js';
import { maintenanceWindows, routerServices, serviceGroupConfig, warmupSettings } from './config/index.js';
import { createRedirector, explain } from './dataplane/index.js';
import { ApplyPipeline } from './dataplane/apply.js';
import type { CheckBridgeNetfilter } from './dataplane/kernel/bridge-netfilter.js';
import type { Redirector } from './dataplane/redirector.js';
import { StateSaver } from './state/persist.js';
import { AdminServer, idleAdminCounters } from './admin/http.js';
import { ClusterModel, dataplaneView, trafficOf } from './admin/cluster-model.js';
import { createMetrics } from './admin/metrics.js';
import type { Metrics } from './admin/metrics.js';
import type { Log } from './log.js';
import { buildInfo } from './build-info.js';
import { RunningWarmup } from './warmup/index.js';
import { ActiveProbes } from './daemon/probes.js';
import { Reloads } from './daemon/reload.js';
import { brokerOptions, readState, restoreState, warnConfig } from './daemon/startup.js';
import { ConfiguredPeers } from './daemon/peers.js';
import { LoadWindows } from './daemon/load.js';
import { LoadExchange } from './daemon/load-peers.js';

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
  private readonly probes: ActiveProbes;
  private maintenance: MaintenanceScheduler | null = null;
  private admin: AdminServer | null = null;
  private readonly clock: WallClock;
  /** The warm-up policy and broker, when `warmup.listen` is set (docs/warmup.md). */
  private readonly warmup: RunningWarmup | null;
  /** The config in force and its reloads (src/daemon/reload.ts). */
  private readonly reloads: Reloads;
  private readonly peers: ConfiguredPeers;
  /** Load-aware assignment's windows (src/daemon/load.ts). */
  private readonly loadWindows: LoadWindows;
  private readonly loadExchange: LoadExchange;

  constructor(private readonly options: DaemonOptions) {
    const { config, log } = options;
    const clock = (this.clock = options.clock ?? systemClock);
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
      services: () => this.reloads.config.services,
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
    this.probes = new ActiveProbes(this.cluster, log);
    this.reloads = new Reloads(
      {
        log,
        clock,
        cluster: this.cluster,
        pipeline: this.pipeline,
        saver: this.saver,
        warmup,
        router: () => this.router,
        admin: () => this.admin,
        timers: () => this.timers,
        maintenance: () => this.maintenance,
        restartProbes: (next) => this.probes.restart(next),
        setPeers: (next) => this.peers.set(next),
        ...(options.setLogLevel ? { setLogLevel: options.setLogLevel } : {}),
      },
      config,
    );
    this.peers = new ConfiguredPeers(this.cluster, clock, config);
    const loadExchange = (this.loadExchange = new LoadExchange({
      cluster: this.cluster,
      clock,
      peers: () => this.reloads.config.peers,
      services: () => this.reloads.config.services,
      log,
    }));
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
      internalErrors: () => ({
        'cluster-tick': this.timers?.tickErrors() ?? 0,
        'state-save': this.saver.failures(),
      }),
      which: (service, address) => {
        const r = this.pipeline.redirect(service);
        if (r === null) return null;
        const e = explain(r, address);
        return { service, address, bucket: e.bucket, engine: e.engine, family: e.family, why: e.why };
      },
      admin: () => this.admin?.counters() ?? idleAdminCounters(config.admin.eventClients),
      config: () => this.reloads.view(),
      peers: () => this.peers.check(),
      loadEpoch: (service, epoch) => loadExchange.view(service, epoch),
      peerLoads: (service, wall) => loadExchange.peersSoFar(service, wall),
      ...(warmup !== null ? { warmup } : {}),
    });
    this.metrics = createMetrics(this.model);
    this.loadWindows = new LoadWindows({
      cluster: this.cluster,
      counters: (services) => redirector.counters({ buckets: services }),
      clock,
      services: () => this.reloads.config.services,
      log,
      peers: loadExchange,
    });
  }

  async start(): Promise<void> {
    try {
      await this.startParts();
    } finally {
      this.reloads.started();
    }
  }

  private async startParts(): Promise<void> {
    const { config, log } = this.options;
    await warnConfig(config, log);
    const loaded = await readState(config.stateDir, log);

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
    restoreState(loaded, {
      cluster: this.cluster,
      warmup: this.warmup,
      clock: this.clock,
      log,
      stateDir: config.stateDir,
    });
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
    this.timers = new ClusterTimers(this.cluster, this.clock, (plans) => router.sendRemovalQueries(plans), log);
    this.timers.start();
    await this.probes.start(config);
    this.maintenance = new MaintenanceScheduler({
      cluster: this.cluster,
      clock: this.clock,
      log,
      windows: maintenanceWindows(config),
    });
    this.maintenance.start();
    this.loadWindows.start();

    const broker = brokerOptions(config);
    if (this.warmup !== null && broker !== null) await this.warmup.start(broker);

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

  private onClusterEvent(e: ClusterEvent): void {
    this.eventLog.write(e);
    void this.pipeline.changed([e.service]);
    this.saver.schedule();
    this.timers?.rearm();
  }

  /** A reload (docs/operations.md, "Reload"), by src/daemon/reload.ts; never rejects. */
  reload(): Promise<void> {
    return this.reloads.request();
  }

  /** Stops in reverse order: no more input, then state saved, then the data plane's rules removed. */
  async stop(): Promise<void> {
    const { log } = this.options;
    await this.reloads.stop();
    this.pipeline.stop();
    this.eventLog.stop();
    this.timers?.stop();
    this.probes.stop();
    this.maintenance?.stop();
    this.loadWindows.stop();
    this.loadExchange.stop();
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
