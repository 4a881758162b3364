// The appliance's bucket assignment: previous table + usable members -> next table. Pure and deterministic.
import type { BucketTable, EngineAddress } from './table.js';
import { BUCKET_COUNT, nextTable } from './table.js';
import type { Member } from './member.js';
import { sortedMembers } from './member.js';
import { balanceSlots } from './balance.js';
import { consistentSlots } from './consistent.js';
import { squidSortKey } from './ipv4.js';
import type { AssignmentMode } from '../vocabulary.js';
import type { LoadBias } from './load.js';

export type { Member } from './member.js';

export type { AssignmentMode } from '../vocabulary.js';

export interface AssignOptions {
  readonly mode: AssignmentMode;
  /** The caller's clock (ms), for primary-standby failback; without it a higher-priority engine takes over at once. */
  readonly now?: number;
  /** primary-standby: a returning higher-priority engine takes over only after being usable this long (ms). */
  readonly failbackHoldMs?: number;
  /** Load-aware assignment: what keeps its moves (balance: count offsets; consistent, round-robin: pinned buckets). */
  readonly bias?: LoadBias;
}

/**
 * The next table for a service group. Its change number is the previous one + 1 when any bucket changed (uint32,
 * wrapping), else the previous one. The order of `members` does not matter. Throws BucketsError on bad members.
 */
export function assignBuckets(previous: BucketTable, members: readonly Member[], options: AssignOptions): BucketTable {
  return nextTable(previous, bucketsFor(previous, sortedMembers(members), options));
}

function bucketsFor(
  previous: BucketTable,
  members: readonly Member[],
  options: AssignOptions,
): (EngineAddress | null)[] {
  switch (options.mode) {
    case 'balance':
      return balanceSlots(previous.buckets, members, options.bias?.offsets);
    case 'consistent':
      return pinned(consistentSlots(BUCKET_COUNT, members), members, options.bias);
    case 'primary-standby': {
      const primary = primaryFor(previous.buckets, members, options);
      return new Array<EngineAddress | null>(BUCKET_COUNT).fill(primary);
    }
    case 'round-robin':
      return pinned(roundRobin(members.map((m) => m.address)), members, options.bias);
  }
}

/** A history-free table with load-aware assignment's pinned buckets on their engines (those still members). */
function pinned(
  buckets: (EngineAddress | null)[],
  members: readonly Member[],
  bias: LoadBias | undefined,
): (EngineAddress | null)[] {
  if (bias === undefined || bias.pins.size === 0) return buckets;
  const present = new Set(members.map((m) => m.address));
  for (const [bucket, engine] of bias.pins)
    if (present.has(engine) && bucket < buckets.length) buckets[bucket] = engine;
  return buckets;
}

/** Rank for primary-standby: higher priority first, then lower address (members arrive sorted by address). */
function ranked(members: readonly Member[]): Member[] {
  return [...members].sort((a, b) => b.priority - a.priority);
}

/**
 * The engine that serves every bucket (or mask value) in primary-standby mode: the best-ranked member, except that the
 * engine
 * holding the buckets now keeps them until a better-ranked one has been usable for failbackHoldMs.
 */
export function primaryFor(
  previous: ReadonlyArray<EngineAddress | null>,
  members: readonly Member[],
  options: AssignOptions,
): EngineAddress | null {
  const order = ranked(sortedMembers(members));
  const best = order[0];
  if (best === undefined) return null;
  const hold = options.failbackHoldMs ?? 0;
  const settled = (m: Member): boolean =>
    options.now === undefined || m.usableSince === undefined || m.usableSince + hold <= options.now;
  const holder = currentHolder(previous, order);
  if (holder === undefined) {
    // Failover (or first assignment): someone must serve now; prefer an engine that has settled.
    return (order.find(settled) ?? best).address;
  }
  const better = order.slice(0, order.indexOf(holder)).find(settled);
  return (better ?? holder).address;
}

// The member holding most buckets now (ties: the better ranked), if any.
function currentHolder(previous: ReadonlyArray<EngineAddress | null>, order: readonly Member[]): Member | undefined {
  let holder: Member | undefined;
  let most = 0;
  for (const m of order) {
    const n = previous.reduce((c, e) => c + (e === m.address ? 1 : 0), 0);
    if (n > most) {
      holder = m;
      most = n;
    }
  }
  return holder;
}

/**
 * Squid's designated-cache assignment (wccp2AssignBuckets with equal weights; ATS round_robin_assign): engines sorted
 * as Squid sorts them (raw s_addr as a little-endian integer: last octet most significant), bucket i -> engine i % N.
 */
export function roundRobin(engines: readonly EngineAddress[], slotCount = BUCKET_COUNT): (EngineAddress | null)[] {
  const order = [...engines].sort((a, b) => squidSortKey(a) - squidSortKey(b));
  return Array.from({ length: slotCount }, (_, i) => order[i % order.length] ?? null);
}
