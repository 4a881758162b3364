import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assignBuckets, type Member } from '../../src/buckets/assign.js';
import { BucketsError } from '../../src/buckets/errors.js';
import { emptyTable, movedBuckets, countsByEngine, type BucketTable } from '../../src/buckets/table.js';

const engine = (i: number, weight = 1, priority = 0): Member => ({ address: `192.0.2.${i}`, weight, priority });
const engines = (n: number): Member[] => Array.from({ length: n }, (_, i) => engine(i + 1));
const balance = { mode: 'balance' } as const;
const rr = { mode: 'round-robin' } as const;
const bucketsOf = (t: BucketTable, a: string): number[] => t.buckets.flatMap((e, i) => (e === a ? [i] : []));

test('4 -> 5 engines moves exactly 51 buckets (Squid round-robin moves 204)', () => {
  const four = assignBuckets(emptyTable(), engines(4), balance);
  const five = assignBuckets(four, engines(5), balance);
  assert.equal(movedBuckets(four, five).length, 51);
  assert.deepEqual([...countsByEngine(five).values()].sort(), [51, 51, 51, 51, 52]);
  const rr4 = assignBuckets(emptyTable(), engines(4), rr);
  const rr5 = assignBuckets(rr4, engines(5), rr);
  assert.equal(movedBuckets(rr4, rr5).length, 204);
});

test('removing one of 4 engines moves exactly its 64 buckets, and no other', () => {
  const four = assignBuckets(emptyTable(), engines(4), balance);
  const three = assignBuckets(
    four,
    engines(4).filter((m) => m.address !== '192.0.2.2'),
    balance,
  );
  const moved = movedBuckets(four, three);
  assert.equal(moved.length, 64);
  assert.deepEqual(moved, bucketsOf(four, '192.0.2.2'));
  // Squid's round-robin removing the first of 4 moves 193.
  const rr4 = assignBuckets(emptyTable(), engines(4), rr);
  assert.equal(movedBuckets(rr4, assignBuckets(rr4, engines(4).slice(1), rr)).length, 193);
});

test('an engine that leaves and comes back with its history gets back exactly its buckets', () => {
  const four = assignBuckets(emptyTable(), engines(4), balance);
  const history = bucketsOf(four, '192.0.2.3');
  const three = assignBuckets(
    four,
    engines(4).filter((m) => m.address !== '192.0.2.3'),
    balance,
  );
  const back = assignBuckets(
    three,
    engines(4).map((m) => (m.address === '192.0.2.3' ? { ...m, history } : m)),
    balance,
  );
  assert.deepEqual(back.buckets, four.buckets);
  assert.equal(back.changeNumber, four.changeNumber + 2);
  // Without history it gets 64 buckets too, but not its old ones.
  const fresh = assignBuckets(three, engines(4), balance);
  assert.equal(movedBuckets(three, fresh).length, 64);
  assert.notDeepEqual(bucketsOf(fresh, '192.0.2.3'), history);
});

test('a weight change moves only the difference', () => {
  const four = assignBuckets(emptyTable(), engines(4), balance);
  const heavier = assignBuckets(
    four,
    engines(4).map((m, i) => (i === 0 ? { ...m, weight: 2 } : m)),
    balance,
  );
  const counts = countsByEngine(heavier);
  assert.ok([102, 103].includes(counts.get('192.0.2.1') ?? 0));
  assert.equal(movedBuckets(four, heavier).length, (counts.get('192.0.2.1') ?? 0) - 64);
});

test('a standby (weight 0) serves only when no weighted engine is left', () => {
  const members = [engine(1), engine(2), engine(9, 0)];
  const t = assignBuckets(emptyTable(), members, balance);
  assert.equal(countsByEngine(t).get('192.0.2.9'), undefined);
  const standbyOnly = assignBuckets(t, [engine(9, 0)], balance);
  assert.equal(countsByEngine(standbyOnly).get('192.0.2.9'), 256);
  const twoStandbys = assignBuckets(standbyOnly, [engine(9, 0), engine(8, 0)], balance);
  assert.deepEqual(Object.fromEntries(countsByEngine(twoStandbys)), { '192.0.2.9': 128, '192.0.2.8': 128 });
  const back = assignBuckets(twoStandbys, [engine(9, 0), engine(8, 0), engine(1)], balance);
  assert.deepEqual(Object.fromEntries(countsByEngine(back)), { '192.0.2.1': 256 });
});

test('no members: every bucket unassigned; same inputs: same table and change number', () => {
  const t = assignBuckets(emptyTable(5), engines(3), balance);
  assert.equal(t.changeNumber, 6);
  assert.equal(assignBuckets(t, engines(3), balance), t);
  const none = assignBuckets(t, [], balance);
  assert.ok(none.buckets.every((e) => e === null));
  assert.equal(none.changeNumber, 7);
});

test('primary-standby: failover at once, failback only after the hold time', () => {
  const ps = (now: number) => ({ mode: 'primary-standby', now, failbackHoldMs: 30_000 }) as const;
  const primary = engine(20, 1, 200);
  const standby = engine(10, 1, 100);
  let t = assignBuckets(emptyTable(), [standby, primary], ps(0));
  assert.deepEqual(Object.fromEntries(countsByEngine(t)), { '192.0.2.20': 256 });
  t = assignBuckets(t, [standby], ps(1000));
  assert.deepEqual(Object.fromEntries(countsByEngine(t)), { '192.0.2.10': 256 });
  const returned = { ...primary, usableSince: 5000 };
  const early = assignBuckets(t, [standby, returned], ps(34_999));
  assert.equal(early, t, 'the standby keeps the buckets during the hold');
  const late = assignBuckets(t, [standby, returned], ps(35_000));
  assert.deepEqual(Object.fromEntries(countsByEngine(late)), { '192.0.2.20': 256 });
  assert.equal(late.changeNumber, t.changeNumber + 1);
  // Equal priority: the lower address serves.
  const tie = assignBuckets(emptyTable(), [engine(30, 1, 5), engine(7, 1, 5)], ps(0));
  assert.deepEqual(Object.fromEntries(countsByEngine(tie)), { '192.0.2.7': 256 });
});

test('round-robin sorts engines as Squid does (raw s_addr on little-endian: last octet first)', () => {
  const t = assignBuckets(
    emptyTable(),
    [
      { address: '192.0.2.10', weight: 1, priority: 0 },
      { address: '198.51.100.1', weight: 1, priority: 0 },
    ],
    rr,
  );
  assert.equal(t.buckets[0], '198.51.100.1');
  assert.equal(t.buckets[1], '192.0.2.10');
  assert.equal(t.buckets[255], '192.0.2.10');
});

test('bad members are refused with a typed error naming the engine', () => {
  assert.throws(
    () => assignBuckets(emptyTable(), [engine(1), engine(1)], balance),
    (e: unknown) => e instanceof BucketsError && e.reason === 'duplicate-engine' && e.message.includes('192.0.2.1'),
  );
  assert.throws(
    () => assignBuckets(emptyTable(), [engine(1, -1)], balance),
    (e: unknown) => e instanceof BucketsError && e.reason === 'bad-weight',
  );
  assert.throws(
    () => assignBuckets(emptyTable(), [{ address: 'cache-1', weight: 1, priority: 0 }], balance),
    (e: unknown) => e instanceof BucketsError && e.reason === 'bad-address',
  );
});
