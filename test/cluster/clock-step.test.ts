// The cluster's clock going back. The daemon's is monotonic (src/clock.ts; wall-clock steps: test/daemon/clock-step),
// but an injected clock that went back (the wall clock, as it once was) must not put the times recorded before in the
// future: a dead engine must still be removed about 3 x HERE_I_AM_T after the step (not an hour later, keeping its
// buckets), and a table change must not wait as if within timers.settle for as long as the step.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TableEvent } from '../../src/cluster/index.js';
import { ReceiveIdHandshake } from '../../src/cluster/receive-id.js';
import { fakeClock, testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const HOUR = 3_600_000;
/** control/timers.ts waits at most this long, whatever nextDue() says. */
const MAX_WAIT_MS = 60_000;

function setup() {
  const group = testCluster({ clock: fakeClock(10 * HOUR), service: { lenientReceiveId: 0 }, settleMs: 250 });
  const { clock, cluster, say } = group;
  const tables: TableEvent[] = [];
  cluster.onEvent((e) => {
    if (e.type === 'table') tables.push(e);
  });
  const state = (addr: string) => cluster.service(0)?.engines.find((e) => e.address === addr)?.state ?? 'gone';
  /** Runs the timers as control/timers.ts does (each wait capped), with E1 sending HERE_I_AM every 10 s. */
  const run = (ms: number) => {
    const until = clock.now() + ms;
    let nextHello = clock.now();
    while (clock.now() < until) {
      if (clock.now() >= nextHello) {
        say(E1);
        nextHello = clock.now() + 10_000;
      }
      const due = cluster.nextDue() ?? Infinity;
      const step = Math.max(1, Math.min(due - clock.now(), MAX_WAIT_MS, nextHello - clock.now(), until - clock.now()));
      clock.advance(step);
      if (due <= clock.now() || step === MAX_WAIT_MS) cluster.tick();
    }
  };
  return { ...group, tables, state, run };
}

function twoEngines() {
  const s = setup();
  for (let i = 0; i < 2; i++) {
    s.say(E1);
    s.say(E2);
  }
  s.run(1_000);
  assert.equal(s.owned(E1) + s.owned(E2), 256);
  assert.ok(s.owned(E2) > 0);
  return s;
}

test('clock set back an hour: a dead engine is removed ~3 x HERE_I_AM_T after the step, and its buckets move', () => {
  const s = twoEngines();
  s.run(5_000);
  s.clock.advance(-HOUR);
  // E2 is dead from now on; E1 keeps talking.
  s.run(3 * 10_000 + MAX_WAIT_MS + 10_000);
  assert.equal(s.state(E2), 'gone', 'E2 removed within minutes, not an hour');
  assert.equal(s.owned(E1), 256, 'its buckets went to E1');
});

test('clock set back an hour: an admin drain right after the step moves the buckets within timers.settle', () => {
  const s = twoEngines();
  s.run(100);
  s.clock.advance(-HOUR);
  s.tables.length = 0;
  assert.deepEqual(s.cluster.drain(0, E2), { ok: true });
  s.run(1_000);
  assert.equal(s.owned(E2), 0, 'the drain took effect');
  assert.equal(s.tables.length, 1);
});

test('clock set back: a strict engine that missed an answer is answered again at once, not after the step', () => {
  const h = new ReceiveIdHandshake();
  assert.equal(h.answerStale(10 * HOUR, 1_000), true);
  assert.equal(h.answerStale(10 * HOUR + 10, 1_000), false, 'rapid repeats are still limited');
  assert.equal(h.answerStale(9 * HOUR, 1_000), true, 'an hour earlier: answered');
  assert.equal(h.answerStale(9 * HOUR + 10, 1_000), false);
});

test('clock set back an hour inside the restart grace: the grace still ends ~3 x HERE_I_AM_T after the step', () => {
  const s = setup();
  const buckets = Array.from({ length: 256 }, (_, i) => (i % 2 === 0 ? E1 : E2));
  s.cluster.restore({
    id: 0,
    table: { changeNumber: 7, buckets },
    receiveId: 100,
    memberChangeNumber: 0,
    engines: [],
    counters: {},
    adminDrained: [],
  });
  s.cluster.startRestartGrace();
  s.clock.advance(-HOUR);
  // E1 comes back (run() keeps it talking), E2 does not: the grace holds E2's buckets' place in the state file.
  s.run(10_000);
  assert.deepEqual(s.cluster.memory()[0]?.table.buckets, buckets, 'inside the grace');
  s.run(3 * 10_000 + MAX_WAIT_MS);
  assert.equal(
    s.cluster.memory()[0]?.table.buckets.includes(E2),
    false,
    'the grace ended about 3 x HERE_I_AM_T after the step, not an hour later',
  );
  assert.equal(s.owned(E1), 256);
});
