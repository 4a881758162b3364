// Load-aware moves (issue 35, docs/decisions/0004-load-aware-design.md): a window's measured load per bucket -> the
// fewest bucket moves that bring every engine within `tolerance` x its weighted fair share of the load. Pure and
// deterministic: the same table, members, loads and holds give the same moves on every gateway.
//
// Greedy: take the engine with the highest load / share; among its buckets that are not held, and every cooler engine,
// move the one bucket that leaves the pair's worse ratio lowest, if that is lower than the hot engine's ratio now.
// Repeat until every engine is within tolerance, the budget is spent, or no move improves the worst engine. Each move
// strictly lowers the worse ratio of the pair it touches, so the loop ends, and the same loads a window later find
// nothing more to do (no oscillation); a moved bucket is held besides (the caller's `held`).
import type { BucketTable, EngineAddress } from './table.js';
import type { Member } from './member.js';
import { sortedMembers } from './member.js';

export interface LoadOptions {
  /** An engine is within tolerance while its load <= tolerance x its fair share (e.g. 1.15). */
  readonly tolerance: number;
  /** Moves allowed in this decision (what is left of the hour's budget). */
  readonly budget: number;
  /** A bucket moved recently is not moved again by load. */
  readonly held: (bucket: number) => boolean;
}

export interface LoadMove {
  readonly bucket: number;
  readonly from: EngineAddress;
  readonly to: EngineAddress;
  /** The bucket's load in the window. */
  readonly load: number;
}

export interface EngineLoad {
  readonly address: EngineAddress;
  /** Its fair share of the window's load (total x weight / sum of weights); 0 for an engine without a share. */
  readonly share: number;
  readonly before: number;
  readonly after: number;
}

export type LoadStop = 'within-tolerance' | 'budget' | 'no-improvement' | 'no-load';

export interface LoadDecision {
  readonly moves: readonly LoadMove[];
  /** Every member, sorted by address: its load before and after the moves. */
  readonly engines: readonly EngineLoad[];
  /** The window's load over the members' buckets. */
  readonly total: number;
  /** Why the moves stop where they do. */
  readonly stop: LoadStop;
}

/** load / share; an engine without a share has none (0). */
export function loadRatio(e: Pick<EngineLoad, 'share'>, load: number): number {
  return e.share > 0 ? load / e.share : 0;
}

/** A relative margin: a move must lower the worse ratio by more than rounding. */
const EPSILON = 1e-9;

/**
 * The moves (at most `options.budget`) that bring every engine of `members` within tolerance of its share of `load`
 * (256 entries, one per bucket, non-negative), from the buckets of `table`. Members with weight 0 have no share
 * while another has weight (as in balance.ts); buckets of non-members are neither counted nor moved.
 */
