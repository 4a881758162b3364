// The warm-up policy over a real cluster on a fake clock: which buckets a newcomer gained and from whom, whom it asks,
// sticky returns, a farm starting (no warm-up from an engine that held a bucket a moment), and each way a warm-up ends.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_WARMUP, WarmupPolicy } from '../../src/warmup/policy.js';
import type { WarmupEvent, WarmupSettings } from '../../src/warmup/policy.js';
import { hereIAm, testCluster } from '../cluster/helpers.js';

const A = '192.0.2.11';
const B = '192.0.2.12';
const C = '192.0.2.13';

function setup(over: Partial<WarmupSettings> = {}) {
  const { clock, cluster } = testCluster();
  const policy = new WarmupPolicy(new Map([[0, { ...DEFAULT_WARMUP, ...over }]]), clock);
  const events: WarmupEvent[] = [];
  policy.onEvent((e) => events.push(e));
  cluster.onEvent(() => {
    const s = cluster.service(0);
    if (s) policy.observe(s);
  });
  const join = (addr: string) => {
    cluster.hereIAm(hereIAm(addr));
    const plan = cluster.iSeeYou(0, addr);
    assert.ok(plan);
    cluster.hereIAm(hereIAm(addr, { receivedId: plan.receiveId }));
  };
  /** A keepalive: the router's I_SEE_YOU, then a HERE_I_AM echoing its Receive ID. */
  const keep = (addr: string) => {
    const plan = cluster.iSeeYou(0, addr);
    cluster.hereIAm(hereIAm(addr, { receivedId: plan?.receiveId ?? 0 }));
  };
  const bucketsOf = (addr: string) => (cluster.service(0)?.buckets ?? []).flatMap((o, i) => (o === addr ? [i] : []));
  /** Time passes (10 s steps), the engines of the group keeping their registration alive. */
  const pass = (ms: number) => {
    for (let left = ms; left > 0; left -= 10_000) {
      clock.advance(Math.min(10_000, left));
      for (const e of cluster.service(0)?.engines ?? []) keep(e.address);
      cluster.tick();
    }
  };
  /** A and B serve (long enough to be warm sources), then C is hot-inserted; returns C's buckets. */
  const hotInsert = () => {
    join(A);
    join(B);
    pass(DEFAULT_WARMUP.minSourceHoldMs);
    const before = [...(cluster.service(0)?.buckets ?? [])];
    join(C);
    const gained = bucketsOf(C);
    assert.ok(gained.length > 80, `C got its share (${gained.length})`);
    return { before, gained };
  };
  return { clock, cluster, policy, events, join, keep, bucketsOf, pass, hotInsert };
}

test('a hot-inserted engine asks the previous owner of each bucket it gained, and only for those', () => {
  const { policy, events, bucketsOf, hotInsert } = setup();
  const { before, gained } = hotInsert();
  for (const b of gained) {
    assert.deepEqual(policy.decide(0, C, b), { ask: [before[b]] }, `bucket ${b}`);
    assert.equal(policy.bucket(0, b)?.previous, before[b]);
  }
  const notC = bucketsOf(A)[0] ?? -1;
  assert.deepEqual(policy.decide(0, C, notC), { miss: 'not-its-bucket' });
  assert.deepEqual(policy.decide(0, A, notC), { miss: 'not-warming' }, 'A gained nothing');
  assert.deepEqual(
    events.map((e) => [e.engine, e.to]),
    [[C, 'warming']],
    'B took its share from A a moment after A came: no warm-up',
  );
  const v = policy.view(0, C);
  assert.equal(v?.warming, true);
  assert.equal(v?.buckets, gained.length);
  assert.equal(v?.timeLeftMs, DEFAULT_WARMUP.durationMs);
});

test('the first engine of a group gains nothing: there is no previous owner to ask', () => {
  const { policy, events, join, bucketsOf } = setup();
  join(A);
  assert.equal(bucketsOf(A).length, 256);
  assert.deepEqual(policy.decide(0, A, 0), { miss: 'not-warming' });
  assert.equal(events.length, 0);
  assert.equal(policy.view(0, A), null);
});

