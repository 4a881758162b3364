// One service group's engines and their lifecycle (joining -> usable -> draining | suspect -> gone): HERE_I_AMs
// counted or refused, each engine's side of the Receive ID handshake (receive-id.ts), the HERE_I_AM timers, and what
// holds a live engine out of the table (admin, SHUTDOWN, the probes). Every state transition emits exactly one
// engine-state event and asks the table keeper for the next table.
import { formatDuration } from '../duration.js';
import { MAX_ENGINES } from '../buckets/table.js';
import type { EngineAddress } from '../buckets/table.js';
import type { AdminOverrides } from './admin-overrides.js';
import { capabilityMismatch } from './capabilities.js';
import { ReceiveIdHandshake, nextReceiveId } from './receive-id.js';
import type { ServiceDefinitionBook } from './service-definition.js';
import { compareSquidOrder } from './squid-order.js';
import type { TableKeeper } from './table-keeper.js';
import type {
  Clock,
  EngineState,
  EngineStateEvent,
  HealthVerdict,
  HereIAm,
  HereIAmOutcome,
  RemovalQueryPlan,
  ServiceCounter,
  ServiceGroupConfig,
} from './types.js';

/** An engine its probes vouch for is removed after this many HERE_I_AM_T of silence instead of 3. */
export const VOUCHED_SILENCE = 9;

const NO_VERDICT: HealthVerdict = { unhealthy: null, drain: null, probeRttMs: null };

export interface EngineRecord {
  readonly address: EngineAddress;
  state: EngineState;
  reason: string;
  advertisedWeight: number;
  lastHereIAm: number;
  usableSince: number | null;
  /** The Receive ID handshake, this engine's side. */
  readonly handshake: ReceiveIdHandshake;
  removalQuerySent: boolean;
  /** Its last counted HERE_I_AM carried a Command Extension SHUTDOWN. */
  shutdown: boolean;
  refused: string | null;
  historical: readonly number[] | undefined;
}

export interface LifecycleDeps {
  readonly config: ServiceGroupConfig;
  readonly clock: Clock;
  readonly routerAddress: string;
  /** HERE_I_AM_T in ms: REMOVAL_QUERY at 2.5x silence, removal at 3x. */
  readonly hereIAmMs: number;
  readonly emit: (e: EngineStateEvent) => void;
  /** The probes' verdict on an engine (cluster/health.ts); absent: no active probes. */
  readonly health?: (engine: EngineAddress) => HealthVerdict;
  /** The Receive ID before the first I_SEE_YOU when nothing is restored (default 0). */
  readonly firstReceiveId?: () => number;
  readonly definition: ServiceDefinitionBook;
  readonly overrides: AdminOverrides;
  readonly keeper: TableKeeper;
  readonly count: (name: ServiceCounter) => void;
  /** Brings every time the group recorded back to now at most (ServiceGroup.clampToNow). */
  readonly clampToNow: (now: number) => void;
}

export class EngineLifecycle {
  private readonly engines = new Map<EngineAddress, EngineRecord>();
  private receiveIdNow: number;
  /** I_SEE_YOUs sent since start: their order, which the Receive ID (wrapping at 2^32) cannot give. */
  private iSeeYouOrder = 0;

  constructor(private readonly deps: LifecycleDeps) {
    this.receiveIdNow = (deps.firstReceiveId?.() ?? 0) >>> 0;
  }

  private get id(): number {
    return this.deps.config.id;
  }

  /** The Receive ID of the last I_SEE_YOU (or the restored one). */
  get receiveId(): number {
    return this.receiveIdNow;
  }

  restoreReceiveId(receiveId: number): void {
    this.receiveIdNow = receiveId >>> 0;
  }

  has(engine: EngineAddress): boolean {
    return this.engines.has(engine);
  }

  get(engine: EngineAddress): EngineRecord | undefined {
    return this.engines.get(engine);
  }

  addresses(): EngineAddress[] {
    return [...this.engines.keys()];
  }

  /** Every engine present, in the order they came (the state file's order). */
  arrived(): EngineRecord[] {
    return [...this.engines.values()];
  }

  /** Every engine present, in Squid's order. */
  records(): EngineRecord[] {
    return [...this.engines.values()].sort((a, b) => compareSquidOrder(a.address, b.address));
  }

  /** The usable engines, in Squid's order. */
  usable(): EngineRecord[] {
    return this.records().filter((r) => r.state === 'usable');
  }

  /** Its weight in force: an admin's, else the config's, else its Assignment Weight. */
  effectiveWeight(rec: EngineRecord): number {
    const admin = this.deps.overrides.weightOf(rec.address);
    if (admin !== undefined) return admin;
    const configured = this.deps.config.weights?.[rec.address];
    return configured ?? rec.advertisedWeight;
  }

