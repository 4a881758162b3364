// Load-aware moves (src/buckets/load.ts): skewed loads brought within tolerance with the fewest moves, held buckets
// never moved, the budget kept, no oscillation over windows of the same load, weights and non-members respected; and
// what keeps the moves through later table changes (balance's count offsets, consistent's pinned buckets).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { biasAfter, biasFor, loadMoves, loadRatio, withMoves } from '../../src/buckets/load.js';
import type { LoadOptions } from '../../src/buckets/load.js';
import { assignBuckets } from '../../src/buckets/assign.js';
import type { Member } from '../../src/buckets/member.js';
import { emptyTable, nextTable } from '../../src/buckets/table.js';
import type { BucketTable } from '../../src/buckets/table.js';

const E = ['192.0.2.11', '192.0.2.12', '192.0.2.13', '192.0.2.14'];
const member = (address: string, weight = 1): Member => ({ address, weight, priority: 0 });
const MEMBERS = E.map((a) => member(a));
const free = (budget = 32): LoadOptions => ({ tolerance: 1.15, budget, held: () => false });

function table(members: readonly Member[], mode: 'balance' | 'consistent' = 'balance'): BucketTable {
  return assignBuckets(emptyTable(), members, { mode });
}

/** 10 per bucket, and `extra` more on the given buckets. */
function loads(extra: Record<number, number> = {}): number[] {
  return Array.from({ length: 256 }, (_, b) => 10 + (extra[b] ?? 0));
}

function ratios(t: BucketTable, members: readonly Member[], load: readonly number[]): Map<string, number> {
  const d = loadMoves(t, members, load, { ...free(), budget: 0 });
  return new Map(d.engines.map((e) => [e.address, loadRatio(e, e.before)]));
}

const worst = (r: Map<string, number>): number => Math.max(...r.values());

test('a hot engine sheds the one big bucket that brings it within tolerance, not many small ones', () => {
  const t = table(MEMBERS);
  const [b0, b1] = t.buckets.flatMap((e, b) => (e === E[0] ? [b] : [])) as [number, number];
  const load = loads({ [b0]: 100, [b1]: 100 });
  assert.ok(worst(ratios(t, MEMBERS, load)) > 1.2);
  const d = loadMoves(t, MEMBERS, load, free());
  assert.equal(d.moves.length, 1);
  assert.ok([b0, b1].includes(d.moves[0]!.bucket));
  assert.equal(d.moves[0]!.from, E[0]);
  assert.equal(d.stop, 'within-tolerance');
  const after = nextTable(t, withMoves(t.buckets, d.moves));
  assert.ok(worst(ratios(after, MEMBERS, load)) <= 1.15);
  for (const e of d.engines) assert.ok(loadRatio(e, e.after) <= 1.15, `${e.address} within tolerance`);
});

test('a Zipf-like skew is brought within tolerance; a hold keeps buckets where they are; the budget stops the moves', () => {
  const t = table(MEMBERS);
  const extra: Record<number, number> = {};
  for (let rank = 1; rank <= 40; rank++) extra[(rank * 37) % 256] = Math.round(2000 / rank);
  const load = loads(extra);
  assert.ok(worst(ratios(t, MEMBERS, load)) >= 1.3, 'skewed to start with');
  const d = loadMoves(t, MEMBERS, load, free());
  const after = nextTable(t, withMoves(t.buckets, d.moves));
  assert.ok(worst(ratios(after, MEMBERS, load)) <= 1.15, `within tolerance after ${d.moves.length} moves`);
  assert.ok(d.moves.length <= 32);

  const held = new Set(d.moves.map((m) => m.bucket));
  const d2 = loadMoves(t, MEMBERS, load, { ...free(), held: (b) => held.has(b) });
  for (const m of d2.moves) assert.ok(!held.has(m.bucket), `held bucket ${m.bucket} not moved`);

  const d3 = loadMoves(t, MEMBERS, load, free(1));
  assert.equal(d3.moves.length, 1);
  assert.equal(d3.stop, 'budget');
});