export function loadMoves(
  table: Pick<BucketTable, 'buckets'>,
  members: readonly Member[],
  load: readonly number[],
  options: LoadOptions,
): LoadDecision {
  const sorted = sortedMembers(members);
  const weighted = sorted.some((m) => m.weight > 0);
  const weightOf = (m: Member): number => (weighted ? m.weight : 1);
  const weightSum = sorted.reduce((s, m) => s + weightOf(m), 0);
  const index = new Map(sorted.map((m, i) => [m.address, i]));
  const owner = table.buckets.map((e) => (e !== null && index.has(e) ? e : null));
  const loads = sorted.map(() => 0);
  owner.forEach((e, b) => {
    if (e !== null) loads[index.get(e) as number]! += Math.max(0, load[b] ?? 0);
  });
  const total = loads.reduce((s, l) => s + l, 0);
  const shares = sorted.map((m) => (weightSum > 0 ? (total * weightOf(m)) / weightSum : 0));
  const before = [...loads];
  const moves: LoadMove[] = [];
  const ratio = (i: number): number => ((shares[i] ?? 0) > 0 ? (loads[i] ?? 0) / (shares[i] ?? 1) : 0);
  const result = (stop: LoadStop): LoadDecision => ({
    moves,
    total,
    stop,
    engines: sorted.map((m, i) => ({
      address: m.address,
      share: shares[i] ?? 0,
      before: before[i] ?? 0,
      after: loads[i] ?? 0,
    })),
  });
  if (total <= 0 || sorted.length < 2) return result('no-load');
  const moved = new Set<number>();
  for (;;) {
    let hot = -1;
    sorted.forEach((_, i) => {
      if ((shares[i] ?? 0) > 0 && (hot < 0 || ratio(i) > ratio(hot))) hot = i;
    });
    const hotRatio = ratio(hot);
    if (hotRatio <= options.tolerance) return result('within-tolerance');
    if (moves.length >= options.budget) return result('budget');
    const hotAddress = sorted[hot]!.address;
    let best: { bucket: number; to: number; worse: number } | null = null;
    for (let to = 0; to < sorted.length; to++) {
      const coolShare = shares[to] ?? 0;
      if (to === hot || coolShare <= 0) continue;
      for (let b = 0; b < owner.length; b++) {
        const x = load[b] ?? 0;
        if (owner[b] !== hotAddress || x <= 0 || moved.has(b) || options.held(b)) continue;
        const hotAfter = ((loads[hot] ?? 0) - x) / (shares[hot] ?? 1);
        const coolAfter = ((loads[to] ?? 0) + x) / coolShare;
        const worse = Math.max(hotAfter, coolAfter);
        if (worse >= hotRatio * (1 - EPSILON)) continue;
        // The lowest worse ratio; ties: the lower target address, then the lower bucket (the loops' order).
        if (best === null || worse < best.worse * (1 - EPSILON)) best = { bucket: b, to, worse };
      }
    }
    if (best === null) return result('no-improvement');
    const x = load[best.bucket] ?? 0;
    const toAddress = sorted[best.to]!.address;
    moves.push({ bucket: best.bucket, from: hotAddress, to: toAddress, load: x });
    moved.add(best.bucket);
    owner[best.bucket] = toAddress;
    loads[hot] = (loads[hot] ?? 0) - x;
    loads[best.to] = (loads[best.to] ?? 0) + x;
  }
}

/** `table`'s buckets with `moves` made. */
export function withMoves(
  buckets: ReadonlyArray<EngineAddress | null>,
  moves: readonly LoadMove[],
): (EngineAddress | null)[] {
  const next = [...buckets];
  for (const m of moves) next[m.bucket] = m.to;
  return next;
}

/**
 * What keeps load moves through later table changes (docs/decisions/0004, point 4). balance: per-engine count offsets
 * (sum 0 when made) added to its targets; consistent and round-robin (history-free): the moved buckets pinned to their
 * new engine while it is a member.
 */
export interface LoadBias {
  readonly offsets: ReadonlyMap<EngineAddress, number>;
  readonly pins: ReadonlyMap<number, EngineAddress>;
}

export const NO_LOAD_BIAS: LoadBias = { offsets: new Map(), pins: new Map() };

/** The bias after `moves`: offsets counted per engine, each bucket pinned to its new engine. */
export function biasAfter(bias: LoadBias, moves: readonly LoadMove[]): LoadBias {
  const offsets = new Map(bias.offsets);
  const pins = new Map(bias.pins);
  for (const m of moves) {
    offsets.set(m.from, (offsets.get(m.from) ?? 0) - 1);
    offsets.set(m.to, (offsets.get(m.to) ?? 0) + 1);
    pins.set(m.bucket, m.to);
  }
  for (const [a, n] of offsets) if (n === 0) offsets.delete(a);
  return { offsets, pins };
}

/** The bias of the engines still members (a membership change drops the rest: the next window decides again). */
export function biasFor(bias: LoadBias, members: ReadonlySet<EngineAddress>): LoadBias {
  const offsets = new Map([...bias.offsets].filter(([a]) => members.has(a)));
  const pins = new Map([...bias.pins].filter(([, a]) => members.has(a)));
  return offsets.size === bias.offsets.size && pins.size === bias.pins.size ? bias : { offsets, pins };
}
