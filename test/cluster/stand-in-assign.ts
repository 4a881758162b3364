// A minimal-movement equal-share assignment, standing in for src/buckets assignBuckets until it lands.
import type { BucketTable } from '../../src/buckets/table.js';
import type { AssignFn } from '../../src/cluster/index.js';

export const standInAssign: AssignFn = (previous: BucketTable, members) => {
  const names = members.filter((m) => m.weight > 0).map((m) => m.address).sort();
  const buckets = previous.buckets.map((b) => (b !== null && names.includes(b) ? b : null));
  const counts = new Map(names.map((n) => [n, buckets.filter((b) => b === n).length]));
  const target = (i: number) => Math.floor(256 / names.length) + (i < 256 % names.length ? 1 : 0);
  names.forEach((n, i) => {
    let excess = (counts.get(n) ?? 0) - target(i);
    for (let b = 255; b >= 0 && excess > 0; b--) if (buckets[b] === n) { buckets[b] = null; excess--; }
  });
  names.forEach((n, i) => {
    let need = target(i) - buckets.filter((b) => b === n).length;
    for (let b = 0; b < 256 && need > 0; b++) if (buckets[b] === null) { buckets[b] = n; need--; }
  });
  const changed = buckets.some((b, i) => b !== previous.buckets[i]);
  return { changeNumber: changed ? previous.changeNumber + 1 : previous.changeNumber, buckets };
};
