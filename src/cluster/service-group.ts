// One service group: a coordinator of its parts, each with one job. The engines' lifecycle (lifecycle.ts: joining ->
// usable -> draining | suspect -> gone, the Receive ID handshake, the HERE_I_AM timers), what an admin set
// (admin-overrides.ts: drains, weights), the table (table-keeper.ts: history, restart grace, authority, mask values,
// timers.settle, change numbers), the service definition (service-definition.ts) and what the group shows of itself
// (views.ts: the I_SEE_YOU plan, the snapshot, the memory). Driven by decoded messages, admin commands and tick();
// time comes from the injected clock. Every state transition emits exactly one engine-state event; every table change
// one table event.
import { earliestDue } from './due.js';
import type { EngineAddress } from '../buckets/table.js';
import type { BucketTable } from '../buckets/table.js';
import { AdminOverrides, badWeight } from './admin-overrides.js';
import { EngineLifecycle } from './lifecycle.js';
import type { LifecycleDeps } from './lifecycle.js';
import { ServiceDefinitionBook } from './service-definition.js';
import { TableKeeper } from './table-keeper.js';
import type { LoadAwarePort, TableKeeperDeps } from './table-keeper.js';
import { iSeeYouPlan, serviceMemory, serviceRoutes, serviceSnapshot } from './views.js';
import type { PlanInput } from './plan.js';
import type { GroupParts } from './views.js';
import { ServiceFlag } from '../vocabulary.js';
import type {
  ClusterEvent,
  DetectionTimes,
  HereIAm,
  HereIAmOutcome,
  ISeeYouPlan,
  RedirectAssign,
  RemovalQueryPlan,
  ServiceCounter,
  ServiceGroupConfig,
  ServiceMemory,
  ServiceRoutes,
  ServiceSnapshot,
} from './types.js';
import { SERVICE_COUNTERS } from './types.js';
import type { AssignVerdict } from './authority/authority.js';

export type { AssignVerdict } from './authority/authority.js';

/** What a group is given: its parts' settings (each documented there), events out, and the detection times shown. */
export interface GroupDeps
  extends
    Pick<LifecycleDeps, 'clock' | 'routerAddress' | 'hereIAmMs' | 'health' | 'firstReceiveId'>,
    Pick<TableKeeperDeps, 'assign' | 'settleMs' | 'wake'> {
  readonly emit: (e: ClusterEvent) => void;
  readonly detection?: DetectionTimes;
}

export type CommandResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly error: 'unknown-engine' | 'bad-weight'; readonly message: string };

export class ServiceGroup {
  private readonly counters: Partial<Record<ServiceCounter, number>> = {};
  private readonly definition: ServiceDefinitionBook;
  private readonly overrides: AdminOverrides;
  private readonly keeper: TableKeeper;
  private readonly engines: EngineLifecycle;
  private readonly parts: GroupParts;

  /** The group's settings: the config's, then a reload's (reconfigure). */
  private settings: ServiceGroupConfig;

  constructor(
    config: ServiceGroupConfig,
    private readonly deps: GroupDeps,
  ) {
    this.settings = config;
    // The parts read the settings and the timers through getters: a reload changes them (reconfigure, and the
    // cluster's timers behind deps) without rebuilding any part.
    const group = this as ServiceGroup;
    const count = (name: ServiceCounter) => this.count(name);
    const clampToNow = (now: number) => this.clampToNow(now);
    const definition = (this.definition = new ServiceDefinitionBook(config));
    const overrides = (this.overrides = new AdminOverrides(() => group.settings.historyWindowMs));
    const keeper = (this.keeper = new TableKeeper({
      get config() {
        return group.settings;
      },
      clock: deps.clock,
      assign: deps.assign,
      get hereIAmMs() {
        return deps.hereIAmMs;
      },
      get settleMs() {
        return deps.settleMs;
      },
      ...(deps.wake ? { wake: deps.wake } : {}),
      usable: () =>
        this.engines.usable().map((r) => ({
          address: r.address,
          weight: this.engines.effectiveWeight(r),
          usableSince: r.usableSince,
          historical: r.historical,
        })),
      holdHistory: (engine) => this.engines.verdict(engine).holdHistory === true,
      hashFlags: () => definition.current?.flags ?? ServiceFlag.DST_IP_HASH,
      count,
      emit: deps.emit,
      clampToNow,
    }));
    const engines = (this.engines = new EngineLifecycle({
      get config() {
        return group.settings;
      },
      clock: deps.clock,
      routerAddress: deps.routerAddress,
      get hereIAmMs() {
        return deps.hereIAmMs;
      },
      emit: deps.emit,
      ...(deps.health ? { health: deps.health } : {}),
      ...(deps.firstReceiveId ? { firstReceiveId: deps.firstReceiveId } : {}),
      definition,
      overrides,
      keeper,
      count,
      clampToNow,
    }));
    this.parts = {
      get config() {
        return group.settings;
      },
      routerAddress: deps.routerAddress,
      get hereIAmMs() {
        return deps.hereIAmMs;
      },
      get detection() {
        return deps.detection;
      },
      definition,
      engines,
      keeper,
      overrides,
      counters: this.counters,
    };
  }

