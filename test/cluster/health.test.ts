// Active health probes in the cluster, under a fake clock: rise/fall per kind, bucket movement, ICP MISS_NOFETCH
// draining, and the rule that probes never bring back (or make usable) an engine WCCP does not vouch for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster } from '../../src/cluster/index.js';
import type { ClusterEvent, EngineStateEvent, HealthSettings, ProbeKind, ProbeSettings } from '../../src/cluster/index.js';
import { echoingEngines, fakeClock, hereIAm, serviceConfig } from './helpers.js';

const ROUTER = '192.0.2.1';
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const E3 = '192.0.2.13';
const OFF: ProbeSettings = { enabled: false, intervalMs: 5000, timeoutMs: 1000, rise: 2, fall: 3 };
const ON: ProbeSettings = { ...OFF, enabled: true };

function setup(health: Partial<Record<ProbeKind, ProbeSettings>> = { tcp: ON }) {
  const clock = fakeClock();
  const settings: HealthSettings = { icp: OFF, tcp: OFF, icmp: OFF, ...health };
  const cluster = new Cluster({ clock, routerAddress: ROUTER, hereIAmMs: 10_000, services: [serviceConfig()], health: settings });
  const events: ClusterEvent[] = [];
  cluster.onEvent((e) => events.push(e));
  const engine = (addr: string) => cluster.service(0)?.engines.find((e) => e.address === addr);
  const buckets = () => [...(cluster.service(0)?.buckets ?? [])];
  const say = echoingEngines(cluster);
  const join = (addr: string) => {
    say(addr);
    say(addr);
  };
  const fail = (addr: string, kind: ProbeKind = 'tcp', detail = 'connect timeout 1s') => cluster.probe(addr, { kind, ok: false, detail });
  const pass = (addr: string, kind: ProbeKind = 'tcp', icpOpcode?: string) =>
    cluster.probe(addr, { kind, ok: true, rttMs: 0.4, ...(icpOpcode !== undefined ? { icpOpcode } : {}) });
  const stateEvents = () => events.filter((e): e is EngineStateEvent => e.type === 'engine-state');
  return { clock, cluster, events, engine, buckets, join, say, fail, pass, stateEvents };
}

test('fall - 1 failures change nothing; the fall-th makes the engine suspect and moves only its buckets', () => {
  const { cluster, engine, buckets, join, fail, stateEvents } = setup();
  join(E1); join(E2); join(E3);
  const before = buckets();
  const changeNumber = cluster.service(0)?.changeNumber;
  fail(E2); fail(E2);
  assert.equal(engine(E2)?.state, 'usable');
  assert.deepEqual(buckets(), before, 'two failures of fall 3: no bucket moves');
  assert.equal(cluster.service(0)?.changeNumber, changeNumber);

  fail(E2, 'tcp', 'connect timeout 1s');
  assert.equal(engine(E2)?.state, 'suspect');
  assert.equal(engine(E2)?.reason, 'tcp probe: 3 consecutive failures (connect timeout 1s)');
  const after = buckets();
  assert.equal(after.filter((b) => b === E2).length, 0, 'the suspect engine holds no bucket');
  for (let i = 0; i < 256; i++) {
    if (before[i] !== E2) assert.equal(after[i], before[i], `bucket ${i} of ${before[i]} must not move`);
    else assert.ok(after[i] === E1 || after[i] === E3, `bucket ${i} went to a survivor`);
  }
  const last = stateEvents().at(-1);
  assert.deepEqual(last && [last.engine, last.from, last.to, last.reason],
    [E2, 'usable', 'suspect', 'tcp probe: 3 consecutive failures (connect timeout 1s)']);
});

test('a pass resets the failure count: failures must be consecutive', () => {
  const { engine, join, fail, pass } = setup();
  join(E1);
  fail(E1); fail(E1); pass(E1); fail(E1); fail(E1);
  assert.equal(engine(E1)?.state, 'usable');
  fail(E1);
  assert.equal(engine(E1)?.state, 'suspect');
});

test('rise consecutive passes bring a suspect engine back with its old buckets', () => {
  const { engine, buckets, join, fail, pass, stateEvents } = setup();
  join(E1); join(E2);
  const before = buckets();
  fail(E2); fail(E2); fail(E2);
  assert.equal(engine(E2)?.buckets, 0);
  pass(E2);
  assert.equal(engine(E2)?.state, 'suspect', 'rise is 2: one pass is not enough');
  fail(E2);
  pass(E2);
  assert.equal(engine(E2)?.state, 'suspect', 'the passes must be consecutive');
  pass(E2);
  assert.equal(engine(E2)?.state, 'usable');
  assert.deepEqual(buckets(), before, 'sticky return: the same buckets as before');
  const last = stateEvents().at(-1);
  assert.deepEqual(last && [last.from, last.to, last.reason], ['suspect', 'usable', 'probes pass again (tcp: 2 consecutive passes)']);
});

test('recovery needs rise passes of every enabled kind, not only the one that failed', () => {
  const { engine, join, fail, pass } = setup({ tcp: ON, icmp: { ...ON, rise: 3 } });
  join(E1); join(E2);
  fail(E1, 'tcp', 'connection refused'); fail(E1, 'tcp', 'connection refused'); fail(E1, 'tcp', 'connection refused');
  assert.equal(engine(E1)?.reason, 'tcp probe: 3 consecutive failures (connection refused)');
  pass(E1, 'tcp'); pass(E1, 'tcp'); pass(E1, 'tcp');
  pass(E1, 'icmp'); pass(E1, 'icmp');
  assert.equal(engine(E1)?.state, 'suspect', 'icmp rise is 3');
  pass(E1, 'icmp');
  assert.equal(engine(E1)?.state, 'usable');
});

