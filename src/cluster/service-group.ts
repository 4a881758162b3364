// One service group: its engines' lifecycle (joining -> usable -> draining | suspect -> gone), the member change number
// and the bucket table. Each engine's side of the Receive ID handshake is in receive-id.ts, the service definition in
// service-definition.ts, and who decides the table in authority/. Driven by decoded messages, admin commands and
// tick(); time comes from the injected clock. Every state transition emits exactly one engine-state event; every table
// change one table event.
import {
  BUCKET_COUNT,
  MAX_ENGINES,
  bucketsOf,
  countsByEngine,
  emptyTable,
  movedBuckets,
  nextChangeNumber,
} from '../buckets/table.js';
import type { Member } from '../buckets/member.js';
import { earliestDue } from './due.js';
import type { BucketTable, EngineAddress } from '../buckets/table.js';
import { assignMask, emptyMaskTable, sameMask, squidMaskFor, toMaskValueSets } from '../buckets/mask.js';
import type { MaskTable } from '../buckets/mask.js';
import { capabilityMismatch } from './capabilities.js';
import { ApplianceAuthority } from './authority/appliance.js';
import type { AssignmentAuthority, AssignVerdict } from './authority/authority.js';
import { DesignatedEngineAuthority } from './authority/designated-engine.js';
import { RestartGrace } from './authority/restart-grace.js';
import { ReceiveIdHandshake, nextReceiveId } from './receive-id.js';
import { ServiceDefinitionBook } from './service-definition.js';
import { compareSquidOrder, designatedEngineOf } from './squid-order.js';
import { ServiceFlag } from '../vocabulary.js';
import type {
  AssignFn,
  Clock,
  ClusterEvent,
  DetectionTimes,
  EngineSnapshot,
  EngineState,
  HealthVerdict,
  HereIAm,
  HereIAmOutcome,
  ISeeYouPlan,
  RedirectAssign,
  RemovalQueryPlan,
  ServiceCounter,
  ServiceGroupConfig,
  ServiceMemory,
  ServiceSnapshot,
} from './types.js';
import { SERVICE_COUNTERS } from './types.js';

/** An engine its probes vouch for is removed after this many HERE_I_AM_T of silence instead of 3. */
export const VOUCHED_SILENCE = 9;
export { MAX_ENGINES } from '../buckets/table.js';
const MAX_WEIGHT = 0xffff;
/**
 * Admin weights of engines that are gone are remembered for historyWindow, and at most this many per group (the
 * longest gone forgotten first): engines that come and go for weeks cannot grow the memory or the state file.
 */
export const MAX_GONE_WEIGHTS = 2 * MAX_ENGINES;

export interface GroupDeps {
  readonly clock: Clock;
  readonly assign: AssignFn;
  readonly routerAddress: string;
  /** HERE_I_AM_T in ms: REMOVAL_QUERY at 2.5x silence, removal at 3x. */
  readonly hereIAmMs: number;
  readonly emit: (e: ClusterEvent) => void;
  /** The probes' verdict on an engine (cluster/health.ts); absent: no active probes. */
  readonly health?: (engine: EngineAddress) => HealthVerdict;
  readonly detection?: DetectionTimes;
  /** The Receive ID before the first I_SEE_YOU when nothing is restored (default 0). */
  readonly firstReceiveId?: () => number;
  /** timers.settle in ms: at most one table change per this long; 0 or absent = every change at once. */
  readonly settleMs?: number;
  /** Called when a table change starts waiting for timers.settle: nextDue() moved earlier without an event. */
  readonly wake?: () => void;
}

const NO_VERDICT: HealthVerdict = { unhealthy: null, drain: null, probeRttMs: null };

export type CommandResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly error: 'unknown-engine' | 'bad-weight'; readonly message: string };

export type { AssignVerdict } from './authority/authority.js';

