// An admin weight (setWeight, the API's weight command) as the group keeps it: while the engine is present, while it
// is gone for up to historyWindow, across a restart (persisted memory); bounded however many engines come and go.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_GONE_WEIGHTS } from '../../src/cluster/index.js';
import type { ServiceMemory } from '../../src/cluster/index.js';
import { encodeState, STATE_VERSION } from '../../src/state/index.js';
import { testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const HISTORY_MS = 600_000;

function setup(historyWindowMs = HISTORY_MS) {
  const group = testCluster({ service: { lenientReceiveId: 0, historyWindowMs } });
  const { clock, cluster, say } = group;
  /** The engine's silence long enough to be removed (3 x HERE_I_AM_T), the others still talking. */
  const leave = (addr: string, others: readonly string[] = []) => {
    for (let t = 0; t < 31; t++) {
      clock.advance(1000);
      if (t % 10 === 0) for (const o of others) say(o);
      cluster.tick();
    }
    assert.equal(
      cluster.service(0)?.engines.some((e) => e.address === addr && e.state !== 'gone'),
      false,
      `${addr} is gone`,
    );
  };
  const weights = () => cluster.memory()[0]?.adminWeights ?? [];
  return { ...group, leave, weights };
}

test('a weight set by an admin is kept while the engine is gone and when it comes back, until set back', () => {
  const { cluster, join, leave, engine, weights } = setup();
  join(E1);
  join(E2);
  assert.deepEqual(cluster.setWeight(0, E1, 30_000), { ok: true });
  assert.equal(engine(E1)?.buckets, 192);
  leave(E1, [E2]);
  assert.deepEqual(weights(), [{ address: E1, weight: 30_000, leftAt: weights()[0]?.leftAt }]);
  assert.equal(typeof weights()[0]?.leftAt, 'number');
  join(E1);
  assert.deepEqual([engine(E1)?.weight, engine(E1)?.flags.weightOverride, engine(E1)?.buckets], [30_000, true, 192]);
  assert.deepEqual(weights(), [{ address: E1, weight: 30_000, leftAt: null }]);
  // Set back (null: its own Assignment Weight), also possible while it is gone.
  leave(E1, [E2]);
  assert.deepEqual(cluster.setWeight(0, E1, null), { ok: true });
  assert.deepEqual(weights(), []);
  assert.equal(cluster.setWeight(0, E1, null).ok, false, 'nothing left to set back: unknown engine');
  join(E1);
  assert.deepEqual([engine(E1)?.weight, engine(E1)?.flags.weightOverride], [10_000, false]);
});

test('a weight survives a restart; one for an engine that never comes back is forgotten after historyWindow', () => {
  const first = setup();
  first.join(E1);
  first.join(E2);
  first.cluster.setWeight(0, E1, 30_000);
  first.cluster.setWeight(0, E2, 5000);
  const memory = JSON.parse(JSON.stringify(first.cluster.memory())) as ServiceMemory[];
  const second = setup();
  for (const m of memory) second.cluster.restore(m);
  second.cluster.startRestartGrace();
  second.join(E1);
  assert.deepEqual([second.engine(E1)?.weight, second.engine(E1)?.flags.weightOverride], [30_000, true]);
  // E2 never comes back: its weight is remembered for historyWindow from the restart, then forgotten.
  second.clock.advance(HISTORY_MS - 1000);
  second.join(E1);
  second.cluster.tick();
  assert.deepEqual(
    second.weights().map((w) => w.address),
    [E1, E2],
  );
  second.clock.advance(2000);
  second.join(E1);
  second.cluster.tick();
  assert.deepEqual(second.weights(), [{ address: E1, weight: 30_000, leftAt: null }]);
});

test('a hand-edited weight that left "in the future" is still forgotten historyWindow after the restart', () => {
  const first = setup();
  first.join(E1);
  const [m] = JSON.parse(JSON.stringify(first.cluster.memory())) as ServiceMemory[];
  assert.ok(m);
  const second = setup();
  second.cluster.restore({
    ...m,
    adminWeights: [{ address: E2, weight: 7, leftAt: first.clock.now() + 10 * HISTORY_MS }],
  });
  second.join(E1);
  assert.deepEqual(
    second.weights().map((w) => w.address),
    [E2],
  );
  second.clock.advance(HISTORY_MS + 1000);
  second.join(E1);
  second.cluster.tick();
  assert.deepEqual(second.weights(), []);
});

test('a thousand engines that come and go, each given a weight: at most MAX_GONE_WEIGHTS kept, the latest', () => {
  // historyWindow at its longest (a week): the time alone would keep all of them.
  const { cluster, join, leave, weights } = setup(7 * 24 * 3600_000);
  // 1,000 arrivals over the 768 addresses of the three TEST-NETs: some come back after being forgotten.
  const nets = ['192.0.2', '198.51.100', '203.0.113'];
  const address = (i: number) => `${nets[Math.floor((i % 768) / 256)]}.${i % 256}`;
  for (let i = 0; i < 1000; i++) {
    join(address(i));
    assert.deepEqual(cluster.setWeight(0, address(i), 1 + (i % 100)), { ok: true });
    leave(address(i));
  }
  const kept = weights();
  assert.equal(kept.length, MAX_GONE_WEIGHTS);
  assert.deepEqual(
    new Set(kept.map((w) => w.address)),
    new Set(Array.from({ length: MAX_GONE_WEIGHTS }, (_, k) => address(999 - k))),
    'the engines gone most recently',
  );
  // What the state file holds for them stays small.
  const file = encodeState({
    version: STATE_VERSION,
    savedAt: 1,
    services: [
      { id: 0, table: cluster.memory()[0]!.table, engines: [], counters: {}, receiveId: 1, adminWeights: kept },
    ],
  });
  assert.ok(file.length < 16_000, `${file.length} bytes`);
});
