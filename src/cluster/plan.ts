// `wccpctl plan`: what an engine's join, leave, drain or new weight would do to a service group's table, before it is
// made. Pure: the group hands over its engines as the table sees them (ServiceGroup.planInput), the change is made on
// that copy, and the table keeper's preview decides the table by decide-table.ts, the code of every real change, with
// an authority that changes nothing. With nothing else changing meanwhile, making the change gives exactly `after`.
import { countsByEngine } from '../buckets/table.js';
import type { BucketTable, EngineAddress } from '../buckets/table.js';
import type { MaskTable } from '../buckets/mask.js';
import type { TableDecision, UsableEngine } from './decide-table.js';
import { compareSquidOrder } from './squid-order.js';
import { badWeight } from './admin-overrides.js';
import type { EngineState, ServiceGroupConfig } from './types.js';
import type { EngineLoad, LoadStop } from '../buckets/load.js';
import type { LoadOutcome } from './table-keeper.js';
import { formatDuration } from '../duration.js';

/** Squid's default wccp2_weight: a joining engine's weight when nothing else says. */
export const SQUID_DEFAULT_WEIGHT = 10_000;

export type PlanChange =
  /** A new engine registers (or a registered one completes its handshake); `weight` is its Assignment Weight. */
  | { readonly kind: 'join'; readonly engine: EngineAddress; readonly weight?: number }
  /** The engine leaves: silent past 3 x HERE_I_AM_T, or gone for good. */
  | { readonly kind: 'leave'; readonly engine: EngineAddress }
  /** An admin drain. */
  | { readonly kind: 'drain'; readonly engine: EngineAddress }
  /** An admin weight. */
  | { readonly kind: 'weight'; readonly engine: EngineAddress; readonly weight: number };

/** A present engine as a plan sees it. */
export interface PlanEngine extends UsableEngine {
  readonly state: EngineState;
}

/** A group's engines and tables as its next table change would see them (ServiceGroup.planInput). */
export interface PlanInput {
  readonly service: number;
  readonly config: ServiceGroupConfig;
  /** The tables in force. */
  readonly before: BucketTable;
  readonly beforeMask: MaskTable;
  /** Every engine present, in Squid's order. */
  readonly engines: readonly PlanEngine[];
  /** The group's clock (ms). */
  readonly now: number;
  /** The group remembers the buckets of `engine`, which left recently. */
  readonly remembers: (engine: EngineAddress) => boolean;
  readonly adminDrained: (engine: EngineAddress) => boolean;
  /** The admin's weight for `engine` (kept while it is gone too), or undefined. */
  readonly adminWeight: (engine: EngineAddress) => number | undefined;
  /** What the probes (or a maintenance window) would make of an engine that joined now, or null. */
  readonly heldBack: (engine: EngineAddress) => 'suspect' | 'draining' | null;
  /** The persisted table is kept (restart grace). */
  readonly inRestartGrace: boolean;
  /** The tables the next change would give with these usable engines (TableKeeper.preview): changes nothing. */
  readonly decide: (usable: readonly UsableEngine[]) => TableDecision;
}

export interface BucketMove {
  readonly bucket: number;
  readonly from: EngineAddress | null;
  readonly to: EngineAddress | null;
}

export interface PlannedEngine {
  readonly address: EngineAddress;
  /** Its state after the change ('gone' for an engine that leaves). */
  readonly state: EngineState;
  /** Its effective weight after the change. */
  readonly weight: number;
  readonly bucketsBefore: number;
  readonly bucketsAfter: number;
  /** Mask services: its mask values before and after. */
  readonly valuesBefore?: number;
  readonly valuesAfter?: number;
}

/** `wccpctl plan rebalance`: the load-aware moves the window's end would make (table-keeper.ts, loadDecision). */
export interface RebalanceChange {
  readonly kind: 'rebalance';
}