interface EngineRecord {
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

export class ServiceGroup {
  private readonly engines = new Map<EngineAddress, EngineRecord>();
  /** Buckets of engines that left, for their return (draft "historical" bucket data). */
  private readonly history = new Map<EngineAddress, { buckets: readonly number[]; leftAt: number }>();
  private readonly counters: Partial<Record<ServiceCounter, number>> = {};
  private table: BucketTable = emptyTable();
  /** Mask assignment services: the mask values per engine, kept alongside the bucket table. */
  private maskTable: MaskTable = emptyMaskTable();
  /** Who decides the table (docs/architecture.md, decision 1). */
  private readonly authority: AssignmentAuthority;
  private receiveId = 0;
  /** I_SEE_YOUs sent since start: their order, which the Receive ID (wrapping at 2^32) cannot give. */
  private iSeeYouOrder = 0;
  private memberChangeNumber = 0;
  private members = '';
  private readonly definition: ServiceDefinitionBook;
  /** After a restart: the persisted table, in front of the authority until its holders are back or the time is over. */
  private restartGrace: RestartGrace | null = null;
  /** Engines an admin drained: kept until undrain, while they are gone too, and persisted. */
  private readonly adminDrained = new Set<EngineAddress>();
  /**
   * Weights an admin set: kept while the engine is present and for historyWindow once it is gone (leftAt), persisted.
   */
  private readonly adminWeights = new Map<EngineAddress, { weight: number; leftAt: number | null }>();
  /**
   * timers.settle: when the table last changed, and the recompute (with its first reason and how many requests it
   * stands for) waiting for the settle time to pass. A REDIRECT_ASSIGN obeyed meanwhile waits in the authority.
   */
  private lastTableChangeAt = -Infinity;
  private pending: { reason: string; requests: number } | null = null;

  constructor(
    readonly config: ServiceGroupConfig,
    private readonly deps: GroupDeps,
  ) {
    this.receiveId = (deps.firstReceiveId?.() ?? 0) >>> 0;
    this.definition = new ServiceDefinitionBook(config);
    const appliance = new ApplianceAuthority(config, deps.assign);
    this.authority = config.authority === 'designated-engine' ? new DesignatedEngineAuthority(appliance) : appliance;
  }

  get id(): number {
    return this.config.id;
  }

  count(name: ServiceCounter, by = 1): void {
    this.counters[name] = (this.counters[name] ?? 0) + by;
  }

  /** Seeds the group from persisted memory: the table's change number, Receive ID and every engine's buckets. */
  restore(memory: ServiceMemory): void {
    this.receiveId = memory.receiveId >>> 0;
    this.memberChangeNumber = memory.memberChangeNumber;
    // Until its engines are heard again the live table is empty: a different table, so a new change number (a reader
    // that caches by change number must not take the empty table for the persisted one).
    const persistedAny = memory.table.buckets.some((b) => b !== null);
    this.table = emptyTable(persistedAny ? nextChangeNumber(memory.table.changeNumber) : memory.table.changeNumber);
    // A mask service's values likewise: empty under a new change number, the persisted ones kept by the grace.
    const mask = this.config.assignment === 'mask' ? (memory.mask ?? null) : null;
    if (mask !== null) {
      const maskAny = mask.engines.some((e) => e !== null);
      this.maskTable = emptyMaskTable(mask.mask, maskAny ? nextChangeNumber(mask.changeNumber) : mask.changeNumber);
    }
    const now = this.deps.clock.now();
    // A time of leaving in the future (a clock set back, a hand-edited file) counts from now, as for weights below:
    // otherwise that engine's buckets would be remembered for as long as the file says.
    for (const e of memory.engines) {
      const buckets = e.leftAt === null ? bucketsOf(memory.table, e.address) : e.buckets;
      if (buckets.length > 0) this.history.set(e.address, { buckets, leftAt: Math.min(e.leftAt ?? now, now) });
    }
    for (const [k, v] of Object.entries(memory.counters)) {
      if ((SERVICE_COUNTERS as readonly string[]).includes(k)) this.counters[k as ServiceCounter] = v;
    }
    for (const a of memory.adminDrained) this.adminDrained.add(a);
    // None of the engines is present yet: a weight's historyWindow runs from now for those that were (and for a time
    // in the future, a clock set back or a hand-edited file, which would otherwise keep it for ever).
    for (const w of memory.adminWeights ?? [])
      this.adminWeights.set(w.address, { weight: w.weight, leftAt: Math.min(w.leftAt ?? now, now) });
    this.forgetWeights(now);
    this.restartGrace = RestartGrace.after(memory.table, now + this.restartGraceMs(), mask);
  }