test('engines of a starting farm registering one after the other warm nothing from each other', () => {
  const { policy, events, join, bucketsOf, pass } = setup();
  join(A);
  pass(20_000);
  join(B);
  pass(30_000);
  join(C);
  assert.equal(bucketsOf(C).length > 80, true);
  assert.deepEqual(events, [], 'A held its buckets 20 s, B its share 30 s: less than minSourceHold (60 s)');
  for (const e of [B, C])
    for (const b of bucketsOf(e)) assert.deepEqual(policy.decide(0, e, b), { miss: 'not-warming' });
});

test('a bucket is gained only from a previous owner that held it minSourceHold: a second newcomer warms from the old engines, not from the first newcomer', () => {
  const { policy, join, bucketsOf, pass, hotInsert, cluster } = setup();
  const D = '192.0.2.14';
  hotInsert();
  pass(59_000);
  const before = [...(cluster.service(0)?.buckets ?? [])];
  join(D);
  const fromC = bucketsOf(D).filter((b) => before[b] === C);
  const fromAB = bucketsOf(D).filter((b) => before[b] === A || before[b] === B);
  assert.ok(fromC.length > 0 && fromAB.length > 0, `D took ${fromC.length} from C, ${fromAB.length} from A and B`);
  for (const b of fromC)
    assert.deepEqual(policy.decide(0, D, b), { miss: 'bucket-not-gained' }, `bucket ${b}: C held it 59 s`);
  for (const b of fromAB) assert.deepEqual(policy.decide(0, D, b), { ask: [before[b]] }, `bucket ${b}`);
});

test('minSourceHold 0: any previous owner is a warm source, even one that held the bucket a moment', () => {
  const { policy, events, join, bucketsOf } = setup({ minSourceHoldMs: 0 });
  join(A);
  join(B);
  assert.deepEqual(
    events.map((e) => [e.engine, e.to]),
    [[B, 'warming']],
  );
  for (const b of bucketsOf(B)) assert.deepEqual(policy.decide(0, B, b), { ask: [A] });
});

test('a sticky return (an engine gets its own old buckets back) needs no warm-up; the engine that stood in does', () => {
  const { cluster, policy, events, join, bucketsOf, clock, pass } = setup();
  join(A);
  join(B);
  pass(DEFAULT_WARMUP.minSourceHoldMs);
  const aBuckets = bucketsOf(A);
  const bEvents = events.length;
  clock.advance(1000);
  cluster.drain(0, A);
  // B took A's buckets from a draining engine: a perfect source.
  for (const b of aBuckets) assert.deepEqual(policy.decide(0, B, b), { ask: [A] });
  clock.advance(1000);
  cluster.undrain(0, A);
  assert.deepEqual(bucketsOf(A), aBuckets, 'A got exactly its buckets back');
  for (const b of aBuckets) assert.deepEqual(policy.decide(0, A, b), { miss: 'not-warming' });
  assert.equal(events.slice(bEvents).filter((e) => e.engine === A).length, 0, 'no warm-up event for A');
});

test('a return after stickyMs is a warm-up like any other', () => {
  const { cluster, policy, join, bucketsOf, pass } = setup({ stickyMs: 5000, minSourceHoldMs: 1000 });
  join(A);
  join(B);
  pass(1000);
  const aBuckets = bucketsOf(A);
  cluster.drain(0, A);
  pass(6000);
  cluster.undrain(0, A);
  const b = aBuckets[0] ?? -1;
  assert.deepEqual(policy.decide(0, A, b), { ask: [B] });
});

test('the duration ends a warm-up: then MISS at once, with the reason and the figures', () => {
  const { policy, events, clock, hotInsert } = setup({ durationMs: 60_000 });
  const { gained } = hotInsert();
  const b = gained[0] ?? -1;
  policy.record(0, C, true);
  policy.record(0, C, false);
  clock.advance(30_000);
  assert.equal(policy.view(0, C)?.timeLeftMs, 30_000);
  assert.equal(policy.nextDue(), clock.now() + 30_000);
  clock.advance(30_000);
  assert.deepEqual(policy.decide(0, C, b), { miss: 'warm-up-ended' });
  const v = policy.view(0, C);
  assert.deepEqual(
    [v?.warming, v?.endReason, v?.queries, v?.peerHits, v?.ratio, v?.timeLeftMs],
    [false, 'duration', 2, 1, 0.5, 0],
  );
  const ended = events.filter((e) => e.engine === C && e.to === 'warm');
  assert.equal(ended.length, 1);
  assert.match(ended[0]?.reason ?? '', /duration 1 min/);
  policy.tick();
  assert.equal(events.filter((e) => e.engine === C && e.to === 'warm').length, 1, 'ends once');
  assert.equal(policy.nextDue(), null);
});

