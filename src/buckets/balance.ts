// Weighted, minimal-movement distribution of N slots (256 buckets, or 64 mask values) over engines.
//
// 1. Targets: each active engine gets floor(N * w / W) slots; the R slots left over go, one each, to engines with a
//    fractional share. An engine that already holds its ceiling keeps a slot it would otherwise give up, so those come
//    first (then larger fraction, then lower address): this choice maximises the slots that stay where they are.
// 2. Moves: an engine above its target releases exactly its excess; an engine below takes exactly its shortfall from
//    the free slots (unassigned, or held by engines that left) and the released ones. Nothing else moves, so the
//    number moved is sum(max(0, target - held)), the least any assignment within one slot of the shares can do.
// 3. History: among the slots that move anyway, an engine that needs slots takes back the ones it held before.
import type { EngineAddress } from './table.js';
import type { Member } from './member.js';

interface Plan {
  readonly member: Member;
  readonly target: number;
  held: number;
}

/** Per-engine targets for N slots, given how many each member holds now. Members must be sorted by address. */
export function targetsFor(
  slotCount: number,
  members: readonly Member[],
  held: ReadonlyMap<EngineAddress, number>,
): Map<EngineAddress, number> {
  const weighted = members.filter((m) => m.weight > 0);
  // No weighted engine left: the standbys share equally.
  const active = weighted.length > 0 ? weighted : members;
  const weightOf = (m: Member): number => (weighted.length > 0 ? m.weight : 1);
  const total = active.reduce((s, m) => s + weightOf(m), 0);
  const targets = new Map<EngineAddress, number>(members.map((m) => [m.address, 0]));
  if (active.length === 0) return targets;
  let left = slotCount;
  const fractional: { address: EngineAddress; floor: number; remainder: number; order: number }[] = [];
  active.forEach((m, order) => {
    const exact = slotCount * weightOf(m);
    const floor = Math.floor(exact / total);
    const remainder = exact - floor * total;
    targets.set(m.address, floor);
    left -= floor;
    if (remainder > 0) fractional.push({ address: m.address, floor, remainder, order });
  });
  const keeps = (f: { address: EngineAddress; floor: number }): number =>
    (held.get(f.address) ?? 0) > f.floor ? 1 : 0;
  fractional.sort((a, b) => keeps(b) - keeps(a) || b.remainder - a.remainder || a.order - b.order);
  for (const f of fractional.slice(0, left)) targets.set(f.address, f.floor + 1);
  return targets;
}

/**
 * The next owner of every slot. `previous` holds the current owners; owners that are not members are treated as
 * gone (their slots are free). Members must be sorted by address (see sortedMembers).
 */
export function balanceSlots(
  previous: ReadonlyArray<EngineAddress | null>,
  members: readonly Member[],
  offsets?: ReadonlyMap<EngineAddress, number>,
): (EngineAddress | null)[] {
  const slotCount = previous.length;
  if (members.length === 0) return new Array<EngineAddress | null>(slotCount).fill(null);
  const byAddress = new Map<EngineAddress, Plan>();
  const held = new Map<EngineAddress, number>();
  const present = new Set(members.map((m) => m.address));
  const next = previous.map((owner) => (owner !== null && present.has(owner) ? owner : null));
  for (const owner of next) if (owner !== null) held.set(owner, (held.get(owner) ?? 0) + 1);
  const targets =
    offsets === undefined || offsets.size === 0
      ? targetsFor(slotCount, members, held)
      : offsetTargets(slotCount, members, held, offsets);
  const plans: Plan[] = members.map((m) => ({
    member: m,
    target: targets.get(m.address) ?? 0,
    held: held.get(m.address) ?? 0,
  }));
  for (const p of plans) byAddress.set(p.member.address, p);
  const needOf = (p: Plan): number => p.target - p.held;

  const free = new Set<number>();
  next.forEach((owner, i) => {
    if (owner === null) free.add(i);
  });
  const give = (slot: number, to: Plan): void => {
    const from = next[slot] ?? null;
    if (from !== null) {
      const donor = byAddress.get(from);
      if (donor !== undefined) donor.held -= 1;
    }
    next[slot] = to.member.address;
    to.held += 1;
    free.delete(slot);
  };

  const receivers = plans.filter((p) => needOf(p) > 0);
  // History, first from the free slots ...
  for (const r of receivers) {
    for (const slot of r.member.history ?? []) {
      if (needOf(r) <= 0) break;
      if (free.has(slot)) give(slot, r);
    }
  }
  // ... then from what donors must release anyway.
  for (const d of plans) {
    if (needOf(d) >= 0) continue;
    for (let slot = 0; slot < slotCount && needOf(d) < 0; slot++) {
      if (next[slot] !== d.member.address) continue;
      const r = receivers.find((x) => needOf(x) > 0 && (x.member.history?.includes(slot) ?? false));
      if (r !== undefined) give(slot, r);
    }
  }
  // Donors release the rest of their excess, highest slot first.
  const released: number[] = [];
  for (const d of plans) {
    let excess = -needOf(d);
    for (let slot = slotCount - 1; slot >= 0 && excess > 0; slot--) {
      if (next[slot] === d.member.address) {
        released.push(slot);
        excess -= 1;
      }
    }
  }
  // Receivers fill up, by address: free (unassigned) slots first, then released ones.
  const pool = [...[...free].sort((a, b) => a - b), ...released];
  let at = 0;
  for (const r of receivers) {
    while (needOf(r) > 0 && at < pool.length) give(pool[at++] as number, r);
  }
  return next;
}

/**
 * Load-aware assignment's targets (buckets/load.ts, LoadBias): the weighted targets, each moved by its engine's count
 * offset. The weighted targets are chosen as if the offsets were not held (so a load move does not shift which engines
 * round up); offsets that no longer sum to 0 (an engine with one left) are evened out, the largest first, so the
 * targets still sum to `slotCount`. Standbys (weight 0 beside weighted engines) take no offset.
 */
function offsetTargets(
  slotCount: number,
  members: readonly Member[],
  held: ReadonlyMap<EngineAddress, number>,
  offsets: ReadonlyMap<EngineAddress, number>,
): Map<EngineAddress, number> {
  const unbiased = new Map([...held].map(([a, n]) => [a, n - (offsets.get(a) ?? 0)]));
  const base = targetsFor(slotCount, members, unbiased);
  const weighted = members.some((m) => m.weight > 0);
  const active = members.filter((m) => !weighted || m.weight > 0);
  const targets = new Map(base);
  for (const m of active)
    targets.set(m.address, Math.max(0, (base.get(m.address) ?? 0) + (offsets.get(m.address) ?? 0)));
  const bias = (m: Member): number => (targets.get(m.address) ?? 0) - (base.get(m.address) ?? 0);
  let over = [...targets.values()].reduce((s, n) => s + n, 0) - slotCount;
  while (over !== 0 && active.length > 0) {
    // Too many: the most raised (with a slot to give) gives one; too few: the most lowered takes one.
    const pick =
      over > 0
        ? active.filter((m) => (targets.get(m.address) ?? 0) > 0).reduce((a, m) => (bias(m) > bias(a) ? m : a))
        : active.reduce((a, m) => (bias(m) < bias(a) ? m : a));
    targets.set(pick.address, (targets.get(pick.address) ?? 0) - Math.sign(over));
    over -= Math.sign(over);
  }
  return targets;
}
