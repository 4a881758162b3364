// All service groups of this router. Routes decoded messages and admin commands to the right group, fans events out
// to listeners, and answers snapshots. No sockets, no real timers: control/timers.ts calls tick() when nextDue() says.
import { assignBuckets } from '../buckets/assign.js';
import { earliestDue } from './due.js';
import { formatDuration } from '../duration.js';
import { ServiceGroup } from './service-group.js';
import { detectionTimes, HealthTracker } from './health.js';
import { MaintenanceBook } from './maintenance.js';
import type { MaintenanceWindowState } from './maintenance.js';
import type { AssignVerdict, CommandResult } from './service-group.js';
import { planChange, planRebalance } from './plan.js';
import { sumLoads, windowEnd } from './load-aware.js';
import type { BucketCount, PeerLoads, WindowLoad } from './load-aware.js';
import type { LoadAwarePort, LoadOutcome } from './table-keeper.js';
import type { PlanChange, PlanOutcome } from './plan.js';
import type {
  AssignFn,
  Clock,
  ClusterEvent,
  DetectionTimes,
  HealthSettings,
  HealthVerdict,
  HereIAm,
  HereIAmOutcome,
  ISeeYouPlan,
  ProbeKind,
  ProbeOutcome,
  RedirectAssign,
  RemovalQueryPlan,
  ServiceGroupConfig,
  ServiceMemory,
  ServiceRoutes,
  ServiceSnapshot,
} from './types.js';

export interface ClusterOptions {
  readonly clock: Clock;
  /** Defaults to src/buckets assignBuckets. */
  readonly assign?: AssignFn;
  /** Our router address (Router ID, assignment key in appliance mode). */
  readonly routerAddress: string;
  readonly hereIAmMs: number;
  readonly services: readonly ServiceGroupConfig[];
  /** Active health probe knobs (config health.*); absent or all disabled: WCCP keepalives alone decide. */
  readonly health?: HealthSettings;
  /**
   * Where each service's Receive ID starts when no state is restored (default 0). The daemon picks a random one, so
   * a router whose state was wiped does not send again the Receive IDs that captured HERE_I_AMs echo.
   */
  readonly firstReceiveId?: () => number;
  /** timers.settle (ms): at most one table change per service per this long; absent or 0 = every change at once. */
  readonly settleMs?: number;
}

export interface ClusterSnapshot {
  readonly routerAddress: string;
  readonly services: readonly ServiceSnapshot[];
  readonly counters: Readonly<Record<string, number>>;
}

export type ServiceCommandResult =
  CommandResult | { readonly ok: false; readonly error: 'unknown-service'; readonly message: string };

/** A service's current window: its length and end (wall-clock ms), and its load so far (null: no baseline yet). */
export interface LoadSoFar {
  readonly windowMs: number;
  readonly windowEnd: number;
  readonly load: WindowLoad | null;
}

export type ServicePlanOutcome =
  PlanOutcome | { readonly ok: false; readonly error: 'unknown-service'; readonly message: string };

export class Cluster {
  private readonly groups = new Map<number, ServiceGroup>();
  private readonly listeners = new Set<(e: ClusterEvent) => void>();
  private readonly wakers = new Set<() => void>();
  private readonly counters: Record<string, number> = {};
  private readonly health: HealthTracker;
  private readonly maintenance = new MaintenanceBook();
  /** Engines whose maintenance window is ending right now (see setMaintenance). */
  private readonly ending = new Set<string>();
  detection: DetectionTimes;

  /** HERE_I_AM_T and timers.settle: the config's, then a reload's (setTimers). */
  private hereIAmMs: number;
  private settleMs: number | undefined;

  constructor(private readonly options: ClusterOptions) {
    this.hereIAmMs = options.hereIAmMs;
    this.settleMs = options.settleMs;
    this.health = new HealthTracker(options.health, options.clock);
    this.detection = detectionTimes(options.health, options.hereIAmMs);
    for (const s of options.services) this.groups.set(s.id, this.group(s));
  }