  verdict(address: EngineAddress): HealthVerdict {
    return this.deps.health?.(address) ?? NO_VERDICT;
  }

  /** Times in the future (see ServiceGroup.clampToNow) count from now. */
  clamp(now: number): void {
    for (const rec of this.engines.values()) {
      if (rec.lastHereIAm > now) rec.lastHereIAm = now;
      if (rec.usableSince !== null && rec.usableSince > now) rec.usableSince = now;
    }
  }

  /** A well-formed, authenticated HERE_I_AM for this service. */
  hereIAm(msg: HereIAm): HereIAmOutcome {
    const { count, definition, clock } = this.deps;
    this.deps.clampToNow(clock.now());
    const fit = definition.check(msg.service);
    if (fit.refused !== null) {
      count('conflicting-definition');
      return { kind: 'refused', reason: fit.refused, counter: 'conflicting-definition', answer: false };
    }
    if (fit.defined) count('defined-by-engine');
    const now = clock.now();
    let rec = this.engines.get(msg.engine);
    const echo = rec !== undefined && rec.handshake.takeEcho(msg.receivedId);
    if (rec?.handshake.echoed && !echo) return this.stale(rec, msg);
    if (!rec) {
      if (this.engines.size >= MAX_ENGINES) {
        count('too-many-engines');
        return {
          kind: 'refused',
          reason: `service group ${this.id} already has ${MAX_ENGINES} engines`,
          counter: 'too-many-engines',
          answer: false,
        };
      }
      rec = {
        address: msg.engine,
        state: 'joining',
        reason: 'first HERE_I_AM',
        advertisedWeight: msg.weight,
        lastHereIAm: now,
        usableSince: null,
        handshake: new ReceiveIdHandshake(),
        removalQuerySent: false,
        shutdown: false,
        refused: null,
        historical: msg.historicalBuckets,
      };
      this.engines.set(msg.engine, rec);
      this.deps.overrides.present(msg.engine);
      this.deps.emit({
        type: 'engine-state',
        service: this.id,
        engine: msg.engine,
        from: 'new',
        to: 'joining',
        reason: 'first HERE_I_AM',
        at: now,
      });
    }
    count('here-i-am');
    rec.lastHereIAm = now;
    rec.removalQuerySent = false;
    const weightChanged = rec.advertisedWeight !== msg.weight;
    rec.advertisedWeight = msg.weight;
    if (msg.historicalBuckets) rec.historical = msg.historicalBuckets;

    const mismatch = capabilityMismatch(msg.capabilities, this.deps.config);
    if (mismatch !== null) {
      const first = rec.refused !== mismatch;
      rec.refused = mismatch;
      if (first) count('capability-refused');
      this.transition(rec, 'joining', `capabilities refused: ${mismatch}`);
      return { kind: 'refused', reason: mismatch, counter: 'capability-refused', answer: true };
    }
    rec.refused = null;

    rec.shutdown = msg.shutdown === true;
    const why = rec.handshake.step(echo, this.deps.config.lenientReceiveId, msg.receivedId);
    const to = this.targetState(rec);
    this.transition(
      rec,
      to,
      this.stateReason(rec, to) ?? why,
      weightChanged ? `Assignment Weight ${msg.weight}` : undefined,
    );
    return { kind: 'answer', shutdownResponse: msg.shutdown === true };
  }

  /** A HERE_I_AM (or SHUTDOWN) from an engine that echoes, without a fresh echo: dropped, counted, maybe answered. */
  private stale(rec: EngineRecord, msg: HereIAm): HereIAmOutcome {
    this.deps.count('stale-receive-id');
    const now = this.deps.clock.now();
    const answer = rec.handshake.answerStale(now, this.deps.hereIAmMs / 10);
    const what = msg.shutdown ? 'SHUTDOWN' : 'HERE_I_AM';
    const reason =
      msg.receivedId === 0
        ? `${what} from ${rec.address} without our Receive ID although it echoed one before (it restarted, or a replay)`
        : `${what} from ${rec.address} echoes Receive ID ${msg.receivedId}, not an I_SEE_YOU sent to it since its last counted HERE_I_AM (a replay, or our answer was lost)`;
    return { kind: 'stale', reason, answer };
  }

  /**
   * Advances the Receive ID (never zero) and records the I_SEE_YOU answering `engine`; `answering` says whether the
   * HERE_I_AM it answers counted or was stale (its Receive ID is then kept apart, see ReceiveIdHandshake).
   */
  sendISeeYou(engine: EngineAddress, answering: 'counted' | 'stale'): number {
    this.receiveIdNow = nextReceiveId(this.receiveIdNow);
    this.engines.get(engine)?.handshake.sent(this.receiveIdNow, answering, ++this.iSeeYouOrder);
    return this.receiveIdNow;
  }