  /**
   * Starts the restart grace time again, now: the daemon calls it once the router listens, so neither loading the
   * data plane nor binding the socket eats the time engines have to come back.
   */
  startRestartGrace(): void {
    this.restartGrace?.restart(this.deps.clock.now() + this.restartGraceMs());
  }

  /**
   * 3 x HERE_I_AM_T, or longer where the Receive ID handshake needs more HERE_I_AMs: an engine's first one arrives up
   * to HERE_I_AM_T after the router listens, and a lenient engine is usable only at its lenientReceiveId-th.
   */
  private restartGraceMs(): number {
    return Math.max(3, this.config.lenientReceiveId + 1) * this.deps.hereIAmMs;
  }

  /**
   * The daemon's clock is monotonic (src/clock.ts) and never goes back; an injected clock that did (the wall clock,
   * as once) would put every time recorded before in the future, keeping a silent engine (and its buckets) for as
   * long as the step and holding every table change back as if within timers.settle. Such times count from now.
   */
  private clampToNow(now: number): void {
    for (const rec of this.engines.values()) {
      if (rec.lastHereIAm > now) rec.lastHereIAm = now;
      if (rec.usableSince !== null && rec.usableSince > now) rec.usableSince = now;
    }
    if (this.lastTableChangeAt > now) this.lastTableChangeAt = now;
    for (const h of this.history.values()) if (h.leftAt > now) h.leftAt = now;
    for (const w of this.adminWeights.values()) if (w.leftAt !== null && w.leftAt > now) w.leftAt = now;
    const graceEnd = now + this.restartGraceMs();
    if (this.restartGrace !== null && this.restartGrace.until > graceEnd) this.restartGrace.restart(graceEnd);
  }