test('outcomes of a disabled probe kind are ignored', () => {
  const { engine, join, fail } = setup({ tcp: ON });
  join(E1);
  for (let i = 0; i < 10; i++) fail(E1, 'icmp', 'no echo reply in 1s');
  assert.equal(engine(E1)?.state, 'usable');
});

test('ICP MISS_NOFETCH drains the engine (a member, no buckets, not dead); a MISS ends the drain with its old buckets', () => {
  const { engine, buckets, join, say, pass, stateEvents } = setup({ icp: ON });
  join(E1); join(E2);
  const before = buckets();
  pass(E2, 'icp', 'MISS');
  assert.equal(engine(E2)?.state, 'usable', 'a MISS while not drained changes nothing');
  pass(E2, 'icp', 'MISS_NOFETCH');
  assert.equal(engine(E2)?.state, 'draining');
  assert.equal(engine(E2)?.reason, 'ICP MISS_NOFETCH');
  assert.equal(engine(E2)?.buckets, 0);
  assert.equal(buckets().filter((b) => b === E1).length, 256);
  pass(E2, 'icp', 'MISS_NOFETCH');
  assert.equal(stateEvents().filter((e) => e.to === 'draining').length, 1, 'one event per change, not per reply');
  // Still a member: its HERE_I_AMs keep it, and WCCP timers do not remove it.
  say(E2);
  assert.equal(engine(E2)?.state, 'draining');
  pass(E2, 'icp', 'MISS');
  assert.equal(engine(E2)?.state, 'usable');
  assert.deepEqual(buckets(), before);
  const last = stateEvents().at(-1);
  assert.deepEqual(last && [last.from, last.to, last.reason], ['draining', 'usable', 'ICP MISS: fetching again']);
});

test('an admin undrain does not override an engine that answers MISS_NOFETCH', () => {
  const { cluster, engine, join, pass } = setup({ icp: ON });
  join(E1);
  pass(E1, 'icp', 'MISS_NOFETCH');
  cluster.undrain(0, E1);
  assert.equal(engine(E1)?.state, 'draining');
});

test('a silent engine stays gone however its probes answer', () => {
  const { clock, cluster, engine, buckets, join, say, pass } = setup({ tcp: ON, icp: ON });
  join(E1); join(E2);
  clock.advance(20_000);
  say(E1);
  clock.advance(10_000);
  cluster.tick();
  assert.equal(engine(E2), undefined, 'no HERE_I_AM for 30 s: gone');
  for (let i = 0; i < 5; i++) { pass(E2, 'tcp'); pass(E2, 'icp', 'MISS'); }
  assert.equal(engine(E2), undefined);
  assert.equal(buckets().filter((b) => b === E2).length, 0);
  assert.deepEqual(cluster.probeTargets(), [E1], 'a gone engine is not probed');
});

test('probes never make a joining engine usable; a failing one is suspect as soon as its handshake completes', () => {
  const { cluster, engine, fail, pass } = setup();
  cluster.hereIAm(hereIAm(E1));
  for (let i = 0; i < 5; i++) pass(E1);
  assert.equal(engine(E1)?.state, 'joining');
  fail(E1); fail(E1); fail(E1);
  assert.equal(engine(E1)?.state, 'joining');
  const plan = cluster.iSeeYou(0, E1);
  cluster.hereIAm(hereIAm(E1, { receivedId: plan?.receiveId ?? 0 }));
  assert.equal(engine(E1)?.state, 'suspect');
  assert.equal(engine(E1)?.reason, 'tcp probe: 3 consecutive failures (connect timeout 1s)');
});

test('an unhealthy engine that leaves and returns must still earn its rise passes', () => {
  const { clock, cluster, engine, join, say, fail, pass } = setup();
  join(E1); join(E2);
  fail(E2); fail(E2); fail(E2);
  for (let t = 0; t < 3; t++) {
    clock.advance(10_000);
    say(E1);
    cluster.tick();
  }
  assert.equal(engine(E2), undefined);
  join(E2);
  assert.equal(engine(E2)?.state, 'suspect');
  pass(E2); pass(E2);
  assert.equal(engine(E2)?.state, 'usable');
});

test('the snapshot gives the worst-case detection time per kind and the HERE_I_AM bound, and the probe RTT', () => {
  const { cluster, engine, join } = setup({ tcp: ON, icmp: { ...ON, intervalMs: 1000, timeoutMs: 500, fall: 2 } });
  assert.deepEqual(cluster.service(0)?.detection, { hereIAmMs: 30_000, icp: null, tcp: 16_000, icmp: 2_500 });
  join(E1);
  assert.equal(engine(E1)?.probeRttMs, null, 'no probe yet');
  cluster.probe(E1, { kind: 'tcp', ok: true, rttMs: 1.5 });
  assert.equal(engine(E1)?.probeRttMs, 1.5);
  cluster.probe(E1, { kind: 'icmp', ok: true, rttMs: 0.25 });
  assert.equal(engine(E1)?.probeRttMs, 0.25, 'ICMP, the lowest layer, is preferred');
});
