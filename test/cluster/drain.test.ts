// Admin drains on the injected clock: a drain stays until undrain, across the engine going gone and coming back
// and across a restart (memory -> restore), and stays distinct from the other drain causes (SHUTDOWN, ICP).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster } from '../../src/cluster/index.js';
import type { EngineStateEvent, ProbeSettings } from '../../src/cluster/index.js';
import { testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const OFF: ProbeSettings = { enabled: false, intervalMs: 5000, timeoutMs: 1000, rise: 2, fall: 3, hardFall: 2 };

function setup() {
  const group = testCluster({
    service: { lenientReceiveId: 0 },
    health: { http: OFF, icp: { ...OFF, enabled: true }, tcp: OFF, icmp: OFF },
  });
  const { clock, cluster, events, say } = group;
  /** E2 keeps talking for `seconds` while E1 is silent. */
  const silence = (seconds: number) => {
    for (let s = 0; s < seconds; s += 10) {
      clock.advance(10_000);
      say(E2);
      cluster.tick();
    }
  };
  const stateEvents = () =>
    events
      .filter((e): e is EngineStateEvent => e.type === 'engine-state')
      .map((e) => `${e.engine} ${e.from} -> ${e.to}: ${e.reason}`);
  return { ...group, silence, stateEvents };
}

test('an admin drain stays while the engine is gone, is listed meanwhile, and holds when it comes back until undrain', () => {
  const { cluster, say, engine, owned, silence, stateEvents } = setup();
  say(E1);
  say(E1);
  say(E2);
  say(E2);
  const before = [...(cluster.service(0)?.buckets ?? [])];
  assert.deepEqual(cluster.drain(0, E1, 'admin drain (API)'), { ok: true });
  assert.equal(engine(E1)?.state, 'draining');
  assert.equal(engine(E1)?.flags.adminDrain, true);
  silence(30); // it reboots
  assert.deepEqual(
    engine(E1) && {
      state: engine(E1)?.state,
      drains: engine(E1)?.drains,
      adminDrain: engine(E1)?.flags.adminDrain,
      reason: engine(E1)?.reason,
    },
    { state: 'gone', drains: ['admin'], adminDrain: true, reason: 'gone; admin drain kept until undrain' },
  );
  assert.equal(cluster.snapshot().services[0]?.engines.filter((e) => e.state !== 'gone').length, 1);
  assert.deepEqual(cluster.probeTargets(), [E2], 'a gone engine is not probed, drained or not');
  // It comes back and completes its handshake: still drained, no buckets.
  say(E1);
  say(E1);
  assert.equal(engine(E1)?.state, 'draining');
  assert.equal(owned(E1), 0);
  assert.equal(owned(E2), 256);
  assert.deepEqual(stateEvents().slice(-2), [
    `${E1} new -> joining: first HERE_I_AM`,
    `${E1} joining -> draining: admin drain (kept until undrain)`,
  ]);
  assert.deepEqual(cluster.undrain(0, E1), { ok: true });
  assert.equal(engine(E1)?.state, 'usable');
  assert.deepEqual(cluster.service(0)?.buckets, before, 'its remembered buckets come back');
});

test('an admin drain survives a restart (memory -> restore) and a drained engine that is gone can be undrained', () => {
  const first = setup();
  first.say(E1);
  first.say(E1);
  first.say(E2);
  first.say(E2);
  first.cluster.drain(0, E1);
  const memory = JSON.parse(JSON.stringify(first.cluster.memory())) as ReturnType<Cluster['memory']>;
  assert.deepEqual(memory[0]?.adminDrained, [E1]);
  const second = setup();
  for (const m of memory) second.cluster.restore(m);
  assert.equal(second.engine(E1)?.state, 'gone', 'listed before it is heard again');
  second.say(E2);
  second.say(E2);
  second.say(E1);
  second.say(E1);
  assert.equal(second.engine(E1)?.state, 'draining');
  assert.equal(second.owned(E2), 256);
  // A third restart while the drained engine is away, then undrain while it is gone: the listing goes.
  second.silence(30);
  const third = setup();
  for (const m of second.cluster.memory()) third.cluster.restore(m);
  assert.deepEqual(third.cluster.undrain(0, E1), { ok: true });
  assert.equal(third.engine(E1), undefined);
  third.say(E1);
  third.say(E1);
  assert.equal(third.engine(E1)?.state, 'usable');
});

test('drain causes stay distinct: admin, SHUTDOWN and ICP MISS_NOFETCH each come and go on their own', () => {
  const { cluster, say, engine } = setup();
  say(E1);
  say(E1);
  say(E2);
  say(E2);
  cluster.drain(0, E1);
  cluster.probe(E1, { kind: 'icp', ok: true, rttMs: 1, icpOpcode: 'MISS_NOFETCH' });
  assert.deepEqual(engine(E1)?.drains, ['admin', 'ICP MISS_NOFETCH']);
  say(E1, { shutdown: true });
  assert.deepEqual(engine(E1)?.drains, ['admin', 'shutdown', 'ICP MISS_NOFETCH']);
  cluster.undrain(0, E1);
  assert.deepEqual(engine(E1)?.drains, ['shutdown', 'ICP MISS_NOFETCH']);
  assert.equal(engine(E1)?.state, 'draining');
  assert.equal(engine(E1)?.flags.adminDrain, false);
  say(E1);
  assert.deepEqual(engine(E1)?.drains, ['ICP MISS_NOFETCH']);
  cluster.probe(E1, { kind: 'icp', ok: true, rttMs: 1, icpOpcode: 'MISS' });
  assert.deepEqual(engine(E1)?.drains, []);
  assert.equal(engine(E1)?.state, 'usable');
  // An ICP MISS does not end an admin drain either.
  cluster.drain(0, E1);
  cluster.probe(E1, { kind: 'icp', ok: true, rttMs: 1, icpOpcode: 'MISS' });
  assert.equal(engine(E1)?.state, 'draining');
});

test('an engine that left recently may be drained before it returns; one never seen may not', () => {
  const { cluster, say, engine, silence } = setup();
  say(E1);
  say(E1);
  say(E2);
  say(E2);
  silence(30);
  assert.equal(engine(E1), undefined);
  assert.deepEqual(cluster.drain(0, E1), { ok: true });
  assert.equal(engine(E1)?.state, 'gone');
  say(E1);
  say(E1);
  assert.equal(engine(E1)?.state, 'draining');
  assert.deepEqual(cluster.drain(0, '192.0.2.99'), {
    ok: false,
    error: 'unknown-engine',
    message: 'engine 192.0.2.99 is not in service group 0',
  });
  assert.equal(cluster.undrain(0, '192.0.2.99').ok, false);
});