/** A rebalance plan's loads: the window's so far, each engine's before and after the moves. */
export interface PlanLoad {
  /** The end of the window the moves would be made at (wall-clock ms). */
  readonly windowEnd: number;
  readonly total: number;
  readonly stop: LoadStop;
  readonly engines: readonly EngineLoad[];
}

export interface Plan {
  readonly service: number;
  readonly change: PlanChange | RebalanceChange;
  /** A rebalance plan's loads (null: nothing was decided, the notes say why). */
  readonly load?: PlanLoad | null;
  readonly before: BucketTable;
  readonly after: BucketTable;
  /** Every bucket whose engine changes, by bucket number (from or to null: unassigned). */
  readonly moves: readonly BucketMove[];
  /** Mask services: the mask values before and after, and those that change engine (by value number). */
  readonly mask: {
    readonly before: MaskTable;
    readonly after: MaskTable;
    readonly moves: readonly BucketMove[];
  } | null;
  /** Every engine present before or after, in Squid's order. */
  readonly engines: readonly PlannedEngine[];
  /** What the plan assumes or what follows later (timers.settle, the designated engine, the restart grace). */
  readonly notes: readonly string[];
}

export type PlanOutcome =
  | { readonly ok: true; readonly plan: Plan }
  | {
      readonly ok: false;
      readonly error: 'unknown-engine' | 'bad-weight' | 'already-member' | 'not-load-aware';
      readonly message: string;
    };

/** The table (and mask values) after `change`, the moves, and each engine's share after. */
export function planChange(input: PlanInput, change: PlanChange): PlanOutcome {
  const changed = changedEngines(input, change);
  if (!changed.ok) return changed;
  const usable = changed.engines
    .filter((e) => e.state === 'usable')
    .sort((a, b) => compareSquidOrder(a.address, b.address))
    .map(({ address, weight, usableSince, historical }) => ({ address, weight, usableSince, historical }));
  const decision = input.decide(usable);
  const { before } = input;
  const after = decision.table;
  const moves = slotMoves(before.buckets, after.buckets);
  const mask =
    input.config.assignment === 'mask'
      ? {
          before: input.beforeMask,
          after: decision.mask,
          moves: slotMoves(input.beforeMask.engines, decision.mask.engines),
        }
      : null;
  return {
    ok: true,
    plan: {
      service: input.service,
      change,
      before,
      after,
      moves,
      mask,
      engines: plannedEngines(input, changed.engines, before, after, mask),
      notes: [...changed.notes, ...notesFor(input, moves.length + (mask?.moves.length ?? 0))],
    },
  };
}

/**
 * `wccpctl plan rebalance`: the moves the end of the current window would make if no more traffic came (the load
 * counted since the last window's end), by the keeper's decision (table-keeper.ts loadDecision) on the table in force;
 * `leading`: notes on the load decided on (summed with the peers').
 */
export function planRebalance(
  input: PlanInput,
  outcome: Exclude<LoadOutcome, { kind: 'off' }>,
  leading: readonly string[] = [],
): Plan {
  const { before } = input;
  const after = outcome.kind === 'decided' ? outcome.table : before;
  const moves = slotMoves(before.buckets, after.buckets);
  const settings = input.config.loadAware;
  const notes = [...leading];
  if (outcome.kind === 'baseline')
    notes.push("no window's counters read yet: the first window's end reads them; the window after it decides");
  else if (outcome.kind === 'quiet')
    notes.push(
      `${outcome.connections} new connections so far in this window, below loadAware.minConnections (${settings?.minConnections ?? 0}): nothing moves`,
    );
  else if (outcome.kind === 'waiting') notes.push(`nothing is decided now: ${outcome.why}`);
  else {
    const d = outcome.decision;
    notes.push(
      `the load counted since the last window's end (${d.total} ${settings?.measure ?? 'connections'}), decided as the window ending ${new Date(outcome.windowEnd).toISOString()} would decide it if no more came`,
    );
    if (d.stop === 'budget')
      notes.push(`loadAware.maxMovesPerHour (${settings?.maxMovesPerHour ?? 0}) stops the moves here`);
    else if (d.stop === 'no-improvement' && d.moves.length === 0)
      notes.push('an engine is above tolerance, but no bucket that is not held would lower its load');
    if (settings !== undefined) notes.push(`a moved bucket is held for ${formatDuration(settings.holdMs)}`);
  }
  return {
    service: input.service,
    change: { kind: 'rebalance' },
    before,
    after,
    moves,
    mask: null,
    engines: plannedEngines(input, input.engines, before, after, null),
    notes,
    load:
      outcome.kind === 'decided'
        ? {
            windowEnd: outcome.windowEnd,
            total: outcome.decision.total,
            stop: outcome.decision.stop,
            engines: outcome.decision.engines,
          }
        : null,
  };
}

