// One service group's table: from its usable engines to the next bucket table (and a mask service's values), through
// the restart grace (authority/restart-grace.ts) or the authority (authority/), at most one change per timers.settle;
// the departed engines' buckets (history) for their return; the member change number. Every table change emits one
// table event, and every path advances the change number through nextTable (docs/architecture.md, decision 9). The
// decision itself is decide-table.ts (pure), which preview() also runs for `wccpctl plan`.
import { bucketsOf, emptyTable, movedBuckets, nextChangeNumber } from '../buckets/table.js';
import type { BucketTable, EngineAddress } from '../buckets/table.js';
import { emptyMaskTable, squidMaskFor, toMaskValueSets } from '../buckets/mask.js';
import type { MaskTable } from '../buckets/mask.js';
import { ApplianceAuthority } from './authority/appliance.js';
import type { AssignmentAuthority, AssignVerdict, RedirectAssignContext } from './authority/authority.js';
import { DesignatedEngineAuthority } from './authority/designated-engine.js';
import { RestartGrace } from './authority/restart-grace.js';
import { decideLoad, decideTables, membersOf } from './decide-table.js';
import { biasFor, loadRatio } from '../buckets/load.js';
import type { LoadBias, LoadDecision } from '../buckets/load.js';
import { LoadState } from './load-aware.js';
import type { BucketCount, LoadMemory, WindowLoad } from './load-aware.js';
import type { TableDecision, TableDeciders, TableState, UsableEngine } from './decide-table.js';
import type {
  AssignFn,
  Clock,
  ClusterEvent,
  MaskValueSet,
  RedirectAssign,
  ServiceCounter,
  ServiceGroupConfig,
  ServiceMemory,
  TableLoad,
} from './types.js';

export type { UsableEngine } from './decide-table.js';

/** What the daemon and the plans use of load-aware assignment. */
export type LoadAwarePort = Pick<
  TableKeeper,
  'loadRead' | 'loadSoFar' | 'loadDecision' | 'loadApply' | 'loadView' | 'loadMemory' | 'loadAdopt'
>;

/** What a window's load decides (TableKeeper.loadDecision). */
export type LoadOutcome =
  /** Load-aware assignment is off for this service. */
  | { readonly kind: 'off' }
  /** The first counters read, or a window not read after the one before: its load is the baseline of the next. */
  | { readonly kind: 'baseline' }
  /** Too few new connections in the window to decide on (minConnections). */
  | { readonly kind: 'quiet'; readonly connections: number }
  /** A table change waits (timers.settle, the restart grace): nothing decided. */
  | { readonly kind: 'waiting'; readonly why: string }
  | {
      readonly kind: 'decided';
      readonly windowEnd: number;
      readonly decision: LoadDecision;
      /** The table after the moves (the table in force when there are none). */
      readonly table: BucketTable;
      /** The event's reason, when there are moves. */
      readonly reason: string;
    };

/** `load: 192.0.2.11 at 1.42x its share -> 1.08x, 3 buckets to 192.0.2.13`, one clause per engine that gave. */
export function loadReason(d: LoadDecision): string {
  const byFrom = new Map<EngineAddress, Map<EngineAddress, number>>();
  for (const m of d.moves) {
    const to = byFrom.get(m.from) ?? new Map<EngineAddress, number>();
    to.set(m.to, (to.get(m.to) ?? 0) + 1);
    byFrom.set(m.from, to);
  }
  const x = (r: number): string => `${r.toFixed(2)}x`;
  const clauses = [...byFrom].map(([from, to]) => {
    const e = d.engines.find((g) => g.address === from);
    const ratios = e === undefined ? '' : ` at ${x(loadRatio(e, e.before))} its share -> ${x(loadRatio(e, e.after))}`;
    const dests = [...to].map(([a, n], i) => `${n}${i === 0 ? ` bucket${n === 1 ? '' : 's'}` : ''} to ${a}`);
    return `${from}${ratios}, ${dests.join(', ')}`;
  });
  return `load: ${clauses.join('; ')}`;
}

