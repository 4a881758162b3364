// Healing: the buckets of engines that are no longer usable go to the survivors, and nothing else moves.
//
//   for each bucket whose engine is gone (or that is unassigned):
//     give it to the surviving engine with the fewest buckets (the first such in `usable` order on a tie)
//
// Used where wccpd does not choose the table itself but must not leave traffic on a dead engine: under
// designated-engine authority until the designated engine sends its next REDIRECT_ASSIGN, and while a persisted table
// is kept through the restart grace time (docs/buckets.md). Pure and deterministic.
import { nextTable, type BucketTable, type EngineAddress } from './table.js';

/** The table with every bucket on a usable engine; the change number advances only when a bucket moved. */
export function healTable(table: BucketTable, usable: readonly EngineAddress[]): BucketTable {
  return nextTable(table, healSlots(table.buckets, usable));
}

/** The same for any slots (buckets, or a mask service's values): each slot of a gone owner to the fewest-holding. */
export function healSlots(
  owners: ReadonlyArray<EngineAddress | null>,
  usable: readonly EngineAddress[],
): (EngineAddress | null)[] {
  const alive = new Set(usable);
  const counts = new Map<EngineAddress, number>(usable.map((a) => [a, 0]));
  const slots = owners.map((owner) => (owner !== null && alive.has(owner) ? owner : null));
  for (const owner of slots) if (owner !== null) counts.set(owner, (counts.get(owner) ?? 0) + 1);
  if (usable.length > 0) {
    for (let i = 0; i < slots.length; i++) {
      if (slots[i] !== null) continue;
      let pick = usable[0] as EngineAddress;
      for (const a of usable) if ((counts.get(a) ?? 0) < (counts.get(pick) ?? 0)) pick = a;
      slots[i] = pick;
      counts.set(pick, (counts.get(pick) ?? 0) + 1);
    }
  }
  return slots;
}