  private group(s: ServiceGroupConfig): ServiceGroup {
    const options = this.options;
    // The timers and detection figures are read through getters: a reload changes them for every group at once.
    const cluster = this as Cluster;
    return new ServiceGroup(s, {
      clock: options.clock,
      assign: options.assign ?? assignBuckets,
      routerAddress: options.routerAddress,
      get hereIAmMs() {
        return cluster.hereIAmMs;
      },
      emit: (e) => this.emit(e),
      health: (engine) => this.verdictFor(s.id, engine),
      get detection() {
        return cluster.detection;
      },
      ...(options.firstReceiveId ? { firstReceiveId: options.firstReceiveId } : {}),
      get settleMs() {
        return cluster.settleMs;
      },
      wake: () => this.wakeAll(),
    });
  }

  private wakeAll(): void {
    for (const w of this.wakers) w();
  }

  /**
   * A config reload (docs/operations.md, "Reload"): a service added starts empty (its engines register as at a
   * start); one removed is forgotten with its engines; a changed one takes its new settings (ServiceGroup.reconfigure).
   * None of these moves another service's buckets.
   */
  addService(s: ServiceGroupConfig): void {
    if (!this.groups.has(s.id)) this.groups.set(s.id, this.group(s));
  }

  removeService(id: number): void {
    this.groups.delete(id);
    for (const w of this.maintenance.ofService(id)) this.maintenance.forget(w.key);
  }

  /** A maintenance window no longer configured (a reload): its drain ends if it runs, then it is forgotten. */
  forgetMaintenance(key: string): void {
    const w = this.maintenance.get(key);
    if (w === undefined) return;
    if (w.activeUntil !== null) this.setMaintenance({ ...w, activeUntil: null, next: null });
    this.maintenance.forget(key);
  }

  reconfigure(s: ServiceGroupConfig): void {
    this.groups.get(s.id)?.reconfigure(s);
  }

  /** A reload's timers: the next tick counts silence and settle time with them; no table changes for it. */
  setTimers(hereIAmMs: number, settleMs: number): void {
    this.hereIAmMs = hereIAmMs;
    this.settleMs = settleMs;
    this.detection = detectionTimes(this.health.settings(), hereIAmMs);
    this.wakeAll();
  }

  /**
   * A reload's probe settings: each engine keeps its verdict, except what a kind no longer probed decided (its
   * failures, an ICP drain), which ends now.
   */
  setHealth(settings: HealthSettings): void {
    const changes = this.health.setSettings(settings);
    this.detection = detectionTimes(settings, this.hereIAmMs);
    for (const c of changes)
      for (const g of this.groups.values()) if (g.hasEngine(c.engine)) g.healthChanged(c.engine, c.reason);
  }

  /** The probes' verdict, with a running maintenance window's drain added (its own source, apart from admin drains). */
  private verdictFor(service: number, engine: string): HealthVerdict {
    const v = this.health.verdict(engine);
    const m = this.maintenance.activeReason(service, engine);
    if (m === null) return this.ending.has(`${service} ${engine}`) ? { ...v, holdHistory: true } : v;
    return { ...v, drain: v.drain ?? m, holdHistory: true };
  }

  /**
   * A maintenance window started, ended or got a new next time (control/maintenance.ts calls this). When it starts or
   * ends, the engines it covers move to the state that implies (draining, or back with their old buckets).
   */
  setMaintenance(state: MaintenanceWindowState): void {
    const changed = this.maintenance.set(state);
    if (!changed) return;
    const g = this.groups.get(state.service);
    if (!g) return;
    const reason =
      state.activeUntil !== null
        ? `maintenance window "${state.cron}" starts (${formatDuration(state.durationMs)})`
        : `maintenance window "${state.cron}" over`;
    for (const engine of g.engineAddresses()) {
      if (state.engine !== null && state.engine !== engine) continue;
      // The window's end still holds the history through this one change, so the engine gets its buckets back.
      const key = `${state.service} ${engine}`;
      if (state.activeUntil === null) this.ending.add(key);
      try {
        g.healthChanged(engine, reason);
      } finally {
        this.ending.delete(key);
      }
    }
  }

  /** The probe kinds configured to run. */
  probeKinds(): ProbeKind[] {
    return this.health.enabledKinds();
  }

  /** Engines present in any service group (not gone): what the probers should probe. */
  probeTargets(): string[] {
    const out = new Set<string>();
    for (const g of this.groups.values()) for (const e of g.engineAddresses()) out.add(e);
    return [...out];
  }