  get id(): number {
    return this.config.id;
  }

  get config(): ServiceGroupConfig {
    return this.settings;
  }

  /**
   * A config reload's settings for this group (docs/operations.md, "Reload"). What the parts read as they go (weights,
   * history and failback times, lenientReceiveId, peers, fail mode) is in force at once; the table is assigned again
   * only when the weights changed, so only the buckets the new shares need move. What a reload may not change (the
   * service's definition and methods, src/config/reload.ts) is for the caller to refuse.
   */
  reconfigure(next: ServiceGroupConfig): void {
    const before = this.settings.weights ?? {};
    const after = next.weights ?? {};
    const weightsChanged =
      Object.keys(before).length !== Object.keys(after).length ||
      Object.entries(after).some(([engine, w]) => before[engine] !== w);
    this.settings = next;
    if (weightsChanged) this.keeper.recompute('weights changed by a config reload');
  }

  count(name: ServiceCounter, by = 1): void {
    this.counters[name] = (this.counters[name] ?? 0) + by;
  }

  /** Seeds the group from persisted memory: the table's change number, Receive ID and every engine's buckets. */
  restore(memory: ServiceMemory): void {
    const now = this.deps.clock.now();
    this.engines.restoreReceiveId(memory.receiveId);
    this.keeper.restore(memory, now);
    for (const [k, v] of Object.entries(memory.counters)) {
      if ((SERVICE_COUNTERS as readonly string[]).includes(k)) this.counters[k as ServiceCounter] = v;
    }
    this.overrides.restore(memory, now);
  }

  /** Starts the restart grace time again, now (see TableKeeper.startRestartGrace). */
  startRestartGrace(): void {
    this.keeper.startRestartGrace();
  }

  /**
   * The daemon's clock is monotonic (src/clock.ts) and never goes back; an injected clock that did (the wall clock,
   * as once) would put every time recorded before in the future, keeping a silent engine (and its buckets) for as
   * long as the step and holding every table change back as if within timers.settle. Such times count from now.
   */
  private clampToNow(now: number): void {
    this.engines.clamp(now);
    this.keeper.clamp(now);
    this.overrides.clamp(now);
  }

  /** A well-formed, authenticated HERE_I_AM for this service. */
  hereIAm(msg: HereIAm): HereIAmOutcome {
    return this.engines.hereIAm(msg);
  }

  /** The probes' verdict on `engine` changed: move it to the state that verdict implies. */
  healthChanged(engine: EngineAddress, reason: string): void {
    this.engines.reconsider(engine, reason);
  }

  /**
   * Advances the Receive ID (never zero) and plans the unicast I_SEE_YOU answering `engine`; `answering` says whether
   * the HERE_I_AM it answers counted or was stale (its Receive ID is then kept apart, see ReceiveIdHandshake).
   */
  iSeeYou(engine: EngineAddress, answering: 'counted' | 'stale' = 'counted'): ISeeYouPlan {
    const receiveId = this.engines.sendISeeYou(engine, answering);
    this.count('i-see-you');
    return iSeeYouPlan(this.parts, engine, receiveId);
  }

  /** A REDIRECT_ASSIGN: obeyed only under designated-engine authority, from the designated engine, when valid. */
  redirectAssign(ra: RedirectAssign): AssignVerdict {
    return this.keeper.redirectAssign(ra, {
      serviceId: this.id,
      routerAddress: this.deps.routerAddress,
      usable: this.engines.usable().map((r) => r.address),
      receiveIdOrder: (engine, id) => this.engines.receiveIdOrder(engine, id),
    });
  }