  /** A well-formed, authenticated HERE_I_AM for this service. */
  hereIAm(msg: HereIAm): HereIAmOutcome {
    this.clampToNow(this.deps.clock.now());
    const fit = this.definition.check(msg.service);
    if (fit.refused !== null) {
      this.count('conflicting-definition');
      return { kind: 'refused', reason: fit.refused, counter: 'conflicting-definition', answer: false };
    }
    if (fit.defined) this.count('defined-by-engine');
    const now = this.deps.clock.now();
    let rec = this.engines.get(msg.engine);
    const echo = rec !== undefined && rec.handshake.takeEcho(msg.receivedId);
    if (rec?.handshake.echoed && !echo) return this.stale(rec, msg);
    if (!rec) {
      if (this.engines.size >= MAX_ENGINES) {
        this.count('too-many-engines');
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
      const kept = this.adminWeights.get(msg.engine);
      if (kept !== undefined) kept.leftAt = null;
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
    this.count('here-i-am');
    rec.lastHereIAm = now;
    rec.removalQuerySent = false;
    const weightChanged = rec.advertisedWeight !== msg.weight;
    rec.advertisedWeight = msg.weight;
    if (msg.historicalBuckets) rec.historical = msg.historicalBuckets;

    const mismatch = capabilityMismatch(msg.capabilities, this.config);
    if (mismatch !== null) {
      const first = rec.refused !== mismatch;
      rec.refused = mismatch;
      if (first) this.count('capability-refused');
      this.transition(rec, 'joining', `capabilities refused: ${mismatch}`);
      return { kind: 'refused', reason: mismatch, counter: 'capability-refused', answer: true };
    }
    rec.refused = null;

    rec.shutdown = msg.shutdown === true;
    const why = rec.handshake.step(echo, this.config.lenientReceiveId, msg.receivedId);
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
    this.count('stale-receive-id');
    const now = this.deps.clock.now();
    const answer = rec.handshake.answerStale(now, this.deps.hereIAmMs / 10);
    const what = msg.shutdown ? 'SHUTDOWN' : 'HERE_I_AM';
    const reason =
      msg.receivedId === 0
        ? `${what} from ${rec.address} without our Receive ID although it echoed one before (it restarted, or a replay)`
        : `${what} from ${rec.address} echoes Receive ID ${msg.receivedId}, not an I_SEE_YOU sent to it since its last counted HERE_I_AM (a replay, or our answer was lost)`;
    return { kind: 'stale', reason, answer };
  }

  private verdict(address: EngineAddress): HealthVerdict {
    return this.deps.health?.(address) ?? NO_VERDICT;
  }

  /** Every cause that keeps a live engine out of the table, each on its own (admin, shutdown, the probes' drain). */
  private drainCauses(address: EngineAddress, rec: EngineRecord | undefined): string[] {
    const causes: string[] = [];
    if (this.adminDrained.has(address)) causes.push('admin');
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
    if (this.adminDrained.has(rec.address)) return 'admin drain (kept until undrain)';
    if (rec.shutdown) return 'Command Extension SHUTDOWN';
    return v.drain;
  }

  /** The probes' verdict on `engine` changed: move it to the state that verdict implies. */
  healthChanged(engine: EngineAddress, reason: string): void {
    const rec = this.engines.get(engine);
    if (rec) this.transition(rec, this.targetState(rec), reason);
  }

  /** Moves an engine to a state (one event), then recomputes the table if membership or weights changed. */
  private transition(rec: EngineRecord, to: EngineState, reason: string, weightReason?: string): void {
    const from = rec.state;
    if (from !== to) {
      const now = this.deps.clock.now();
      if (from === 'usable') this.remember(rec.address, now);
      rec.state = to;
      rec.reason = reason;
      rec.usableSince = to === 'usable' ? now : null;
      this.deps.emit({ type: 'engine-state', service: this.id, engine: rec.address, from, to, reason, at: now });
      if (to === 'gone') {
        this.engines.delete(rec.address);
        const kept = this.adminWeights.get(rec.address);
        if (kept !== undefined) kept.leftAt = now;
        this.forgetWeights(now);
      }
      this.recompute(`${rec.address} ${from} -> ${to}: ${reason}`);
    } else if (weightReason !== undefined && to === 'usable') {
      this.recompute(`${rec.address} ${weightReason}`);
    }
  }

  private remember(address: EngineAddress, now: number): void {
    const buckets = bucketsOf(this.table, address);
    if (buckets.length > 0) this.history.set(address, { buckets, leftAt: now });
  }

  private effectiveWeight(rec: EngineRecord): number {
    const admin = this.adminWeights.get(rec.address);
    if (admin !== undefined) return admin.weight;
    const configured = this.config.weights?.[rec.address];
    return configured ?? rec.advertisedWeight;
  }

  private usable(): EngineRecord[] {
    return [...this.engines.values()]
      .filter((r) => r.state === 'usable')
      .sort((a, b) => compareSquidOrder(a.address, b.address));
  }

  /** The member change number follows the usable set at once, even while the table waits for timers.settle. */
  private noteMembers(): void {
    const names = this.usable()
      .map((r) => r.address)
      .join(',');
    if (names !== this.members) {
      this.members = names;
      this.memberChangeNumber = nextChangeNumber(this.memberChangeNumber);
    }
  }

  /** Whether a table change now would come sooner than timers.settle after the last one. */
  private settling(now: number): boolean {
    const settle = this.deps.settleMs ?? 0;
    return settle > 0 && now - this.lastTableChangeAt < settle;
  }

  /**
   * Recomputes the table now, or, within timers.settle of the last table change, once the settle time has passed
   * (tick): the first change after a quiet spell is immediate (a single failure heals at once), the rest of a burst
   * becomes one trailing change. Every request that waits is counted `table-changes-coalesced`.
   */
  private recompute(reason: string): void {
    this.noteMembers();
    const now = this.deps.clock.now();
    this.clampToNow(now);
    if (this.settling(now)) {
      this.count('table-changes-coalesced');
      const first = this.pending === null;
      this.pending ??= { reason, requests: 0 };
      this.pending.requests += 1;
      if (first) this.deps.wake?.();
      return;
    }
    this.flush(reason);
  }

  /** Runs the recompute now, for `reason` and whatever was waiting. */
  private flush(reason: string): void {
    const waiting = this.pending;
    this.pending = null;
    this.recomputeNow(
      waiting === null
        ? reason
        : `${waiting.reason}${waiting.requests > 1 ? ` and ${waiting.requests - 1} more change(s) within timers.settle` : ''}`,
    );
  }

  private recomputeNow(reason: string): void {
    const now = this.deps.clock.now();
    for (const [addr, h] of this.history) {
      // A maintenance drain keeps the buckets for the whole window, however long: the return is sticky.
      if (this.verdict(addr).holdHistory === true) h.leftAt = now;
      else if (now - h.leftAt > this.config.historyWindowMs) this.history.delete(addr);
    }
    this.noteMembers();
    const usable = this.usable();
    const members: Member[] = usable.map((r) => {
      const history = this.history.get(r.address)?.buckets ?? r.historical;
      return {
        address: r.address,
        weight: this.effectiveWeight(r),
        priority: this.config.priorities?.[r.address] ?? 0,
        ...(history ? { history } : {}),
        ...(r.usableSince !== null ? { usableSince: r.usableSince } : {}),
      };
    });
    const input = { previous: this.table, members, now };
    // An engine's table in force ends the restart grace: it is newer than anything persisted.
    if (this.authority.obeying) this.restartGrace = null;
    const grace = this.restartGrace;
    const held = grace?.next(input) ?? null;
    if (held === null || held.over) this.restartGrace = null;
    const decided = held?.table ?? this.authority.next(input);
    const maskChanged =
      this.config.assignment === 'mask' && this.reassignMask(members, now, held !== null ? grace : null);
    // The Assignment Key's change number is the table's: a change of the mask values alone must advance it too, or an
    // engine that caches the assignment by its key keeps the old values.
    const next =
      maskChanged && decided.changeNumber === this.table.changeNumber
        ? { changeNumber: nextChangeNumber(decided.changeNumber), buckets: decided.buckets }
        : decided;
    for (const r of usable) if (next.buckets.includes(r.address)) this.history.delete(r.address);
    this.setTable(next, reason, maskChanged);
  }

  /**
   * Mask services: the values follow the usable engines whichever way the bucket table was made (a persisted or an
   * obeyed bucket table says nothing about them), on the field Squid masks for the service's hash flags. True when a
   * value changed engine (or the mask changed).
   */
  private reassignMask(members: readonly Member[], now: number, grace: RestartGrace | null): boolean {
    const mask = squidMaskFor(this.definition.current?.flags ?? ServiceFlag.DST_IP_HASH);
    const before = this.maskTable;
    const previous = sameMask(before.mask, mask) ? before : emptyMaskTable(mask, before.changeNumber);
    // After a restart the persisted values stand (healed) as long as the persisted buckets do.
    const kept =
      grace?.maskValues(
        previous,
        mask,
        members.map((m) => m.address),
      ) ?? null;
    // Mask values carry no history (the U Bucket Block names buckets).
    this.maskTable =
      kept ??
      assignMask(
        previous,
        members.map(({ history: _h, ...m }) => m),
        {
          mode: this.config.mode,
          now,
          ...(this.config.failbackHoldMs !== undefined ? { failbackHoldMs: this.config.failbackHoldMs } : {}),
        },
      );
    return this.maskTable !== before;
  }

  private setTable(next: BucketTable, reason: string, maskChanged = false): void {
    const previous = this.table;
    const moved = movedBuckets(previous, next).length;
    this.table = next;
    if (moved > 0 || next.changeNumber !== previous.changeNumber || maskChanged)
      this.lastTableChangeAt = this.deps.clock.now();
    if (moved > 0 || next.changeNumber !== previous.changeNumber || maskChanged)
      this.deps.emit({ type: 'table', service: this.id, changeNumber: next.changeNumber, moved, reason });
  }

  /**
   * Advances the Receive ID (never zero) and plans the unicast I_SEE_YOU answering `engine`; `answering` says whether
   * the HERE_I_AM it answers counted or was stale (its Receive ID is then kept apart, see ReceiveIdHandshake).
   */
  iSeeYou(engine: EngineAddress, answering: 'counted' | 'stale' = 'counted'): ISeeYouPlan {
    this.receiveId = nextReceiveId(this.receiveId);
    this.engines.get(engine)?.handshake.sent(this.receiveId, answering, ++this.iSeeYouOrder);
    this.count('i-see-you');
    const usable = this.usable();
    return {
      service: this.definition.wire(),
      routerAddress: this.deps.routerAddress,
      receiveId: this.receiveId,
      engine,
      memberChangeNumber: this.memberChangeNumber,
      assignmentKey: this.authority.assignmentKey(this.deps.routerAddress, this.table),
      routers: this.routers(),
      engines: usable.map((r) => ({
        address: r.address,
        weight: this.effectiveWeight(r),
        buckets: bucketsOf(this.table, r.address),
      })),
      table: this.table,
      maskSets: this.config.assignment === 'mask' ? toMaskValueSets(this.maskTable) : [],
      capabilities: {
        forwarding: this.config.forwarding,
        assignment: this.config.assignment,
        return: this.config.return,
      },
    };
  }

  private routers(): string[] {
    return [this.deps.routerAddress, ...(this.config.peers ?? []).filter((p) => p !== this.deps.routerAddress)];
  }

  /** A REDIRECT_ASSIGN: obeyed only under designated-engine authority, from the designated engine, when valid. */
  redirectAssign(ra: RedirectAssign): AssignVerdict {
    const usable = this.usable().map((r) => r.address);
    const verdict = this.authority.redirectAssign(ra, {
      serviceId: this.id,
      routerAddress: this.deps.routerAddress,
      usable,
      memberChangeNumber: this.memberChangeNumber,
      receiveIdOrder: (engine, id) => this.engines.get(engine)?.handshake.sentOrder(id) ?? null,
    });
    if (!verdict.accepted) {
      this.count('redirect-assign-ignored');
      return verdict;
    }
    this.count('redirect-assign-obeyed');
    this.recompute(`REDIRECT_ASSIGN from designated engine ${ra.from}`);
    return verdict;
  }

  /** An MD5 failure for this service: counted, never makes anyone usable. */
  authFailure(): void {
    this.count('auth-failures');
  }

  /**
   * Silence that removes an engine: 3 x HERE_I_AM_T, or VOUCHED_SILENCE x while its probes pass (its HERE_I_AMs are
   * lost or late on the way, its proxy answers): see docs/health.md.
   */
  private removalAfter(rec: EngineRecord): number {
    return (this.verdict(rec.address).vouched === true ? VOUCHED_SILENCE : 3) * this.deps.hereIAmMs;
  }

  /** Runs the HERE_I_AM timers: REMOVAL_QUERY at 2.5x silence, removal at 3x. Returns the queries to send. */
  tick(): RemovalQueryPlan[] {
    const now = this.deps.clock.now();
    this.clampToNow(now);
    const t = this.deps.hereIAmMs;
    const queries: RemovalQueryPlan[] = [];
    for (const rec of [...this.engines.values()]) {
      const silence = now - rec.lastHereIAm;
      if (silence >= this.removalAfter(rec)) {
        this.transition(rec, 'gone', `no HERE_I_AM for ${silence / 1000}s`);
      } else if (silence >= 2.5 * t && !rec.removalQuerySent) {
        rec.removalQuerySent = true;
        this.count('removal-query');
        queries.push({
          service: this.definition.wire(),
          routerAddress: this.deps.routerAddress,
          receiveId: this.receiveId || 1,
          engine: rec.address,
        });
      }
    }
    if (this.engines.size === 0) this.definition.forgetEngines();
    this.forgetWeights(now);
    if (this.restartGrace !== null && now >= this.restartGrace.until)
      this.recompute('restart grace time over: assigning afresh');
    if (this.pending !== null && !this.settling(now)) this.flush('');
    return queries;
  }

  /** The earliest clock time tick() has something to do, or null. */
  nextDue(): number | null {
    const t = this.deps.hereIAmMs;
    return earliestDue([
      this.restartGrace?.until ?? null,
      this.pending !== null ? this.lastTableChangeAt + (this.deps.settleMs ?? 0) : null,
      ...[...this.engines.values()].map(
        (rec) => rec.lastHereIAm + (rec.removalQuerySent ? this.removalAfter(rec) : 2.5 * t),
      ),
    ]);
  }

  /**
   * An admin drain: the engine keeps no buckets until `undrain`, whatever it sends, while it is gone (a reboot is
   * usually why it was drained) and across restarts. An engine that left recently (its buckets are remembered) may be
   * drained too, so it stays out when it comes back.
   */
  drain(engine: EngineAddress, reason = 'admin drain'): CommandResult {
    const rec = this.engines.get(engine);
    if (!rec && !this.history.has(engine) && !this.adminDrained.has(engine)) return this.unknown(engine);
    this.adminDrained.add(engine);
    if (rec) this.transition(rec, this.targetState(rec), reason);
    return { ok: true };
  }

  /** Ends an admin drain (other drain causes stay in force). */
  undrain(engine: EngineAddress, reason = 'admin undrain'): CommandResult {
    const rec = this.engines.get(engine);
    if (!rec && !this.adminDrained.has(engine)) return this.unknown(engine);
    this.adminDrained.delete(engine);
    if (rec) this.transition(rec, this.targetState(rec), reason);
    return { ok: true };
  }

  /**
   * An admin weight: kept while the engine is gone (for historyWindow, see MAX_GONE_WEIGHTS) and across restarts;
   * null ends it, also for an engine that is gone.
   */
  setWeight(engine: EngineAddress, weight: number | null): CommandResult {
    const rec = this.engines.get(engine);
    if (!rec && !(weight === null && this.adminWeights.has(engine))) return this.unknown(engine);
    if (weight !== null && (!Number.isInteger(weight) || weight < 0 || weight > MAX_WEIGHT))
      return { ok: false, error: 'bad-weight', message: `weight must be an integer 0-${MAX_WEIGHT}, got ${weight}` };
    if (weight === null) this.adminWeights.delete(engine);
    else this.adminWeights.set(engine, { weight, leftAt: null });
    if (rec?.state === 'usable')
      this.recompute(`${engine} weight set to ${weight ?? 'its Assignment Weight'} by admin`);
    return { ok: true };
  }

  /** Drops the admin weights of engines gone longer than historyWindow, then all but the MAX_GONE_WEIGHTS latest. */
  private forgetWeights(now: number): void {
    const gone: [EngineAddress, number][] = [];
    for (const [address, w] of this.adminWeights) {
      if (w.leftAt === null) continue;
      if (now - w.leftAt > this.config.historyWindowMs) this.adminWeights.delete(address);
      else gone.push([address, w.leftAt]);
    }
    gone.sort((a, b) => b[1] - a[1] || compareSquidOrder(a[0], b[0]));
    for (const [address] of gone.slice(MAX_GONE_WEIGHTS)) this.adminWeights.delete(address);
  }

  private unknown(engine: EngineAddress): CommandResult {
    return { ok: false, error: 'unknown-engine', message: `engine ${engine} is not in service group ${this.id}` };
  }

  hasEngine(engine: EngineAddress): boolean {
    return this.engines.has(engine);
  }

  engineAddresses(): EngineAddress[] {
    return [...this.engines.keys()];
  }

  currentTable(): BucketTable {
    return this.table;
  }

  snapshot(): ServiceSnapshot {
    const counts = countsByEngine(this.table);
    const engines: EngineSnapshot[] = [...this.engines.values()]
      .sort((a, b) => compareSquidOrder(a.address, b.address))
      .map((r) => ({
        address: r.address,
        state: r.state,
        flags: {
          noReceiveIdEcho: r.handshake.noEcho,
          adminDrain: this.adminDrained.has(r.address),
          weightOverride: this.adminWeights.has(r.address),
          refused: r.refused,
        },
        weight: this.effectiveWeight(r),
        buckets: counts.get(r.address) ?? 0,
        share: (counts.get(r.address) ?? 0) / BUCKET_COUNT,
        lastHereIAm: r.lastHereIAm,
        usableSince: r.usableSince,
        reason: r.reason,
        probeRttMs: this.verdict(r.address).probeRttMs,
        drains: this.drainCauses(r.address, r),
      }));
    // A drained engine that is gone is still listed, so every view shows the drain that awaits it.
    for (const address of [...this.adminDrained].filter((a) => !this.engines.has(a)).sort(compareSquidOrder)) {
      engines.push({
        address,
        state: 'gone',
        flags: {
          noReceiveIdEcho: false,
          adminDrain: true,
          weightOverride: this.adminWeights.has(address),
          refused: null,
        },
        weight: this.adminWeights.get(address)?.weight ?? 0,
        buckets: 0,
        share: 0,
        lastHereIAm: null,
        usableSince: null,
        reason: 'gone; admin drain kept until undrain',
        probeRttMs: null,
        drains: ['admin'],
      });
    }
    const c = this.config;
    return {
      id: c.id,
      mode: c.mode,
      authority: c.authority,
      failMode: c.failMode,
      forwarding: c.forwarding,
      return: c.return,
      assignment: c.assignment,
      definition: this.definition.current,
      changeNumber: this.table.changeNumber,
      memberChangeNumber: this.memberChangeNumber,
      receiveId: this.receiveId,
      designatedEngine: designatedEngineOf(this.usable().map((r) => r.address)),
      buckets: [...this.table.buckets],
      maskSets: this.config.assignment === 'mask' ? toMaskValueSets(this.maskTable) : [],
      engines,
      routers: this.routers(),
      counters: { ...this.counters },
      detection: this.deps.detection ?? {
        hereIAmMs: 3 * this.deps.hereIAmMs,
        http: null,
        icp: null,
        tcp: null,
        icmp: null,
        probes: [],
      },
    };
  }

  /** What to persist: the table, the Receive ID, every engine present or remembered. */
  memory(): ServiceMemory {
    const now = this.deps.clock.now();
    // Inside the restart grace time the persisted table is still the one to come back to.
    const table =
      this.restartGrace !== null
        ? { changeNumber: this.table.changeNumber, buckets: this.restartGrace.persisted.buckets }
        : this.table;
    const present = [...this.engines.values()].map((r) => ({
      address: r.address,
      weight: this.effectiveWeight(r),
      state: r.state,
      buckets: bucketsOf(table, r.address),
      leftAt: null,
    }));
    const departed = [...this.history]
      .filter(([a]) => !this.engines.has(a))
      .map(([address, h]) => ({
        address,
        weight: 0,
        state: 'gone' as const,
        buckets: [...h.buckets],
        leftAt: h.leftAt,
      }));
    // Inside the grace the persisted values likewise, under the live change number (never one handed out again).
    const kept = this.restartGrace?.persistedMask ?? null;
    const mask =
      this.config.assignment !== 'mask'
        ? null
        : kept !== null
          ? { ...kept, changeNumber: this.maskTable.changeNumber }
          : this.maskTable;
    return {
      id: this.id,
      table,
      ...(mask !== null ? { mask: { ...mask, engines: [...mask.engines] } } : {}),
      receiveId: this.receiveId,
      memberChangeNumber: this.memberChangeNumber,
      engines: [...present, ...departed],
      counters: { ...this.counters },
      adminDrained: [...this.adminDrained].sort(compareSquidOrder),
      adminWeights: [...this.adminWeights]
        .filter(([, w]) => w.leftAt === null || now - w.leftAt <= this.config.historyWindowMs)
        .sort(([a], [b]) => compareSquidOrder(a, b))
        .map(([address, w]) => ({ address, weight: w.weight, leftAt: w.leftAt })),
    };
  }
}