function slotMoves(
  before: ReadonlyArray<EngineAddress | null>,
  after: ReadonlyArray<EngineAddress | null>,
): BucketMove[] {
  const moves: BucketMove[] = [];
  for (let i = 0; i < Math.max(before.length, after.length); i++) {
    const from = before[i] ?? null;
    const to = after[i] ?? null;
    if (from !== to) moves.push({ bucket: i, from, to });
  }
  return moves;
}

type Changed =
  { readonly ok: true; readonly engines: PlanEngine[]; readonly notes: string[] } | Extract<PlanOutcome, { ok: false }>;

/** The group's engines as they would be after `change`. */
function changedEngines(input: PlanInput, change: PlanChange): Changed {
  const { engine } = change;
  const engines = [...input.engines];
  const at = engines.findIndex((c) => c.address === engine);
  const present = engines[at];
  const unknown = {
    ok: false,
    error: 'unknown-engine',
    message: `engine ${engine} is not in service group ${input.service}`,
  } as const;
  const notes: string[] = [];
  switch (change.kind) {
    case 'join': {
      if (change.weight !== undefined) {
        const bad = badWeight(change.weight);
        if (bad !== null) return { ok: false, error: 'bad-weight', message: bad };
      }
      if (present !== undefined && present.state !== 'joining')
        return {
          ok: false,
          error: 'already-member',
          message: `engine ${engine} is already in service group ${input.service} (${present.state})`,
        };
      const weight = joinWeight(input, change, present, notes);
      const drained = input.adminDrained(engine);
      const held = drained ? 'draining' : input.heldBack(engine);
      if (held !== null)
        notes.push(
          `${engine} would join ${held}: ${drained ? 'an admin drain awaits it (undrain it)' : 'its probes or a maintenance window hold it back'}`,
        );
      // Its buckets remembered by the group count first, as in the real change (decide-table.ts, membersOf).
      const joined: PlanEngine = {
        address: engine,
        state: held ?? 'usable',
        weight,
        usableSince: input.now,
        historical: present?.historical,
      };
      if (present !== undefined) engines[at] = joined;
      else engines.push(joined);
      return { ok: true, engines, notes };
    }
    case 'leave':
      if (present === undefined) return unknown;
      engines.splice(at, 1);
      return { ok: true, engines, notes };
    case 'drain':
      if (present === undefined) {
        if (!input.remembers(engine) && !input.adminDrained(engine)) return unknown;
        notes.push(`${engine} is gone: the drain holds it out when it comes back`);
        return { ok: true, engines, notes };
      }
      if (input.adminDrained(engine)) notes.push(`${engine} is drained already`);
      // A drain holds back only an engine that completed the handshake (a joining one stays joining).
      if (present.state === 'usable') engines[at] = { ...present, state: 'draining', usableSince: null };
      return { ok: true, engines, notes };
    case 'weight': {
      if (present === undefined) return unknown;
      const bad = badWeight(change.weight);
      if (bad !== null) return { ok: false, error: 'bad-weight', message: bad };
      if (present.state !== 'usable') notes.push(`${engine} is ${present.state}: the weight counts once it is usable`);
      engines[at] = { ...present, weight: change.weight };
      return { ok: true, engines, notes };
    }
  }
}