export interface TableKeeperDeps {
  readonly config: ServiceGroupConfig;
  readonly clock: Clock;
  readonly assign: AssignFn;
  /** HERE_I_AM_T in ms (the restart grace time is a multiple of it). */
  readonly hereIAmMs: number;
  /** timers.settle in ms: at most one table change per this long; 0 or absent = every change at once. */
  readonly settleMs?: number;
  /** Called when a table change starts waiting for timers.settle: nextDue() moved earlier without an event. */
  readonly wake?: () => void;
  /** The usable engines, in Squid's order. */
  readonly usable: () => readonly UsableEngine[];
  /** A maintenance drain holds the engine's history for the whole window. */
  readonly holdHistory: (engine: EngineAddress) => boolean;
  /** The hash flags of the service's definition in force (a mask service masks the fields they name). */
  readonly hashFlags: () => number;
  readonly count: (name: ServiceCounter) => void;
  /** Table events, and engine-state events for the engines a restart grace ended without (new -> gone). */
  readonly emit: (e: ClusterEvent) => void;
  /** Brings every time the group recorded back to now at most (ServiceGroup.clampToNow). */
  readonly clampToNow: (now: number) => void;
}

export class TableKeeper {
  private table: BucketTable = emptyTable();
  /** Mask assignment services: the mask values per engine, kept alongside the bucket table. */
  private maskTable: MaskTable = emptyMaskTable();
  /** Buckets of engines that left, for their return (draft "historical" bucket data). */
  private readonly history = new Map<EngineAddress, { buckets: readonly number[]; leftAt: number }>();
  /** Who decides the table (docs/architecture.md, decision 1). */
  private readonly authority: AssignmentAuthority;
  /** After a restart: the persisted table, in front of the authority until its holders are back or the time is over. */
  private restartGrace: RestartGrace | null = null;
  private memberChangeNumberNow = 0;
  private members = '';
  /**
   * timers.settle: when the table last changed, and the recompute (with its first reason and how many requests it
   * stands for) waiting for the settle time to pass. A REDIRECT_ASSIGN obeyed meanwhile waits in the authority.
   */
  private lastTableChangeAt = -Infinity;
  private pending: { reason: string; requests: number } | null = null;
  /** Load-aware assignment: the counters' baseline, the holds, the budget and the bias (load-aware.ts). */
  private readonly loadState = new LoadState();
  /** The last window decided: each engine's load before and after (the views' load ratios). */
  private lastLoad: { readonly windowEnd: number; readonly decision: LoadDecision } | null = null;

  constructor(private readonly deps: TableKeeperDeps) {
    const appliance = new ApplianceAuthority(() => deps.config, deps.assign);
    this.authority =
      deps.config.authority === 'designated-engine' ? new DesignatedEngineAuthority(appliance) : appliance;
  }

  get current(): BucketTable {
    return this.table;
  }

  get memberChangeNumber(): number {
    return this.memberChangeNumberNow;
  }

  /** A mask service's Mask/Value Sets as sent to engines (empty for hash assignment). */
  maskSets(): MaskValueSet[] {
    return this.deps.config.assignment === 'mask' ? toMaskValueSets(this.maskTable) : [];
  }

  /** Seeds the table's change number, the mask values, the member change number and every engine's buckets. */
  restore(memory: ServiceMemory, now: number): void {
    this.memberChangeNumberNow = memory.memberChangeNumber;
    // Until its engines are heard again the live table is empty: a different table, so a new change number (a reader
    // that caches by change number must not take the empty table for the persisted one).
    const persistedAny = memory.table.buckets.some((b) => b !== null);
    this.table = emptyTable(persistedAny ? nextChangeNumber(memory.table.changeNumber) : memory.table.changeNumber);
    // A mask service's values likewise: empty under a new change number, the persisted ones kept by the grace.
    const mask = this.deps.config.assignment === 'mask' ? (memory.mask ?? null) : null;
    if (mask !== null) {
      const maskAny = mask.engines.some((e) => e !== null);
      this.maskTable = emptyMaskTable(mask.mask, maskAny ? nextChangeNumber(mask.changeNumber) : mask.changeNumber);
    }
    // A time of leaving in the future (a clock set back, a hand-edited file) counts from now, as for weights: otherwise
    // that engine's buckets would be remembered for as long as the file says.
    for (const e of memory.engines) {
      const buckets = e.leftAt === null ? bucketsOf(memory.table, e.address) : e.buckets;
      if (buckets.length > 0) this.history.set(e.address, { buckets, leftAt: Math.min(e.leftAt ?? now, now) });
    }
    this.restartGrace = RestartGrace.after(memory.table, now + this.restartGraceMs(), mask);
    if (memory.load !== undefined && this.loadAware() !== null) this.loadState.restore(memory.load);
  }

