// History-free assignment for several gateways: the table depends only on the members and their weights, so every
// gateway that sees the same engines computes the same table, whatever order it saw them join and leave in.
//
// Rendezvous hashing with per-engine capacity:
// 1. Capacities: each engine's weighted share, floor or ceiling (targetsFor with nothing held: the ceilings go to the
//    larger fractions, then lower addresses), so every engine is within one slot of its share.
// 2. Scores: every (slot, engine) pair gets a 32-bit score from integer mixing of the slot number and the engine's
//    address. Pure 32-bit integer arithmetic: the same on every machine and in every JavaScript engine.
// 3. Matching: pairs in descending score order (ties: lower address, then lower slot); a pair is taken when its slot
//    is still free and its engine below capacity. This is the unique stable matching between slots and engines under
//    these scores, so it depends on the set of members only, never on their order or on any earlier table.
import type { EngineAddress } from './table.js';
import type { Member } from './member.js';
import { targetsFor } from './balance.js';
import { parseIpv4 } from './ipv4.js';

/** murmur3's 32-bit finaliser: every input bit affects every output bit. */
function mix32(x: number): number {
  let h = x >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85eb_ca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2_ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * The rendezvous score of an engine for a slot. Part of the contract between gateways: two wccpd versions that
 * computed different scores would publish different tables, so a change here is a breaking change (see
 * docs/buckets.md).
 */
export function rendezvousScore(slot: number, engine: EngineAddress): number {
  return scoreOf(slot, mix32(parseIpv4(engine)));
}

function scoreOf(slot: number, engineMix: number): number {
  return mix32(engineMix ^ Math.imul(slot + 1, 0x9e37_79b1));
}

/** The owner of every slot, from the members alone. Members must be sorted by address (see sortedMembers). */
export function consistentSlots(slotCount: number, members: readonly Member[]): (EngineAddress | null)[] {
  const owners = new Array<EngineAddress | null>(slotCount).fill(null);
  if (members.length === 0) return owners;
  const targets = targetsFor(slotCount, members, new Map());
  const capacity = members.map((m) => targets.get(m.address) ?? 0);
  const pairs = members.length * slotCount;
  // One number per pair that sorts them: score * pairs + (pairs - 1 - i), where i = engine index * slotCount + slot
  // (members are sorted by address). Below 2^32 * 2^17, so exact in a double; sorted ascending, read from the end:
  // higher score first, then lower address, then lower slot.
  const keys = new Float64Array(pairs);
  members.forEach((m, e) => {
    const engineMix = mix32(parseIpv4(m.address));
    for (let slot = 0; slot < slotCount; slot++) {
      const i = e * slotCount + slot;
      keys[i] = scoreOf(slot, engineMix) * pairs + (pairs - 1 - i);
    }
  });
  keys.sort();
  let left = capacity.reduce((s, c) => s + c, 0);
  for (let k = pairs - 1; k >= 0 && left > 0; k--) {
    const i = pairs - 1 - ((keys[k] ?? 0) % pairs);
    const e = Math.floor(i / slotCount);
    const slot = i - e * slotCount;
    if (owners[slot] !== null || (capacity[e] ?? 0) === 0) continue;
    owners[slot] = members[e]?.address ?? null;
    capacity[e] = (capacity[e] ?? 0) - 1;
    left -= 1;
  }
  return owners;
}