test('the same load window after window: no bucket moves twice, and the moves end (no oscillation)', () => {
  // One bucket above any share (it can only be made less bad), and a few hot ones.
  const cases = [loads({ 5: 3000 }), loads({ 1: 500, 2: 400, 3: 300, 77: 200, 200: 100 })];
  for (const load of cases) {
    let t = table(MEMBERS);
    const times = new Map<number, number>();
    for (let w = 0; w < 100; w++) {
      const d = loadMoves(t, MEMBERS, load, free(4));
      if (w >= 80) assert.equal(d.moves.length, 0, `window ${w} moves nothing`);
      for (const m of d.moves) times.set(m.bucket, (times.get(m.bucket) ?? 0) + 1);
      t = nextTable(t, withMoves(t.buckets, d.moves));
    }
    for (const [b, n] of times) assert.equal(n, 1, `bucket ${b} moved once`);
  }
});

test('weights define the fair shares: an engine of weight 2 carries twice the load without moving', () => {
  const members = [member(E[0]!, 2), member(E[1]!), member(E[2]!), member(E[3]!)];
  const t = table(members);
  const d = loadMoves(t, members, loads(), free());
  assert.equal(d.moves.length, 0);
  assert.equal(d.stop, 'within-tolerance');
  const share = d.engines.find((e) => e.address === E[0])!.share;
  assert.equal(Math.round((share / d.total) * 100), 40);
});

test('buckets of an engine that is not a member (drained, gone) are neither counted nor a target', () => {
  const t = table(MEMBERS);
  const members = MEMBERS.slice(0, 3);
  const hot = t.buckets.findIndex((e) => e === E[0]);
  const d = loadMoves(t, members, loads({ [hot]: 500 }), free());
  for (const m of d.moves) {
    assert.notEqual(m.to, E[3]);
    assert.notEqual(m.from, E[3]);
  }
  assert.equal(d.total, 10 * t.buckets.filter((e) => e !== E[3]).length + 500);
});

test('balance keeps load moves through a later change: the count offsets, also when an engine leaves', () => {
  const t = table(MEMBERS);
  const hot = t.buckets.flatMap((e, b) => (e === E[0] ? [b] : [])).slice(0, 3);
  const load = loads(Object.fromEntries(hot.map((b) => [b, 150])));
  const d = loadMoves(t, MEMBERS, load, free());
  assert.ok(d.moves.length > 0);
  const moved = nextTable(t, withMoves(t.buckets, d.moves));
  const bias = biasAfter({ offsets: new Map(), pins: new Map() }, d.moves);
  // The same members: nothing moves back.
  assert.deepEqual(assignBuckets(moved, MEMBERS, { mode: 'balance', bias }).buckets, moved.buckets);
  // Without the offsets balance would undo them.
  assert.notDeepEqual(assignBuckets(moved, MEMBERS, { mode: 'balance' }).buckets, moved.buckets);
  // An engine that took no load move leaves: the moved buckets stay where the load put them.
  const stay = E.filter((a) => !d.moves.some((m) => m.to === a || m.from === a));
  const leaving = stay[0] ?? E[3]!;
  const left = MEMBERS.filter((m) => m.address !== leaving);
  const after = assignBuckets(moved, left, {
    mode: 'balance',
    bias: biasFor(bias, new Set(left.map((m) => m.address))),
  });
  for (const m of d.moves) if (m.to !== leaving) assert.equal(after.buckets[m.bucket], m.to, `bucket ${m.bucket} kept`);
  assert.equal(after.buckets.filter((e) => e === null).length, 0);
});

test('consistent keeps load moves as pinned buckets; a pin to an engine gone is dropped', () => {
  const t = table(MEMBERS, 'consistent');
  const hot = t.buckets.findIndex((e) => e === E[0]);
  const d = loadMoves(t, MEMBERS, loads({ [hot]: 300 }), free());
  assert.ok(d.moves.length > 0);
  const bias = biasAfter({ offsets: new Map(), pins: new Map() }, d.moves);
  const moved = withMoves(t.buckets, d.moves);
  assert.deepEqual(assignBuckets(t, MEMBERS, { mode: 'consistent', bias }).buckets, moved);
  const to = d.moves[0]!.to;
  const left = MEMBERS.filter((m) => m.address !== to);
  const after = assignBuckets(t, left, {
    mode: 'consistent',
    bias: biasFor(bias, new Set(left.map((m) => m.address))),
  });
  assert.deepEqual(after.buckets, assignBuckets(t, left, { mode: 'consistent' }).buckets);
});