  /** The load-aware settings in force, or null where it is off (a reload may change them). */
  private loadAware() {
    const s = this.deps.config.loadAware;
    return s?.enabled === true ? s : null;
  }

  /** What the next tables are decided from, with `usable` the usable engines (`keep`: the bias pruned for good). */
  private stateFor(
    usable: readonly UsableEngine[],
    remembered: ReadonlyMap<EngineAddress, readonly number[]>,
    now: number,
    keep: boolean,
  ): TableState {
    const bias = this.biasOf(usable, keep);
    return {
      previous: this.table,
      previousMask: this.maskTable,
      usable,
      remembered,
      now,
      ...(bias !== undefined ? { bias } : {}),
    };
  }

  /** The bias for `usable`: the moves of engines no longer usable are dropped (`keep`: for good). */
  private biasOf(usable: readonly UsableEngine[], keep: boolean): LoadBias | undefined {
    if (this.loadAware() === null) return undefined;
    const members = new Set(usable.map((u) => u.address));
    if (keep) this.loadState.prune(members);
    return keep ? this.loadState.bias : biasFor(this.loadState.bias, members);
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
    return Math.max(3, this.deps.config.lenientReceiveId + 1) * this.deps.hereIAmMs;
  }

  /** Times in the future (see ServiceGroup.clampToNow) count from now. */
  clamp(now: number): void {
    if (this.lastTableChangeAt > now) this.lastTableChangeAt = now;
    for (const h of this.history.values()) if (h.leftAt > now) h.leftAt = now;
    const graceEnd = now + this.restartGraceMs();
    if (this.restartGrace !== null && this.restartGrace.until > graceEnd) this.restartGrace.restart(graceEnd);
  }

  /** An engine leaves the usable set: its buckets are remembered for its return. */
  remember(address: EngineAddress, now: number): void {
    const buckets = bucketsOf(this.table, address);
    if (buckets.length > 0) this.history.set(address, { buckets, leftAt: now });
  }

  /** Whether the buckets of `address` are remembered (it left recently). */
  remembers(address: EngineAddress): boolean {
    return this.history.has(address);
  }