test('maxPeerHits ends a warm-up at exactly that many peer hits', () => {
  const { policy, hotInsert } = setup({ maxPeerHits: 5 });
  const { gained } = hotInsert();
  for (let i = 0; i < 4; i++) policy.record(0, C, true);
  assert.equal(policy.view(0, C)?.warming, true);
  policy.record(0, C, true);
  assert.deepEqual([policy.view(0, C)?.warming, policy.view(0, C)?.endReason], [false, 'max-peer-hits']);
  assert.deepEqual(policy.decide(0, C, gained[0] ?? -1), { miss: 'warm-up-ended' });
  policy.record(0, C, true);
  assert.equal(policy.view(0, C)?.peerHits, 5, 'nothing counts after the end');
});

test('minHitRatio is judged over the last `window` queries only, once the window is full', () => {
  const { policy, hotInsert } = setup({ window: 10, minHitRatio: 0.2 });
  hotInsert();
  for (let i = 0; i < 9; i++) policy.record(0, C, false);
  assert.equal(policy.view(0, C)?.warming, true, 'a window of 9 misses is not full yet');
  policy.record(0, C, true);
  assert.deepEqual(
    [policy.view(0, C)?.warming, policy.view(0, C)?.endReason],
    [false, 'min-hit-ratio'],
    '1 hit in 10 is below 0.2',
  );
});

test('minHitRatio: hits that leave the window no longer count', () => {
  const { policy, hotInsert } = setup({ window: 10, minHitRatio: 0.2 });
  hotInsert();
  policy.record(0, C, true);
  policy.record(0, C, true);
  for (let i = 0; i < 8; i++) policy.record(0, C, false);
  assert.equal(policy.view(0, C)?.windowRatio, 0.2);
  assert.equal(policy.view(0, C)?.warming, true, '2 of 10 is not below 0.2');
  policy.record(0, C, false);
  const v = policy.view(0, C);
  assert.deepEqual([v?.warming, v?.endReason, v?.windowRatio], [false, 'min-hit-ratio', 0.1]);
});

test('a dead or failing source is not asked: MISS at once; a state change of the source clears a hard failure', () => {
  const { cluster, policy, hotInsert, clock, keep } = setup();
  const { before, gained } = hotInsert();
  const fromA = gained.find((b) => before[b] === A) ?? -1;
  const fromB = gained.find((b) => before[b] === B) ?? -1;
  policy.sourceFailed(A);
  assert.deepEqual(policy.decide(0, C, fromA), { miss: 'no-live-source' });
  assert.deepEqual(policy.decide(0, C, fromB), { ask: [B] });
  cluster.drain(0, A);
  // A now drains (a state change): it may be asked again, although its buckets moved.
  assert.deepEqual(policy.decide(0, C, fromA), { ask: [A] });
  // B goes silent and is removed at 3 x HERE_I_AM_T: its buckets move, and C's buckets from B have no live source.
  for (let t = 0; t < 3; t++) {
    clock.advance(10_000);
    keep(A);
    keep(C);
    cluster.tick();
  }
  assert.equal(
    cluster.service(0)?.engines.some((e) => e.address === B),
    false,
  );
  assert.deepEqual(policy.decide(0, C, fromB), { miss: 'no-live-source' });
});

test('buckets of a dead engine start no warm-up from it (previous-owner)', () => {
  const { cluster, policy, events, join, clock, keep, pass } = setup();
  join(A);
  join(B);
  pass(DEFAULT_WARMUP.minSourceHoldMs);
  const n = events.length;
  for (let t = 0; t < 3; t++) {
    clock.advance(10_000);
    keep(B);
    cluster.tick();
  }
  assert.equal(
    cluster.service(0)?.buckets.every((o) => o === B),
    true,
  );
  assert.equal(events.length, n, 'no new warm-up');
  assert.equal(policy.bucket(0, 0)?.previous, A);
  assert.deepEqual(
    Array.from({ length: 256 }, (_, b) => policy.bucket(0, b)?.gainedAt).filter((g) => g !== null),
    [],
    'no bucket gained',
  );
  assert.deepEqual(policy.decide(0, B, 0), { miss: 'not-warming' });
});