  /** An MD5 failure for this service: counted, never makes anyone usable. */
  authFailure(): void {
    this.count('auth-failures');
  }

  /** Runs the timers: REMOVAL_QUERY at 2.5x silence, removal at 3x, then the table's. Returns the queries to send. */
  tick(): RemovalQueryPlan[] {
    const now = this.deps.clock.now();
    this.clampToNow(now);
    const queries = this.engines.tick(now);
    this.overrides.forget(now);
    this.keeper.tick(now);
    return queries;
  }

  /** The earliest clock time tick() has something to do, or null. */
  nextDue(): number | null {
    return earliestDue([...this.keeper.due(), ...this.engines.due()]);
  }

  /**
   * An admin drain: the engine keeps no buckets until `undrain`, whatever it sends, while it is gone (a reboot is
   * usually why it was drained) and across restarts. An engine that left recently (its buckets are remembered) may be
   * drained too, so it stays out when it comes back.
   */
  drain(engine: EngineAddress, reason = 'admin drain'): CommandResult {
    const known = this.engines.has(engine) || this.keeper.remembers(engine) || this.overrides.isDrained(engine);
    if (!known) return this.unknown(engine);
    this.overrides.drain(engine);
    this.engines.reconsider(engine, reason);
    return { ok: true };
  }

  /** Ends an admin drain (other drain causes stay in force). */
  undrain(engine: EngineAddress, reason = 'admin undrain'): CommandResult {
    if (!this.engines.has(engine) && !this.overrides.isDrained(engine)) return this.unknown(engine);
    this.overrides.undrain(engine);
    this.engines.reconsider(engine, reason);
    return { ok: true };
  }

  /**
   * An admin weight: kept while the engine is gone (for historyWindow, see MAX_GONE_WEIGHTS) and across restarts;
   * null ends it, also for an engine that is gone.
   */
  setWeight(engine: EngineAddress, weight: number | null): CommandResult {
    const rec = this.engines.get(engine);
    if (!rec && !(weight === null && this.overrides.hasWeight(engine))) return this.unknown(engine);
    const bad = weight === null ? null : badWeight(weight);
    if (bad !== null) return { ok: false, error: 'bad-weight', message: bad };
    this.overrides.setWeight(engine, weight);
    if (rec?.state === 'usable')
      this.keeper.recompute(`${engine} weight set to ${weight ?? 'its Assignment Weight'} by admin`);
    return { ok: true };
  }

  private unknown(engine: EngineAddress): CommandResult {
    return { ok: false, error: 'unknown-engine', message: `engine ${engine} is not in service group ${this.id}` };
  }

  hasEngine(engine: EngineAddress): boolean {
    return this.engines.has(engine);
  }

  engineAddresses(): EngineAddress[] {
    return this.engines.addresses();
  }

  /** The engines and tables a plan changes and decides again (cluster/plan.ts), changing nothing. */
  planInput(): PlanInput {
    const { table, mask } = this.keeper.tables;
    return {
      service: this.id,
      config: this.config,
      before: table,
      beforeMask: mask,
      now: this.deps.clock.now(),
      engines: this.engines.records().map((r) => ({
        address: r.address,
        state: r.state,
        weight: this.engines.effectiveWeight(r),
        usableSince: r.usableSince,
        historical: r.historical,
      })),
      remembers: (engine) => this.keeper.remembers(engine),
      adminDrained: (engine) => this.overrides.isDrained(engine),
      adminWeight: (engine) => this.overrides.weightOf(engine),
      heldBack: (engine) => {
        const v = this.engines.verdict(engine);
        return v.unhealthy !== null ? 'suspect' : v.drain !== null ? 'draining' : null;
      },
      inRestartGrace: this.keeper.inRestartGrace,
      decide: (usable) => this.keeper.preview(usable),
    };
  }

  /** Load-aware assignment's entry points (table-keeper.ts): the daemon's window reads, `wccpctl plan rebalance`. */
  get loadAware(): LoadAwarePort {
    return this.keeper;
  }

  currentTable(): BucketTable {
    return this.keeper.current;
  }

  snapshot(): ServiceSnapshot {
    return serviceSnapshot(this.parts);
  }

  /** What the data plane needs of the group now. */
  routes(): ServiceRoutes {
    return serviceRoutes(this.parts);
  }

  /** What to persist: the table, the Receive ID, every engine present or remembered. */
  memory(): ServiceMemory {
    return serviceMemory(this.parts, this.deps.clock.now());
  }
}