  /** The member change number follows the usable set at once, even while the table waits for timers.settle. */
  private noteMembers(): void {
    const names = this.deps
      .usable()
      .map((r) => r.address)
      .join(',');
    if (names !== this.members) {
      this.members = names;
      this.memberChangeNumberNow = nextChangeNumber(this.memberChangeNumberNow);
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
  recompute(reason: string): void {
    this.noteMembers();
    const now = this.deps.clock.now();
    this.deps.clampToNow(now);
    if (this.settling(now)) {
      this.deps.count('table-changes-coalesced');
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
      if (this.deps.holdHistory(addr)) h.leftAt = now;
      else if (!this.stillRemembered(addr, h.leftAt, now)) this.history.delete(addr);
    }
    this.noteMembers();
    const awaited = this.awaited();
    // An engine's table in force ends the restart grace: it is newer than anything persisted.
    if (this.authority.obeying) this.restartGrace = null;
    const remembered = new Map([...this.history].map(([a, h]) => [a, h.buckets]));
    const d = decideTables(
      this.stateFor(this.deps.usable(), remembered, now, true),
      this.deciders((input) => this.authority.next(input)),
    );
    if (d.graceOver) this.restartGrace = null;
    this.maskTable = d.mask;
    for (const m of d.members) if (d.table.buckets.includes(m.address)) this.history.delete(m.address);
    this.setTable(d.table, reason, d.maskChanged);
    // The grace is over without them: their routes go (one event each, so the data plane hears of it even when the
    // table did not change), and connections still redirected to them are reset as for any engine gone.
    if (this.restartGrace === null)
      for (const engine of awaited)
        this.deps.emit({
          type: 'engine-state',
          service: this.deps.config.id,
          engine,
          from: 'new',
          to: 'gone',
          reason: 'held buckets when wccpd stopped and not heard within the restart grace time',
          at: now,
        });
  }

  /**
   * While a restart grace lasts, the engines of the persisted table not usable since (RestartGrace.awaited): the data
   * plane keeps their routes (ServiceSnapshot.awaited). [] without a grace.
   */
  awaited(): EngineAddress[] {
    return this.restartGrace?.awaited(this.deps.usable().map((r) => r.address)) ?? [];
  }

  /** A departed engine's buckets are remembered for historyWindow, and for a whole maintenance window. */
  private stillRemembered(address: EngineAddress, leftAt: number, now: number): boolean {
    return this.deps.holdHistory(address) || now - leftAt <= this.deps.config.historyWindowMs;
  }

  private deciders(decide: TableDeciders['decide']): TableDeciders {
    return {
      config: this.deps.config,
      mask: squidMaskFor(this.deps.hashFlags()),
      grace: this.authority.obeying ? null : this.restartGrace,
      decide,
    };
  }

  /**
   * The tables the next change would give if `usable` were the usable engines (`wccpctl plan`): the same decision as
   * recompute's, with what it would forget forgotten, by an authority that changes nothing. Changes nothing.
   */
  preview(usable: readonly UsableEngine[]): TableDecision {
    const now = this.deps.clock.now();
    const remembered = new Map<EngineAddress, readonly number[]>();
    for (const [addr, h] of this.history)
      if (this.stillRemembered(addr, h.leftAt, now)) remembered.set(addr, h.buckets);
    return decideTables(
      this.stateFor(usable, remembered, now, false),
      this.deciders((input) => this.authority.preview(input)),
    );
  }

  /** The tables in force: a plan's before. */
  get tables(): { readonly table: BucketTable; readonly mask: MaskTable } {
    return { table: this.table, mask: this.maskTable };
  }

  /** The restart grace is in force (the persisted table is kept). */
  get inRestartGrace(): boolean {
    return this.restartGrace !== null && !this.authority.obeying;
  }

  private setTable(next: BucketTable, reason: string, maskChanged = false, load?: TableLoad): void {
    const previous = this.table;
    const moved = movedBuckets(previous, next).length;
    this.table = next;
    if (moved > 0 || next.changeNumber !== previous.changeNumber || maskChanged) {
      this.lastTableChangeAt = this.deps.clock.now();
      this.deps.emit({
        type: 'table',
        service: this.deps.config.id,
        changeNumber: next.changeNumber,
        moved,
        reason,
        ...(load !== undefined ? { load } : {}),
      });
    }
  }

  /**
   * The data plane's per-bucket counters read at the end of the window ending at `windowEnd` (wall-clock ms, a
   * multiple of the window): the window's load (since the last read), or null (off, the first read, a window missed).
   * Keeps the counters as the next window's baseline.
   */
  loadRead(windowEnd: number, counts: readonly BucketCount[]): WindowLoad | null {
    const settings = this.loadAware();
    return settings === null ? null : this.loadState.read(windowEnd, counts, settings);
  }

  /** The load since the last window's end, from counters read now (changes nothing; `wccpctl plan rebalance`). */
  loadSoFar(counts: readonly BucketCount[]): WindowLoad | null {
    const settings = this.loadAware();
    return settings === null ? null : this.loadState.since(counts, settings.measure);
  }

  /** What a window's load decides now (changes nothing): the moves and the table after them. */
  loadDecision(windowEnd: number, w: WindowLoad | null): LoadOutcome {
    const settings = this.loadAware();
    if (settings === null) return { kind: 'off' };
    if (w === null) return { kind: 'baseline' };
    if (w.connections < settings.minConnections) return { kind: 'quiet', connections: w.connections };
    if (this.restartGrace !== null && !this.authority.obeying)
      return { kind: 'waiting', why: 'the restart grace keeps the persisted table' };
    if (this.pending !== null) return { kind: 'waiting', why: 'a table change waits for timers.settle' };
    const members = membersOf(this.stateFor(this.deps.usable(), new Map(), 0, false), this.deps.config);
    const { decision, table } = decideLoad(this.table, members, w.load, this.loadState.options(windowEnd, settings));
    return { kind: 'decided', windowEnd, decision, table, reason: loadReason(decision) };
  }

  /** Makes a decided window's moves (one table event with the loads before and after); its loads are the views'. */
  loadApply(outcome: LoadOutcome): void {
    const settings = this.loadAware();
    if (settings === null || outcome.kind !== 'decided') return;
    const { decision, windowEnd } = outcome;
    this.lastLoad = { windowEnd, decision };
    if (decision.moves.length === 0) return;
    this.loadState.made(windowEnd, decision.moves, settings);
    const engines = decision.engines.map((e) => ({
      address: e.address,
      before: loadRatio(e, e.before),
      after: loadRatio(e, e.after),
    }));
    this.setTable(outcome.table, outcome.reason, false, { windowEnd, engines });
  }

  /** The holds, budget spent and bias kept (what a peer without them takes); null where load-aware is off. */
  loadMemory(): LoadMemory | null {
    return this.loadAware() === null ? null : this.loadState.memory();
  }

  /**
   * A peer's holds, budget spent and bias, taken by a gateway that has none (its state file lost): its moves stay
   * (the pins) and the next decisions are the peer's (docs/buckets.md, "Two gateways").
   */
  loadAdopt(memory: LoadMemory, reason: string): void {
    if (this.loadAware() === null) return;
    this.loadState.restore(memory);
    this.recompute(reason);
  }

  /** The last window decided, the moves spent in the hour before it and the buckets held (the views). */
  loadView(): {
    readonly last: { readonly windowEnd: number; readonly decision: LoadDecision } | null;
    readonly spent: number;
    readonly held: number;
  } | null {
    const settings = this.loadAware();
    if (settings === null) return null;
    const at = this.lastLoad?.windowEnd ?? 0;
    return { last: this.lastLoad, ...this.loadState.summary(at, settings) };
  }

  /** The table's timers: the restart grace time over, a change held back by timers.settle now due. */
  tick(now: number): void {
    if (this.restartGrace !== null && now >= this.restartGrace.until)
      this.recompute('restart grace time over: assigning afresh');
    if (this.pending !== null && !this.settling(now)) this.flush('');
  }

  /** When tick() has something to do: the restart grace's end, a held-back change's due time. */
  due(): (number | null)[] {
    return [
      this.restartGrace?.until ?? null,
      this.pending !== null ? this.lastTableChangeAt + (this.deps.settleMs ?? 0) : null,
    ];
  }

  /** A REDIRECT_ASSIGN: obeyed only under designated-engine authority, from the designated engine, when valid. */
  redirectAssign(ra: RedirectAssign, context: Omit<RedirectAssignContext, 'memberChangeNumber'>): AssignVerdict {
    const verdict = this.authority.redirectAssign(ra, { ...context, memberChangeNumber: this.memberChangeNumberNow });
    if (!verdict.accepted) {
      this.deps.count('redirect-assign-ignored');
      return verdict;
    }
    this.deps.count('redirect-assign-obeyed');
    this.recompute(`REDIRECT_ASSIGN from designated engine ${ra.from}`);
    return verdict;
  }

  assignmentKey(routerAddress: string): { address: string; changeNumber: number } {
    return this.authority.assignmentKey(routerAddress, this.table);
  }

  /**
   * What to persist of the table: inside the restart grace time the persisted table (and values) are still the ones
   * to come back to, under the live change numbers (never ones handed out again); the departed engines' buckets.
   */
  memory(): {
    table: BucketTable;
    mask: MaskTable | null;
    departed: [EngineAddress, { buckets: readonly number[]; leftAt: number }][];
    load?: LoadMemory;
  } {
    const table =
      this.restartGrace !== null
        ? { changeNumber: this.table.changeNumber, buckets: this.restartGrace.persisted.buckets }
        : this.table;
    const kept = this.restartGrace?.persistedMask ?? null;
    const mask =
      this.deps.config.assignment !== 'mask'
        ? null
        : kept !== null
          ? { ...kept, changeNumber: this.maskTable.changeNumber }
          : this.maskTable;
    return {
      table,
      mask,
      departed: [...this.history],
      ...(this.loadAware() !== null ? { load: this.loadState.memory() } : {}),
    };
  }
}
