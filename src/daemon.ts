// The composition root: config -> cluster (seeded from state) -> data plane -> UDP router + timers -> admin API.
// Starts the parts in that order and stops them in reverse: the data plane's rules are removed and the state is saved.
import { randomInt } from 'node:crypto';
import { Cluster } from './cluster/index.js';
import type { ClusterEvent, ServiceGroupConfig, ServiceMemory, ServiceSnapshot } from './cluster/index.js';
import { systemClock, wallTimeOf } from './clock.js';
import type { WallClock } from './clock.js';
import { ClusterTimers, MaintenanceScheduler, WccpRouter } from './control/index.js';
import { createProbers, ProbeScheduler } from './control/probes/index.js';
import type { Probers } from './control/probes/index.js';
import type { Config, ServiceConfig } from './config/index.js';
import { configWarnings, hostInterfaces } from './config/index.js';
import { createRedirector, explain } from './dataplane/index.js';
import { createExec } from './dataplane/kernel/exec.js';
import { BRIDGE_NF_SYSCTL, bridgeNetfilterWarning, checkBridgeNetfilter } from './dataplane/kernel/bridge-netfilter.js';
import type { BridgeNetfilterState } from './dataplane/kernel/bridge-netfilter.js';
import type { Redirector, ServiceRedirect } from './dataplane/redirector.js';
import { loadState, saveState, STATE_VERSION } from './state/index.js';
import type { PersistedService, PersistedState } from './state/index.js';
import { AdminServer } from './admin/http.js';
import { ClusterModel } from './admin/cluster-model.js';
import { PeerChecker } from './admin/peers.js';
import type { TrafficCounters } from './admin/cluster-model.js';
import { createMetrics } from './admin/metrics.js';
import type { Metrics } from './admin/metrics.js';
import type { InForceView, WhichView } from './admin/api-types.js';
import type { Log } from './log.js';
import { buildInfo } from './build-info.js';
import { IP_PROTOCOL, isDynamicService, ServiceFlag } from './vocabulary.js';
import { WarmupBroker, WarmupPolicy } from './warmup/index.js';
import type { WarmupEvent, WarmupSettings } from './warmup/index.js';

const PERSIST_DEBOUNCE_MS = 250;
const WARMUP_SAVE_MS = 30_000;

export interface DaemonOptions {
  readonly config: Config;
  readonly log: Log;
  /** Monotonic time for durations, wall time for dates (src/clock.ts); tests step each on its own. */
  readonly clock?: WallClock;
  /** Overrides the configured data plane (tests). */
  readonly redirector?: Redirector;
  /** Replaces the br_netfilter check (tests); by default it reads the sysctl and lists bridges with `ip`. */
  readonly checkBridgeNetfilter?: (inputs: {
    clientInterfaces: readonly string[];
    engines: readonly string[];
  }) => Promise<BridgeNetfilterState>;
}

export function clusterServiceConfig(s: ServiceConfig): ServiceGroupConfig {
  return {
    id: s.id,
    forwarding: s.forwarding,
    return: s.return,
    assignment: s.assignment,
    authority: s.authority,
    mode: s.mode,
    failMode: s.failMode,
    lenientReceiveId: s.engines.lenientReceiveId,
    weights: s.weights,
    historyWindowMs: s.historyWindowMs,
    failbackHoldMs: s.failbackHoldMs,
    peers: s.peers,
    ...(isDynamicService(s.id)
      ? {
          expect: {
            protocol: IP_PROTOCOL[s.protocol],
            ports: s.ports,
            portsSource: s.portsSource,
            ...(s.priority !== null ? { priority: s.priority } : {}),
          },
        }
      : {}),
  };
}

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