  /**
   * One probe outcome for an engine. Ignored for an engine no group knows: probes never bring back a silent engine.
   */
  probe(engine: string, outcome: ProbeOutcome): void {
    const groups = [...this.groups.values()].filter((g) => g.hasEngine(engine));
    if (groups.length === 0) return;
    const change = this.health.record(engine, outcome);
    if (change) for (const g of groups) g.healthChanged(engine, change.reason);
  }

  get routerAddress(): string {
    return this.options.routerAddress;
  }

  onEvent(listener: (e: ClusterEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** `listener` runs when nextDue() may have moved earlier without an event (a table change waiting for settle). */
  onWake(listener: () => void): () => void {
    this.wakers.add(listener);
    return () => this.wakers.delete(listener);
  }

  private emit(e: ClusterEvent): void {
    for (const l of this.listeners) l(e);
  }

  private count(name: string): void {
    this.counters[name] = (this.counters[name] ?? 0) + 1;
  }

  serviceIds(): number[] {
    return [...this.groups.keys()].sort((a, b) => a - b);
  }

  hasService(id: number): boolean {
    return this.groups.has(id);
  }

  restore(memory: ServiceMemory): void {
    this.groups.get(memory.id)?.restore(memory);
  }

  /** Starts every restored service's restart grace time now (see ServiceGroup.startRestartGrace). */
  startRestartGrace(): void {
    for (const g of this.groups.values()) g.startRestartGrace();
  }

  hereIAm(msg: HereIAm): HereIAmOutcome {
    const g = this.groups.get(msg.service.id);
    if (!g) {
      this.count('unknown-service');
      return {
        kind: 'refused',
        reason: `service ${msg.service.id} is not configured`,
        counter: 'unknown-service',
        answer: false,
      };
    }
    return g.hereIAm(msg);
  }

  /** Plans (and records) the I_SEE_YOU answering `engine`'s counted or stale HERE_I_AM; null for an unknown service. */
  iSeeYou(serviceId: number, engine: string, answering: 'counted' | 'stale' = 'counted'): ISeeYouPlan | null {
    return this.groups.get(serviceId)?.iSeeYou(engine, answering) ?? null;
  }

  redirectAssign(ra: RedirectAssign): AssignVerdict {
    const g = this.groups.get(ra.serviceId);
    if (!g) {
      this.count('unknown-service');
      return { accepted: false, reason: `service ${ra.serviceId} is not configured` };
    }
    return g.redirectAssign(ra);
  }

  authFailure(serviceId: number): void {
    const g = this.groups.get(serviceId);
    if (g) g.authFailure();
    else this.count('auth-failures');
  }

  tick(): RemovalQueryPlan[] {
    const plans = [...this.groups.values()].flatMap((g) => g.tick());
    // A departed engine's health is kept only while it is unhealthy or drained: if it returns, it must still earn
    // its rise passes (docs/health.md); otherwise it starts afresh, as a new engine does.
    const present = new Set(this.probeTargets());
    for (const engine of this.health.known()) {
      const v = this.health.verdict(engine);
      if (!present.has(engine) && v.unhealthy === null && v.drain === null) this.health.forget(engine);
    }
    return plans;
  }

  nextDue(): number | null {
    return earliestDue([...this.groups.values()].map((g) => g.nextDue()));
  }

  private command(serviceId: number, run: (g: ServiceGroup) => CommandResult): ServiceCommandResult {
    const g = this.groups.get(serviceId);
    if (!g) return { ok: false, error: 'unknown-service', message: `service ${serviceId} is not configured` };
    return run(g);
  }

  drain(serviceId: number, engine: string, reason?: string): ServiceCommandResult {
    return this.command(serviceId, (g) => g.drain(engine, reason));
  }

  undrain(serviceId: number, engine: string, reason?: string): ServiceCommandResult {
    return this.command(serviceId, (g) => g.undrain(engine, reason));
  }

  /** null restores the engine's own Assignment Weight (or the configured override). */
  setWeight(serviceId: number, engine: string, weight: number | null): ServiceCommandResult {
    return this.command(serviceId, (g) => g.setWeight(engine, weight));
  }

  /** What `change` would do to the service's table (plan.ts), changing nothing. */
  plan(serviceId: number, change: PlanChange): ServicePlanOutcome {
    const g = this.groups.get(serviceId);
    if (!g) return { ok: false, error: 'unknown-service', message: `service ${serviceId} is not configured` };
    return planChange(g.planInput(), change);
  }

  /**
   * The load counted in the service's current window (the one running at `wall`) from the per-bucket counters read
   * now, and that window's end; null where load-aware assignment is off. Changes nothing.
   */
  loadSoFar(serviceId: number, wall: number, counts: readonly BucketCount[] | null): LoadSoFar | null {
    const g = this.groups.get(serviceId);
    const settings = g?.planInput().config.loadAware;
    if (g === undefined || settings?.enabled !== true) return null;
    return {
      windowMs: settings.windowMs,
      windowEnd: windowEnd(wall, settings.windowMs) + settings.windowMs,
      load: counts === null ? null : g.loadAware.loadSoFar(counts),
    };
  }

  /**
   * `wccpctl plan rebalance`: the moves the end of the service's current window (the one running at `wall`) would
   * make with the per-bucket counters read now (null: the data plane counts none), summed with the peers' load so far
   * where the window's end sums them (`peers`, mode consistent with peers), changing nothing.
   */
  planRebalance(
    serviceId: number,
    wall: number,
    counts: readonly BucketCount[] | null,
    peers: PeerLoads | null = null,
  ): ServicePlanOutcome {
    const g = this.groups.get(serviceId);
    if (!g) return { ok: false, error: 'unknown-service', message: `service ${serviceId} is not configured` };
    const input = g.planInput();
    const now = this.loadSoFar(serviceId, wall, counts);
    const notes: string[] = [];
    let outcome: LoadOutcome = { kind: 'off' };
    if (now !== null && peers !== null && peers.unread.length > 0)
      outcome = {
        kind: 'waiting',
        why: `no load so far from peer ${peers.unread.join(', ')}: without every peer's load the window's end decides nothing`,
      };
    else if (now !== null) {
      if (peers !== null)
        notes.push(
          `the load so far of this gateway and peer ${peers.read.join(', ')} summed, as the window's end sums the gateways' loads (mode consistent with peers)`,
        );
      const w = peers === null ? now.load : sumLoads([now.load, ...peers.loads]);
      outcome = g.loadAware.loadDecision(now.windowEnd, w);
    }
    if (outcome.kind === 'off')
      return {
        ok: false,
        error: 'not-load-aware',
        message: `service ${serviceId} does not use load-aware assignment (services[].loadAware in the config)`,
      };
    return { ok: true, plan: planRebalance(input, outcome, notes) };
  }

  /** A service's load-aware assignment (null: not configured); its methods change nothing unless named apply. */
  loadAware(serviceId: number): LoadAwarePort | null {
    return this.groups.get(serviceId)?.loadAware ?? null;
  }

  /** The configured services in which `engine` is present (or, for a drain, remembered). */
  servicesWith(engine: string): number[] {
    return this.serviceIds().filter((id) => (this.groups.get(id) as ServiceGroup).hasEngine(engine));
  }

  service(id: number): ServiceSnapshot | null {
    const g = this.groups.get(id);
    return g ? this.withMaintenance(g.snapshot()) : null;
  }

  /** What the data plane needs of a service group now (null: not configured); lighter than its snapshot. */
  routes(id: number): ServiceRoutes | null {
    return this.groups.get(id)?.routes() ?? null;
  }

  private withMaintenance(s: ServiceSnapshot): ServiceSnapshot {
    return { ...s, engines: s.engines.map((e) => ({ ...e, maintenance: this.maintenance.viewFor(s.id, e.address) })) };
  }

  snapshot(): ClusterSnapshot {
    return {
      routerAddress: this.options.routerAddress,
      services: this.serviceIds().map((id) => this.withMaintenance((this.groups.get(id) as ServiceGroup).snapshot())),
      counters: { ...this.counters },
    };
  }

  memory(): ServiceMemory[] {
    return this.serviceIds().map((id) => (this.groups.get(id) as ServiceGroup).memory());
  }
}