  /** If `receiveId` is one our I_SEE_YOUs to `engine` carried that it may still echo: its place in the send order. */
  receiveIdOrder(engine: EngineAddress, receiveId: number): number | null {
    return this.engines.get(engine)?.handshake.sentOrder(receiveId) ?? null;
  }

  /** Every cause that keeps a live engine out of the table, each on its own (admin, shutdown, the probes' drain). */
  drainCauses(address: EngineAddress, rec: EngineRecord | undefined): string[] {
    const causes: string[] = [];
    if (this.deps.overrides.isDrained(address)) causes.push('admin');
    if (rec?.shutdown) causes.push('shutdown');
    const probes = this.verdict(address).drain;
    if (probes !== null) causes.push(probes);
    return causes;
  }

  // Probes and drains only ever hold back an engine that completed the handshake: they never make a joining one usable.
  private targetState(rec: EngineRecord): EngineState {
    if (rec.refused !== null || !rec.handshake.done) return 'joining';
    if (this.verdict(rec.address).unhealthy !== null) return 'suspect';
    return this.drainCauses(rec.address, rec).length > 0 ? 'draining' : 'usable';
  }

  /** Why an engine is suspect or draining (the first drain cause), else null. */
  private stateReason(rec: EngineRecord, to: EngineState): string | null {
    const v = this.verdict(rec.address);
    if (to === 'suspect') return v.unhealthy;
    if (to !== 'draining') return null;
    if (this.deps.overrides.isDrained(rec.address)) return 'admin drain (kept until undrain)';
    if (rec.shutdown) return 'Command Extension SHUTDOWN';
    return v.drain;
  }

  /**
   * What implies the engine's state changed (its probes' verdict, an admin drain or undrain): move it to the state
   * that now implies. Nothing for an engine that is not present.
   */
  reconsider(engine: EngineAddress, reason: string): void {
    const rec = this.engines.get(engine);
    if (rec) this.transition(rec, this.targetState(rec), reason);
  }

  /** Moves an engine to a state (one event), then recomputes the table if membership or weights changed. */
  private transition(rec: EngineRecord, to: EngineState, reason: string, weightReason?: string): void {
    const from = rec.state;
    if (from !== to) {
      const now = this.deps.clock.now();
      if (from === 'usable') this.deps.keeper.remember(rec.address, now);
      rec.state = to;
      rec.reason = reason;
      rec.usableSince = to === 'usable' ? now : null;
      this.deps.emit({ type: 'engine-state', service: this.id, engine: rec.address, from, to, reason, at: now });
      if (to === 'gone') {
        this.engines.delete(rec.address);
        this.deps.overrides.left(rec.address, now);
      }
      this.deps.keeper.recompute(`${rec.address} ${from} -> ${to}: ${reason}`);
    } else if (weightReason !== undefined && to === 'usable') {
      this.deps.keeper.recompute(`${rec.address} ${weightReason}`);
    }
  }

  /**
   * Silence that removes an engine: 3 x HERE_I_AM_T, or VOUCHED_SILENCE x while its probes pass (its HERE_I_AMs are
   * lost or late on the way, its proxy answers): see docs/health.md.
   */
  private removalAfter(rec: EngineRecord): number {
    return (this.verdict(rec.address).vouched === true ? VOUCHED_SILENCE : 3) * this.deps.hereIAmMs;
  }

  /** Runs the HERE_I_AM timers: REMOVAL_QUERY at 2.5x silence, removal at 3x. Returns the queries to send. */
  tick(now: number): RemovalQueryPlan[] {
    const t = this.deps.hereIAmMs;
    const queries: RemovalQueryPlan[] = [];
    for (const rec of [...this.engines.values()]) {
      const silence = now - rec.lastHereIAm;
      if (silence >= this.removalAfter(rec)) {
        this.transition(rec, 'gone', `no HERE_I_AM for ${formatDuration(silence)}`);
      } else if (silence >= 2.5 * t && !rec.removalQuerySent) {
        rec.removalQuerySent = true;
        this.deps.count('removal-query');
        queries.push({
          service: this.deps.definition.wire(),
          routerAddress: this.deps.routerAddress,
          receiveId: this.receiveIdNow || 1,
          engine: rec.address,
        });
      }
    }
    if (this.engines.size === 0) this.deps.definition.forgetEngines();
    return queries;
  }

  /** When tick() has something to do for each engine: its REMOVAL_QUERY or its removal. */
  due(): number[] {
    const t = this.deps.hereIAmMs;
    return [...this.engines.values()].map(
      (rec) => rec.lastHereIAm + (rec.removalQuerySent ? this.removalAfter(rec) : 2.5 * t),
    );
  }
}
