// Property tests of balance mode over random sequences of adds, returns, removes and weight changes (up to 32 engines).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { assignBuckets, type Member } from '../../src/buckets/assign.js';
import { emptyTable, type BucketTable, type EngineAddress } from '../../src/buckets/table.js';

const POOL = Array.from({ length: 40 }, (_, i) => (i < 20 ? `192.0.2.${10 + i * 7}` : `198.51.100.${i * 3}`));

type Op =
  | { kind: 'add'; pick: number; weight: number }
  | { kind: 'remove'; pick: number }
  | { kind: 'weight'; pick: number; weight: number };

const weightArb = fc.oneof(fc.constantFrom(0, 1, 1, 1, 2, 3, 10), fc.integer({ min: 0, max: 65535 }));
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('add' as const), pick: fc.nat(), weight: weightArb }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('remove' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('weight' as const), pick: fc.nat(), weight: weightArb }) },
);

function held(table: BucketTable, present: ReadonlySet<string>): Map<string, number> {
  const m = new Map<string, number>();
  for (const e of table.buckets) if (e !== null && present.has(e)) m.set(e, (m.get(e) ?? 0) + 1);
  return m;
}

// The least number of buckets any table within one bucket of the weighted shares can move, computed independently:
// every engine below floor must gain; of the R remainder buckets, each one given to an engine that does not already
// hold its ceiling costs one more.
function minimumMoves(prev: BucketTable, members: readonly Member[]): number {
  const present = new Set(members.map((m) => m.address));
  const h = held(prev, present);
  const anyWeight = members.some((m) => m.weight > 0);
  const active = members.filter((m) => !anyWeight || m.weight > 0);
  const w = (m: Member): number => (anyWeight ? m.weight : 1);
  const total = active.reduce((s, m) => s + w(m), 0);
  let floors = 0;
  let moves = 0;
  let freeCeilings = 0;
  for (const m of active) {
    const floor = Math.floor((256 * w(m)) / total);
    const fractional = (256 * w(m)) % total !== 0;
    floors += floor;
    const have = h.get(m.address) ?? 0;
    moves += Math.max(0, floor - have);
    if (fractional && have >= floor + 1) freeCeilings++;
  }
  return moves + Math.max(0, 256 - floors - freeCeilings);
}

function shuffle<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let s = seed >>> 0 || 1;
  for (let i = out.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

function checkShares(next: BucketTable, members: readonly Member[]): void {
  const counts = held(next, new Set(members.map((m) => m.address)));
  if (members.length === 0) {
    assert.ok(
      next.buckets.every((e) => e === null),
      'no members: every bucket unassigned',
    );
    return;
  }
  assert.ok(
    next.buckets.every((e) => e !== null),
    'every bucket assigned',
  );
  const anyWeight = members.some((m) => m.weight > 0);
  const w = (m: Member): number => (anyWeight ? m.weight : 1);
  const total = members.reduce((s, m) => s + w(m), 0);
  for (const m of members) {
    const c = counts.get(m.address) ?? 0;
    // |c - 256 w / W| < 1, in integers
    assert.ok(Math.abs(c * total - 256 * w(m)) < total, `${m.address} holds ${c}, share ${(256 * w(m)) / total}`);
  }
}

test('balance: shares, minimal moves, order independence and sticky return over random sequences', () => {
  let steps = 0;
  let returns = 0;
  let largest = 0;
  fc.assert(
    fc.property(fc.array(fc.tuple(opArb, fc.nat()), { minLength: 20, maxLength: 100 }), (ops) => {
      let table: BucketTable = emptyTable();
      let members: Member[] = [];
      const memory = new Map<EngineAddress, number[]>(); // what an engine held when it left
      for (const [op, shuffleSeed] of ops) {
        let returning: Member | undefined;
        if (op.kind === 'add') {
          const free = POOL.filter((a) => !members.some((m) => m.address === a));
          if (members.length >= 32 || free.length === 0) continue;
          const address = free[op.pick % free.length] as string;
          const history = memory.get(address);
          returning = { address, weight: op.weight, priority: 0, ...(history ? { history } : {}) };
          members = [...members, returning];
        } else if (op.kind === 'remove') {
          if (members.length === 0) continue;
          const gone = members[op.pick % members.length] as Member;
          memory.set(
            gone.address,
            table.buckets.flatMap((e, i) => (e === gone.address ? [i] : [])),
          );
          members = members.filter((m) => m !== gone);
        } else {
          if (members.length === 0) continue;
          const i = op.pick % members.length;
          members = members.map((m, j) => (j === i ? { ...m, weight: op.weight } : m));
        }
        const next = assignBuckets(table, members, { mode: 'balance' });
        steps++;
        largest = Math.max(largest, members.length);
        checkShares(next, members);
        const moved = next.buckets.filter((e, i) => e !== table.buckets[i]).length;
        if (members.length > 0) assert.equal(moved, minimumMoves(table, members), 'moves equal the minimum');
        assert.equal(next.changeNumber, table.changeNumber + (moved > 0 ? 1 : 0));
        assert.deepEqual(assignBuckets(table, shuffle(members, shuffleSeed), { mode: 'balance' }), next);
        if (returning?.history !== undefined) {
          returns++;
          // The most of its history it can regain without an extra move: historical buckets that are free, plus, per
          // donor, as many as that donor must give up anyway; capped by what it needs.
          const present = new Set(members.map((m) => m.address));
          const hist = new Set(returning.history);
          const after = held(next, present);
          const before = held(table, present);
          let reachable = 0;
          table.buckets.forEach((e, i) => {
            if (hist.has(i) && (e === null || !present.has(e))) reachable++;
          });
          for (const [donor, had] of before) {
            const excess = had - (after.get(donor) ?? 0);
            if (excess <= 0) continue;
            const histHeld = table.buckets.filter((e, i) => e === donor && hist.has(i)).length;
            reachable += Math.min(excess, histHeld);
          }
          const target = after.get(returning.address) ?? 0;
          const regained = returning.history.filter((b) => next.buckets[b] === returning?.address).length;
          assert.equal(regained, Math.min(target, reachable), `${returning.address} regains its history`);
        }
        table = next;
      }
    }),
    { seed: 424242, numRuns: 200 },
  );
  assert.ok(steps > 3000, `exercised ${steps} steps`);
  assert.ok(returns > 100, `exercised ${returns} returns`);
  assert.ok(largest >= 25, `reached ${largest} engines`);
});