test('source all-engines asks every other usable engine, never a draining one or the asker', () => {
  const { cluster, policy, hotInsert } = setup({ source: 'all-engines' });
  const { gained } = hotInsert();
  assert.deepEqual(policy.decide(0, C, gained[0] ?? -1), { ask: [A, B] });
  cluster.drain(0, B);
  const stillC = (cluster.service(0)?.buckets ?? []).findIndex((o, i) => o === C && gained.includes(i));
  assert.deepEqual(policy.decide(0, C, stillC), { ask: [A] });
});

test('a disabled service answers MISS for everything and keeps no session', () => {
  const { policy, hotInsert } = setup({ enabled: false });
  const { gained } = hotInsert();
  assert.deepEqual(policy.decide(0, C, gained[0] ?? -1), { miss: 'disabled' });
  assert.deepEqual(policy.decide(7, C, 0), { miss: 'disabled' }, 'an unknown service too');
});

test('thousands of churns keep the per-bucket memory bounded and the answers consistent', () => {
  const { cluster, policy, join, clock } = setup({ stickyMs: 60_000 });
  join(A);
  join(B);
  join(C);
  for (let i = 0; i < 3000; i++) {
    clock.advance(1000);
    const e = [A, B, C][i % 3] as string;
    if (i % 2 === 0) cluster.drain(0, e);
    else cluster.undrain(0, e);
  }
  for (const e of [A, B, C]) cluster.undrain(0, e);
  const snap = cluster.service(0);
  for (let b = 0; b < 256; b++) {
    const info = policy.bucket(0, b);
    assert.equal(info?.owner, snap?.buckets[b]);
    const d = policy.decide(0, info?.owner ?? A, b);
    if ('ask' in d) assert.ok(d.ask.every((s) => s !== info?.owner));
  }
});

test('a restart of wccpd: the warm-up goes on with the time it had left, its figures and its gained buckets', () => {
  const first = setup();
  const { before, gained } = first.hotInsert();
  for (let i = 0; i < 5; i++) first.policy.record(0, C, true);
  first.policy.record(0, C, false);
  first.clock.advance(120_000);
  const memory = first.policy.memory(0);
  const table = [...(first.cluster.service(0)?.buckets ?? [])];
  const clusterMemory = first.cluster.memory();
  assert.ok(memory !== null);

  // wccpd is down for 20 minutes, longer than the 8 minutes left: downtime does not count (nothing was redirected).
  const second = setup();
  second.clock.advance(first.clock.now() - second.clock.now() + 20 * 60_000);
  for (const m of clusterMemory) second.cluster.restore(m);
  second.policy.restore(0, memory, table);
  // The newcomer is heard first: the cluster heals the table onto it until the others are back.
  second.join(C);
  second.join(A);
  second.join(B);
  assert.deepEqual(second.cluster.service(0)?.buckets, table, 'the same table as before the restart');
  const v = second.policy.view(0, C);
  assert.deepEqual(
    [v?.warming, v?.queries, v?.peerHits, v?.timeLeftMs, v?.buckets],
    [true, 6, 5, DEFAULT_WARMUP.durationMs - 120_000, gained.length],
  );
  for (const b of gained) assert.deepEqual(second.policy.decide(0, C, b), { ask: [before[b]] }, `bucket ${b}`);
  // A and B got their own buckets back: sticky returns, no warm-up for them.
  assert.equal(second.policy.view(0, A), null);
  assert.deepEqual(
    second.events.filter((e) => e.engine !== C),
    [],
  );
  // The engines held their buckets since before the restart: a newcomer right after it warms from them.
  const D = '192.0.2.14';
  const table2 = [...(second.cluster.service(0)?.buckets ?? [])];
  second.join(D);
  const dGained = second.bucketsOf(D);
  assert.ok(dGained.length > 50);
  for (const b of dGained) assert.deepEqual(second.policy.decide(0, D, b), { ask: [table2[b]] }, `bucket ${b}`);
  second.clock.advance(DEFAULT_WARMUP.durationMs - 120_000);
  second.policy.tick();
  assert.equal(second.policy.view(0, C)?.endReason, 'duration');
});