/**
 * A joining engine's effective weight, as the group will count it: an admin weight kept for it, else its configured
 * weight, else its Assignment Weight (a registered engine's, or --weight, or the one every usable engine has).
 */
function joinWeight(
  input: PlanInput,
  change: Extract<PlanChange, { kind: 'join' }>,
  present: PlanEngine | undefined,
  notes: string[],
): number {
  const { engine } = change;
  const admin = input.adminWeight(engine);
  const configured = input.config.weights?.[engine];
  const pinned = admin ?? configured;
  if (pinned !== undefined) {
    if (change.weight !== undefined && change.weight !== pinned)
      notes.push(`${engine} counts with the ${admin !== undefined ? 'admin' : 'configured'} weight ${pinned}`);
    return pinned;
  }
  if (present !== undefined) {
    if (change.weight !== undefined && change.weight !== present.weight)
      notes.push(`${engine} is registered with Assignment Weight ${present.weight}: that counts`);
    return present.weight;
  }
  if (change.weight !== undefined) return change.weight;
  const weights = new Set(input.engines.filter((c) => c.state === 'usable').map((c) => c.weight));
  const only = weights.size === 1 ? [...weights][0] : undefined;
  if (only !== undefined) {
    notes.push(`assumed Assignment Weight ${only}, as every usable engine has (give --weight otherwise)`);
    return only;
  }
  notes.push(
    weights.size === 0
      ? `assumed Assignment Weight ${SQUID_DEFAULT_WEIGHT} (Squid's default; give --weight otherwise)`
      : `the usable engines' weights differ: assumed Squid's default ${SQUID_DEFAULT_WEIGHT} (give --weight)`,
  );
  return SQUID_DEFAULT_WEIGHT;
}

function plannedEngines(
  input: PlanInput,
  after: readonly PlanEngine[],
  beforeTable: BucketTable,
  afterTable: BucketTable,
  mask: Plan['mask'],
): PlannedEngine[] {
  const countsBefore = countsByEngine(beforeTable);
  const countsAfter = countsByEngine(afterTable);
  const values = (t: MaskTable | undefined, a: EngineAddress) => t?.engines.filter((e) => e === a).length ?? 0;
  const byAddress = new Map(after.map((c) => [c.address, c]));
  const addresses = new Set([...input.engines.map((c) => c.address), ...byAddress.keys()]);
  return [...addresses].sort(compareSquidOrder).map((address) => {
    const c = byAddress.get(address);
    return {
      address,
      state: c?.state ?? 'gone',
      weight: c?.weight ?? 0,
      bucketsBefore: countsBefore.get(address) ?? 0,
      bucketsAfter: countsAfter.get(address) ?? 0,
      ...(mask !== null
        ? { valuesBefore: values(mask.before, address), valuesAfter: values(mask.after, address) }
        : {}),
    };
  });
}

/** What the table after depends on besides the change. */
function notesFor(input: PlanInput, moved: number): string[] {
  const notes: string[] = [];
  const { config } = input;
  if (input.inRestartGrace)
    notes.push(
      'restart grace: the persisted table is kept (healed onto the engines back) until its engines are back or the grace time ends',
    );
  if (config.authority === 'designated-engine')
    notes.push(
      "authority: designated-engine: once the designated engine assigns, wccpd only heals its table; this plan holds until the designated engine's next REDIRECT_ASSIGN",
    );
  if (config.mode === 'primary-standby' && (config.failbackHoldMs ?? 0) > 0)
    notes.push(
      `primary-standby: a better-ranked engine takes over only after failbackHold (${config.failbackHoldMs} ms) usable; this is the table at once`,
    );
  if (moved > 0 && config.assignment === 'mask')
    notes.push('mask assignment: traffic follows the mask values; the bucket table is kept alongside');
  return notes;
}