function toMemory(p: PersistedService, when: (at: number) => number): ServiceMemory {
  return {
    id: p.id,
    table: p.table,
    ...(p.mask !== undefined ? { mask: p.mask } : {}),
    receiveId: p.receiveId,
    memberChangeNumber: 0,
    counters: p.counters,
    adminDrained: p.adminDrained ?? [],
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
function toPersisted(m: ServiceMemory, wall: (t: number) => number): PersistedService {
  return {
    id: m.id,
    table: m.table,
    ...(m.mask !== undefined ? { mask: m.mask } : {}),
    receiveId: m.receiveId,
    counters: m.counters,
    adminDrained: m.adminDrained,
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

/** Engine-state log lines per engine and service: at most the burst in each window; the rest counted in one more. */
const ENGINE_STATE_LOG_MS = 1000;
const ENGINE_STATE_LOG_BURST = 3;

interface StateLineWindow {
  written: number;
  held: number;
  last: Extract<ClusterEvent, { type: 'engine-state' }> | null;
  timer: ReturnType<typeof setTimeout> | null;
}

/** A changed service's table waiting for the data plane, and the key it is applied under (Daemon.applied). */
interface PendingApply {
  readonly id: number;
  readonly redirect: ServiceRedirect;
  readonly key: string;
}

export class Daemon {
  readonly cluster: Cluster;
  private redirector: Redirector;
  /** Per `<service> <engine>`: engine-state transitions held back from the log in the current second. */
  private readonly stateLines = new Map<string, StateLineWindow>();
  /** The last br_netfilter check (null: not yet, or a backend without kernel rules). */
  private bridgeNetfilter: BridgeNetfilterState | null = null;
  private readonly kernelExec = createExec();
  private readonly model: ClusterModel;
  private readonly metrics: Metrics;
  private router: WccpRouter | null = null;
  private timers: ClusterTimers | null = null;
  private probes: { scheduler: ProbeScheduler; probers: Probers } | null = null;
  private maintenance: MaintenanceScheduler | null = null;
  private admin: AdminServer | null = null;
  private persistTimer: ReturnType<typeof setTimeout> | null = null;
  private saving: Promise<void> = Promise.resolve();
  private applying: Promise<void> = Promise.resolve();
  private readonly dirty = new Set<number>();
  /** Per service, what the data plane last applied without error: an identical redirect is not applied again. */
  private readonly applied = new Map<number, string>();
  /** Per service, the change number of that redirect and when it was applied: the table in force (docs/api.md). */
  private readonly inForce = new Map<number, InForceView>();
  /** Per service: the delay before the next retry of a failed apply (doubles up to 30 s), and its timer. */
  private readonly retries = new Map<number, { delayMs: number; timer: ReturnType<typeof setTimeout> | null }>();
  private stopping = false;
  private readonly clock: WallClock;
  /** The warm-up policy and broker, when `warmup.listen` is set (docs/warmup.md). */
  private readonly warmup: WarmupPolicy | null;
  private broker: WarmupBroker | null = null;
  private warmupTimer: ReturnType<typeof setInterval> | null = null;
  private warmupSavedAt = 0;

  constructor(private readonly options: DaemonOptions) {
    const { config } = options;
    this.clock = options.clock ?? systemClock;
    this.cluster = new Cluster({
      clock: this.clock,
      routerAddress: config.router.address,
      hereIAmMs: config.timers.hereIAmMs,
      services: config.services.map(clusterServiceConfig),
      health: config.health,
      firstReceiveId: () => randomInt(1, 0xffffffff),
      settleMs: config.timers.settleMs,
    });
    // The userland backend loads its packet I/O (native pcap/raw-socket or the shims) in start().
    this.redirector =
      options.redirector ??
      createRedirector(config.dataplane.backend, {
        userland: { log: options.log },
        ingress: {
          flowMax: config.dataplane.flows.max,
          flowIdleSeconds: config.dataplane.flows.idleMs / 1000,
          log: options.log,
        },
        nft: {
          stateDir: config.stateDir,
          configuredServices: config.services.map((s) => s.id),
          conntrack: config.dataplane.conntrack,
          log: options.log,
        },
      });
    const peers = new PeerChecker({
      peers: config.peers,
      clock: this.clock,
      serviceIds: () => this.cluster.serviceIds(),
      ours: (id) => this.cluster.service(id) ?? null,
    });
    this.warmup =
      config.warmup.listen === null
        ? null
        : new WarmupPolicy(
            new Map(
              config.services.map((s): [number, WarmupSettings] => [
                s.id,
                {
                  ...s.warmup,
                  // A bucket coming back within the history window is the cluster's sticky return: that engine is still
                  // warm.
                  stickyMs: s.historyWindowMs,
                },
              ]),
            ),
            this.clock,
          );
    const warmup = this.warmup;
    this.model = new ClusterModel({
      cluster: this.cluster,
      build: buildInfo(),
      clock: this.clock,
      dataplane: () => {
        const fastPath = this.redirector.fastPath?.() ?? null;
        const restored = this.redirector.restored?.();
        const own = this.redirector.status?.();
        return {
          backend: this.redirector.name,
          detail: own?.detail ?? '',
          ...(fastPath !== null ? { fastPath } : {}),
          bridgeNetfilter: this.bridgeNetfilter,
          ...(restored !== undefined ? { restored } : {}),
          ...(own?.userland !== undefined ? { userland: own.userland } : {}),
        };
      },
      inForce: (service) => this.inForce.get(service) ?? null,
      bucketMoves: () => this.redirector.bucketMoves?.() ?? null,
      traffic: (bucketsOf) => this.traffic(bucketsOf),
      commanded: () => this.schedulePersist(),
      dropped: () => this.router?.counters().dropped ?? {},
      which: (service, address) => this.which(service, address),
      admin: () =>
        this.admin?.counters() ?? {
          eventClients: 0,
          eventClientsMax: config.admin.eventClients,
          eventClientsRefused: 0,
          eventClientsDropped: 0,
          hostRefused: 0,
          connectionsRefused: 0,
          internalErrors: 0,
        },
      ...(config.peers.length > 0 ? { peers: () => peers.check() } : {}),
      ...(warmup !== null
        ? {
            warmup: {
              view: (service: number, engine: string) => warmup.view(service, engine),
              bucket: (service: number, i: number) => warmup.bucket(service, i),
              counters: () => this.broker?.snapshotCounters() ?? {},
            },
          }
        : {}),
    });
    this.metrics = createMetrics(this.model);
  }

  /** The data plane's counters, with the per-bucket ones of `bucketsOf` alone (a listing per service in nft). */
  private async traffic(bucketsOf?: number): Promise<TrafficCounters> {
    const c = await this.redirector.counters({ buckets: bucketsOf === undefined ? [] : [bucketsOf] });
    // The ingress backend also counts, per service, what its full flow map could not record.
    const full = c.flowsFull;
    const services =
      c.services && full
        ? new Map(
            [...c.services].map(([id, s]) => {
              const f = full.get(id);
              return [id, f !== undefined ? { ...s, flowsFull: f } : s] as const;
            }),
          )
        : c.services;
    return { engines: c.engines, buckets: c.buckets, ...(services ? { services } : {}) };
  }

  private which(service: number, address: string): WhichView | null {
    const snap = this.cluster.service(service);
    const cfg = this.options.config.services.find((s) => s.id === service);
    if (!snap || !cfg) return null;
    const e = explain(this.redirectFor(cfg, snap), address);
    return { service, address, bucket: e.bucket, engine: e.engine, why: e.why };
  }

  async start(): Promise<void> {
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
    await this.checkBridges();
    // Seed the cluster only now, so the data plane loads the persisted table; the restart grace time (3 x HERE_I_AM_T
    // or more, during which returning engines get their persisted buckets back) starts again once the router listens.
    const savedAt = loaded.state.savedAt;
    for (const s of loaded.state.services)
      if (this.cluster.hasService(s.id))
        this.cluster.restore(toMemory(s, (at) => restoredTime(this.clock, at, savedAt)));
    // A warm-up running when wccpd stopped goes on with the time it had left (docs/warmup.md).
    // Without saved sessions (an older file) the persisted owners still matter: getting their buckets back is no gain.
    for (const s of loaded.state.services)
      this.warmup?.restore(s.id, s.warmup ?? { sessions: [], gained: [] }, s.table.buckets);
    log.info(
      { stateDir: config.stateDir, source: loaded.source, services: loaded.state.services.length },
      'state loaded',
    );
    this.cluster.onEvent((e) => this.onClusterEvent(e));
    // A change waiting for timers.settle (an admin command, say) needs the timers re-armed for its due time.
    this.cluster.onWake(() => this.timers?.rearm());
    if (this.warmup !== null) {
      const policy = this.warmup;
      for (const id of this.cluster.serviceIds()) {
        const s = this.cluster.service(id);
        if (s) policy.observe(s);
      }
      this.cluster.onEvent((e) => {
        const s = this.cluster.service(e.service);
        if (s) policy.observe(s);
      });
      policy.onEvent((e) => this.onWarmupEvent(e));
    }
    for (const id of this.cluster.serviceIds()) this.dirty.add(id);
    await this.applyDirty();

    const router = new WccpRouter({
      address: config.router.address,
      port: config.router.port,
      cluster: this.cluster,
      log,
      clock: this.clock,
      services: config.services.map((s) => ({
        id: s.id,
        ...(s.password !== null ? { password: s.password } : {}),
        allow: s.engines.allow.map((c) => c.text),
        quirks: s.quirks,
      })),
      onActivity: () => this.timers?.rearm(),
    });
    await router.start();
    this.router = router;
    this.cluster.startRestartGrace();
    this.timers = new ClusterTimers(this.cluster, this.clock, (plans) => router.sendRemovalQueries(plans));
    this.timers.start();
    const probers = await createProbers(config.health, log, {
      routerAddress: config.router.address,
      httpPort: config.health.http.port ?? undefined,
      tcpPort: config.health.tcp.port ?? undefined,
      icpPort: config.health.icp.port ?? undefined,
    });
    const scheduler = new ProbeScheduler({
      cluster: this.cluster,
      settings: config.health,
      probers: probers.probers,
      log,
    });
    scheduler.start();
    this.probes = { scheduler, probers };
    this.maintenance = new MaintenanceScheduler({
      cluster: this.cluster,
      clock: this.clock,
      log,
      windows: config.services.flatMap((s) =>
        s.maintenance.map((m, i) => ({
          key: `${s.id}/${i}`,
          service: s.id,
          engine: m.engine,
          cron: m.cron,
          durationMs: m.durationMs,
          timezone: m.timezone,
        })),
      ),
    });
    this.maintenance.start();

    if (this.warmup !== null && config.warmup.listen !== null) {
      const broker = new WarmupBroker({
        listen: config.warmup.listen,
        icpPort: config.warmup.icpPort,
        httpPort: config.warmup.httpPort,
        sourceIcpPort: config.health.icp.port ?? 3130,
        sourceHttpPort: config.health.http.port ?? 3128,
        policy: this.warmup,
        clock: this.clock,
        log,
      });
      try {
        await broker.start();
      } catch (err) {
        const msg = err instanceof Error ? err.message : String(err);
        throw new Error(
          `warm-up broker cannot listen on ${config.warmup.listen} (ICP ${config.warmup.icpPort}, HTTP ${config.warmup.httpPort}): ${msg}`,
        );
      }
      this.broker = broker;
      const policy = this.warmup;
      // Ends warm-ups whose duration is over even when no query comes, so the event and the views say so in time.
      // A warming engine's figures (queries, peer hits, time run) are saved at least every 30 s, so a crash loses
      // little.
      this.warmupTimer = setInterval(() => {
        policy.tick();
        if (policy.warmingCount() > 0 && this.clock.now() - this.warmupSavedAt >= WARMUP_SAVE_MS)
          this.schedulePersist();
      }, 1000);
      this.warmupTimer.unref();
      log.info(
        { warmup: `${config.warmup.listen}`, icpPort: broker.icpPort(), httpPort: broker.httpPort() },
        `warm-up broker listening on ${config.warmup.listen} (ICP ${broker.icpPort() ?? '?'}, HTTP ${broker.httpPort() ?? '?'})`,
      );
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
    log.info(
      {
        router: `${config.router.address}:${router.port()}`,
        admin: `${config.admin.listen.host}:${this.admin.port()}`,
        dataplane: this.redirector.name,
        version: buildInfo().version,
        commit: buildInfo().commit,
        services: this.cluster.serviceIds(),
      },
      'wccpd started',
    );
  }

  /**
   * Engine-state log lines, at most ENGINE_STATE_LOG_BURST per engine and service per second: an engine whose
   * HERE_I_AMs flap (weight, capabilities) would otherwise write a line per datagram. Past the burst, transitions are
   * counted and the last one is written with that count when the second is over. Events (API, stream) keep every one.
   */
  private logEngineState(e: Extract<ClusterEvent, { type: 'engine-state' }>): void {
    const { log } = this.options;
    const key = `${e.service} ${e.engine}`;
    const write = (ev: typeof e, coalesced: number): void => {
      log.info(
        {
          event: ev.type,
          service: ev.service,
          engine: ev.engine,
          from: ev.from,
          to: ev.to,
          reason: ev.reason,
          ...(coalesced > 0 ? { coalesced } : {}),
        },
        `engine ${ev.engine} ${ev.from} -> ${ev.to}: ${ev.reason}${coalesced > 0 ? ` (${coalesced} more transitions in the last second not logged one by one)` : ''}`,
      );
    };
    let w = this.stateLines.get(key);
    if (w === undefined) {
      const entry: StateLineWindow = { written: 0, held: 0, last: null, timer: null };
      const close = (): void => {
        if (entry.held > 0 && entry.last !== null) write(entry.last, entry.held - 1);
        this.stateLines.delete(key);
      };
      entry.timer = setTimeout(close, ENGINE_STATE_LOG_MS);
      entry.timer.unref();
      this.stateLines.set(key, entry);
      w = entry;
    }
    if (w.written < ENGINE_STATE_LOG_BURST) {
      w.written++;
      write(e, 0);
      return;
    }
    w.held++;
    w.last = e;
  }

  private onClusterEvent(e: ClusterEvent): void {
    const { log } = this.options;
    if (e.type === 'engine-state') this.logEngineState(e);
    else
      log.info(
        { event: e.type, service: e.service, changeNumber: e.changeNumber, moved: e.moved, reason: e.reason },
        `table of service ${e.service} is now change ${e.changeNumber} (${e.moved} buckets moved)`,
      );
    this.dirty.add(e.service);
    void this.applyDirty();
    this.schedulePersist();
    this.timers?.rearm();
  }

  private onWarmupEvent(e: WarmupEvent): void {
    const { type, service, engine, to, reason, queries, peerHits } = e;
    this.options.log.info(
      { event: type, service, engine, to, reason, queries, peerHits },
      to === 'warming'
        ? `engine ${engine} warming (service ${service}): ${reason}`
        : `engine ${engine} warm-up ended after ${peerHits}/${queries} peer hits (service ${service}): ${reason}`,
    );
    this.model.recordEvent({ type, service, engine, to, reason, queries, peerHits });
    this.schedulePersist();
  }

  /**
   * Applies the tables of the changed services in ONE data-plane apply (nft: one transaction), so services decided at
   * the same moment (a TPROXY pair whose engine died) come into force together; changes that arrive meanwhile are
   * coalesced into the next one. A batch the data plane refuses is applied again at once one service at a time, so a
   * service whose table is refused keeps no other service's change out; each that still fails retries on its own
   * (scheduleRetry) and joins whatever batch is due then (docs/dataplane/nft.md, "How a change reaches the kernel").
   */
  private applyDirty(): Promise<void> {
    this.applying = this.applying.then(async () => {
      const ids = [...this.dirty].sort((a, b) => a - b);
      this.dirty.clear();
      const batch: PendingApply[] = [];
      for (const id of ids) {
        const snap = this.cluster.service(id);
        const cfg = this.options.config.services.find((s) => s.id === id);
        if (!snap || !cfg) continue;
        const redirect = this.redirectFor(cfg, snap);
        const key = JSON.stringify(redirect);
        // Engine-state events that change nothing the data plane sees (a flapping engine whose buckets wait for
        // timers.settle) cost no transaction.
        if (this.applied.get(id) === key) continue;
        batch.push({ id, redirect, key });
      }
      if (batch.length === 0) return;
      if (!(await this.applyBatch(batch)) && batch.length > 1) for (const one of batch) await this.applyBatch([one]);
      // Engines come and go, and an admin may change the sysctl: look again after every change we made.
      await this.checkBridges();
    });
    return this.applying;
  }

  /**
   * One data-plane apply of `batch` (one observation of the apply metric); true when all of it is in force. A lone
   * service that fails is retried later; a batch that fails is left to the caller, which splits it.
   */
  private async applyBatch(batch: readonly PendingApply[]): Promise<boolean> {
    const started = performance.now();
    try {
      await this.redirector.applyAll(batch.map((b) => b.redirect));
    } catch (err) {
      this.metrics.observeApply(this.redirector.name, (performance.now() - started) / 1000, false);
      const error = err instanceof Error ? err.message : String(err);
      const [only] = batch;
      if (batch.length === 1 && only !== undefined) this.scheduleRetry(only.id, error);
      else {
        const ids = batch.map((b) => b.id).join(', ');
        this.options.log.warn(
          { services: batch.map((b) => b.id), err: error },
          `data plane apply of services ${ids} together failed (their previous tables stay in force); applying each on its own: ${error}`,
        );
      }
      return false;
    }
    this.metrics.observeApply(this.redirector.name, (performance.now() - started) / 1000, true);
    const at = new Date(this.clock.wall()).toISOString();
    for (const { id, redirect, key } of batch) {
      this.applied.set(id, key);
      if (this.redirector.redirectsNothing !== true)
        this.inForce.set(id, { changeNumber: redirect.table.changeNumber, at });
      const retry = this.retries.get(id);
      if (retry) {
        if (retry.timer) clearTimeout(retry.timer);
        this.retries.delete(id);
        this.options.log.info({ service: id }, `data plane apply for service ${id} succeeded after earlier failures`);
      }
    }
    return true;
  }

  /**
   * br_netfilter (docs/operations.md): one warning line when bridged frames start to reach our hooks (or reach them on
   * other bridges), one line when they stop; the state shows in status and /metrics. Only for backends that put
   * rules in the kernel.
   */
  private async checkBridges(): Promise<void> {
    if (this.redirector.inIpHooks !== true) return;
    const { config, log } = this.options;
    const engines = new Set<string>();
    for (const cfg of config.services) {
      const snap = this.cluster.service(cfg.id);
      if (snap) for (const e of this.redirectFor(cfg, snap).engines) engines.add(e);
    }
    const inputs = {
      clientInterfaces: [...new Set(config.services.flatMap((s) => s.clientInterfaces))],
      engines: [...engines],
    };
    let now: BridgeNetfilterState;
    try {
      now = await (this.options.checkBridgeNetfilter ?? ((i) => checkBridgeNetfilter({ ...i, exec: this.kernelExec })))(
        inputs,
      );
    } catch (err) {
      log.debug({ err: err instanceof Error ? err.message : String(err) }, 'br_netfilter check failed');
      return;
    }
    const before = this.bridgeNetfilter;
    this.bridgeNetfilter = now;
    if (now.active && (before?.active !== true || before.bridges.join() !== now.bridges.join())) {
      log.warn(
        { event: 'bridge-netfilter', bridges: now.bridges, sysctl: BRIDGE_NF_SYSCTL },
        bridgeNetfilterWarning(now),
      );
    } else if (!now.active && before?.active === true) {
      log.info(
        { event: 'bridge-netfilter', bridges: [] },
        'br_netfilter no longer sends bridged frames through the IP hooks',
      );
    }
  }

  /**
   * A failed apply leaves the previous table in force (applies are atomic); try again with a growing delay, so the
   * data plane catches up with the cluster once the cause (a busy nft, a missing route) goes away.
   */
  private scheduleRetry(id: number, error: string): void {
    const previous = this.retries.get(id);
    if (previous?.timer) return;
    const delayMs = Math.min(30_000, (previous?.delayMs ?? 500) * 2);
    this.options.log.error(
      { service: id, err: error, retryInMs: delayMs },
      `data plane apply failed for service ${id} (previous table stays in force; retrying in ${delayMs} ms): ${error}`,
    );
    if (this.stopping) return;
    const timer = setTimeout(() => {
      this.retries.set(id, { delayMs, timer: null });
      this.dirty.add(id);
      void this.applyDirty();
    }, delayMs);
    timer.unref();
    this.retries.set(id, { delayMs, timer });
  }

  private redirectFor(cfg: ServiceConfig, snap: ServiceSnapshot): ServiceRedirect {
    return {
      serviceId: cfg.id,
      protocol: IP_PROTOCOL[cfg.protocol],
      ports: cfg.ports,
      portsAreSource: cfg.portsSource,
      serviceFlags: snap.definition?.flags ?? ServiceFlag.DST_IP_HASH,
      priority: cfg.priority ?? snap.definition?.priority ?? 0,
      forwarding: cfg.forwarding,
      failMode: cfg.failMode,
      clientInterfaces: cfg.clientInterfaces,
      table: { changeNumber: snap.changeNumber, buckets: snap.buckets },
      // Draining and suspect (failing probes) engines stay: they hold no buckets, but connections already steered
      // to them keep their route until they end (docs/architecture.md, stickiness), and their own traffic is never
      // redirected. An engine
      // that still holds buckets while a table change waits for timers.settle keeps its route until then.
      engines: [
        ...new Set([
          ...snap.engines
            .filter((e) => e.state === 'usable' || e.state === 'draining' || e.state === 'suspect')
            .map((e) => e.address),
          ...snap.buckets.filter((b): b is string => b !== null),
        ]),
      ],
      ...(snap.assignment === 'mask' ? { maskSets: snap.maskSets } : {}),
    };
  }

  private schedulePersist(): void {
    if (this.persistTimer !== null) return;
    this.persistTimer = setTimeout(() => {
      this.persistTimer = null;
      void this.persist();
    }, PERSIST_DEBOUNCE_MS);
  }

  private persist(): Promise<void> {
    const warmup = this.warmup;
    const state: PersistedState = {
      version: STATE_VERSION,
      savedAt: this.clock.wall(),
      services: this.cluster.memory().map((m) => {
        const w = warmup?.memory(m.id) ?? null;
        const p = toPersisted(m, (t) => wallTimeOf(this.clock, t));
        return w === null ? p : { ...p, warmup: w };
      }),
    };
    this.warmupSavedAt = this.clock.now();
    this.saving = this.saving
      .then(() => saveState(this.options.config.stateDir, state))
      .catch((err: unknown) => {
        this.options.log.error(
          { err: err instanceof Error ? err.message : String(err), stateDir: this.options.config.stateDir },
          'cannot save state',
        );
      });
    return this.saving;
  }

  /** Stops in reverse order: no more input, then state saved, then the data plane's rules removed. */
  async stop(): Promise<void> {
    const { log } = this.options;
    this.stopping = true;
    for (const r of this.retries.values()) if (r.timer) clearTimeout(r.timer);
    for (const h of this.stateLines.values()) if (h.timer) clearTimeout(h.timer);
    this.timers?.stop();
    this.probes?.scheduler.stop();
    this.maintenance?.stop();
    this.probes?.probers.close();
    if (this.warmupTimer !== null) clearInterval(this.warmupTimer);
    await this.broker?.stop();
    await this.router?.stop();
    await this.admin?.stop();
    if (this.persistTimer !== null) clearTimeout(this.persistTimer);
    this.persistTimer = null;
    await this.persist();
    await this.applying;
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
    return this.broker ? { icp: this.broker.icpPort(), http: this.broker.httpPort() } : null;
  }

  adminPort(): number | null {
    return this.admin?.port() ?? null;
  }
}
