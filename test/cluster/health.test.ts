// Active health probes in the cluster, under a fake clock: rise/fall per kind, bucket movement, ICP MISS_NOFETCH
// draining, and the rule that probes never bring back (or make usable) an engine WCCP does not vouch for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { falseVerdictPerHour, probeFailureChance } from '../../src/cluster/index.js';
import type { EngineStateEvent, HealthSettings, ProbeKind, ProbeSettings } from '../../src/cluster/index.js';
import { hereIAm, testCluster } from './helpers.js';
import { seededUnit } from '../helpers/seeded.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const E3 = '192.0.2.13';
const OFF: ProbeSettings = { enabled: false, intervalMs: 5000, timeoutMs: 1000, rise: 2, fall: 3, hardFall: 2 };
const ON: ProbeSettings = { ...OFF, enabled: true };

function setup(health: Partial<Record<ProbeKind, ProbeSettings>> = { tcp: ON }) {
  const settings: HealthSettings = { http: OFF, icp: OFF, tcp: OFF, icmp: OFF, ...health };
  const group = testCluster({ health: settings });
  const { cluster, events } = group;
  const fail = (addr: string, kind: ProbeKind = 'tcp', detail = 'connect timeout 1s') =>
    cluster.probe(addr, { kind, ok: false, detail });
  const pass = (addr: string, kind: ProbeKind = 'tcp', icpOpcode?: string) =>
    cluster.probe(addr, { kind, ok: true, rttMs: 0.4, ...(icpOpcode !== undefined ? { icpOpcode } : {}) });
  const stateEvents = () => events.filter((e): e is EngineStateEvent => e.type === 'engine-state');
  return { ...group, fail, pass, stateEvents };
}

test('fall - 1 failures change nothing; the fall-th makes the engine suspect and moves only its buckets', () => {
  const { cluster, engine, buckets, join, fail, stateEvents } = setup();
  join(E1);
  join(E2);
  join(E3);
  const before = buckets();
  const changeNumber = cluster.service(0)?.changeNumber;
  fail(E2);
  fail(E2);
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
  assert.deepEqual(last && [last.engine, last.from, last.to, last.reason], [
    E2,
    'usable',
    'suspect',
    'tcp probe: 3 consecutive failures (connect timeout 1s)',
  ]);
});

test('a pass resets the failure count: failures must be consecutive', () => {
  const { engine, join, fail, pass } = setup();
  join(E1);
  fail(E1);
  fail(E1);
  pass(E1);
  fail(E1);
  fail(E1);
  assert.equal(engine(E1)?.state, 'usable');
  fail(E1);
  assert.equal(engine(E1)?.state, 'suspect');
});

test('rise consecutive passes bring a suspect engine back with its old buckets', () => {
  const { engine, buckets, join, fail, pass, stateEvents } = setup();
  join(E1);
  join(E2);
  const before = buckets();
  fail(E2);
  fail(E2);
  fail(E2);
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
  assert.deepEqual(last && [last.from, last.to, last.reason], [
    'suspect',
    'usable',
    'probes pass again (tcp: 2 consecutive passes)',
  ]);
});

test('recovery needs rise passes of every enabled kind, not only the one that failed', () => {
  const { engine, join, fail, pass } = setup({ tcp: ON, icmp: { ...ON, rise: 3 } });
  join(E1);
  join(E2);
  fail(E1, 'tcp', 'connection refused');
  fail(E1, 'tcp', 'connection refused');
  fail(E1, 'tcp', 'connection refused');
  assert.equal(engine(E1)?.reason, 'tcp probe: 3 consecutive failures (connection refused)');
  pass(E1, 'tcp');
  pass(E1, 'tcp');
  pass(E1, 'tcp');
  pass(E1, 'icmp');
  pass(E1, 'icmp');
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
  join(E1);
  join(E2);
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
  join(E1);
  join(E2);
  clock.advance(20_000);
  say(E1);
  clock.advance(10_000);
  cluster.tick();
  assert.equal(engine(E2), undefined, 'no HERE_I_AM for 30 s: gone');
  for (let i = 0; i < 5; i++) {
    pass(E2, 'tcp');
    pass(E2, 'icp', 'MISS');
  }
  assert.equal(engine(E2), undefined);
  assert.equal(buckets().filter((b) => b === E2).length, 0);
  assert.deepEqual(cluster.probeTargets(), [E1], 'a gone engine is not probed');
});

test('probes never make a joining engine usable; a failing one is suspect as soon as its handshake completes', () => {
  const { cluster, engine, fail, pass } = setup();
  cluster.hereIAm(hereIAm(E1));
  for (let i = 0; i < 5; i++) pass(E1);
  assert.equal(engine(E1)?.state, 'joining');
  fail(E1);
  fail(E1);
  fail(E1);
  assert.equal(engine(E1)?.state, 'joining');
  const plan = cluster.iSeeYou(0, E1);
  cluster.hereIAm(hereIAm(E1, { receivedId: plan?.receiveId ?? 0 }));
  assert.equal(engine(E1)?.state, 'suspect');
  assert.equal(engine(E1)?.reason, 'tcp probe: 3 consecutive failures (connect timeout 1s)');
});

test('an unhealthy engine that leaves and returns must still earn its rise passes', () => {
  const { clock, cluster, engine, join, say, fail, pass } = setup();
  join(E1);
  join(E2);
  fail(E2);
  fail(E2);
  fail(E2);
  for (let t = 0; t < 3; t++) {
    clock.advance(10_000);
    say(E1);
    cluster.tick();
  }
  assert.equal(engine(E2), undefined);
  join(E2);
  assert.equal(engine(E2)?.state, 'suspect');
  pass(E2);
  pass(E2);
  assert.equal(engine(E2)?.state, 'usable');
});

test('the snapshot gives the worst-case detection time per kind and the HERE_I_AM bound, and the probe RTT', () => {
  const { cluster, engine, join } = setup({ tcp: ON, icmp: { ...ON, intervalMs: 1000, timeoutMs: 500, fall: 2 } });
  const d = cluster.service(0)?.detection;
  assert.deepEqual(d && { ...d, probes: d.probes.map((p) => [p.kind, p.worstCaseMs, p.hardWorstCaseMs]) }, {
    hereIAmMs: 30_000,
    http: null,
    icp: null,
    tcp: 16_000,
    icmp: 2_500,
    probes: [
      ['tcp', 16_000, 10_050],
      ['icmp', 2_500, 2_050],
    ],
  });
  join(E1);
  assert.equal(engine(E1)?.probeRttMs, null, 'no probe yet');
  cluster.probe(E1, { kind: 'tcp', ok: true, rttMs: 1.5 });
  assert.equal(engine(E1)?.probeRttMs, 1.5);
  cluster.probe(E1, { kind: 'icmp', ok: true, rttMs: 0.25 });
  assert.equal(engine(E1)?.probeRttMs, 0.25, 'ICMP, the lowest layer, is preferred');
});

test('hard evidence: hardFall consecutive refusals make the engine suspect; a silent failure in between restarts that count', () => {
  const { engine, join, cluster } = setup({ tcp: { ...ON, fall: 5, hardFall: 2 } });
  join(E1);
  join(E2);
  const refused = { kind: 'tcp' as const, ok: false as const, detail: 'connection refused (port 3128)', hard: true };
  const silent = { kind: 'tcp' as const, ok: false as const, detail: 'connect timeout 1s (port 3128)' };
  cluster.probe(E1, refused);
  cluster.probe(E1, silent);
  cluster.probe(E1, refused);
  assert.equal(engine(E1)?.state, 'usable', 'refused, silent, refused: 3 failures of fall 5, no 2 hard ones in a row');
  cluster.probe(E1, refused);
  assert.equal(engine(E1)?.state, 'suspect');
  assert.equal(engine(E1)?.reason, 'tcp probe: 2 consecutive hard failures (connection refused (port 3128))');
  for (let i = 0; i < 5; i++) cluster.probe(E2, silent);
  assert.equal(
    engine(E2)?.reason,
    'tcp probe: 5 consecutive failures (connect timeout 1s (port 3128))',
    'silence needs the full fall',
  );
});

test('probes that pass vouch for an engine whose HERE_I_AMs are lost: removed after 9 x HERE_I_AM_T, not 3 x', () => {
  const { clock, cluster, engine, buckets, join, pass } = setup();
  join(E1);
  join(E2);
  const before = buckets();
  const keepE1 = () => cluster.hereIAm(hereIAm(E1, { receivedId: cluster.service(0)?.receiveId ?? 0 }));
  // E2's HERE_I_AMs stop arriving; its proxy keeps answering every probe interval.
  for (let t = 0; t < 85_000; t += 5000) {
    clock.advance(5000);
    pass(E2);
    pass(E1);
    if (t % 10_000 === 0) keepE1();
    cluster.tick();
  }
  assert.equal(engine(E2)?.state, 'usable', '85 s of silence with passing probes: still usable');
  assert.deepEqual(buckets(), before, 'and nothing moved');
  assert.ok(cluster.nextDue() !== null && (cluster.nextDue() ?? 0) <= clock.now() + 10_000);
  clock.advance(5000);
  pass(E2);
  keepE1();
  cluster.tick();
  assert.equal(engine(E2), undefined, 'gone after 90 s (9 x HERE_I_AM_T) of silence');
});

test("without passing probes the draft's 3 x HERE_I_AM_T removes the engine", () => {
  const { clock, cluster, engine, join, pass, fail } = setup();
  join(E1);
  join(E2);
  pass(E2);
  clock.advance(16_001);
  cluster.tick();
  assert.equal(engine(E2)?.state, 'usable');
  clock.advance(14_000);
  fail(E2);
  cluster.tick();
  assert.equal(
    engine(E2),
    undefined,
    'last pass 30 s ago (longer than the 16 s worst-case detection): the probes no longer vouch',
  );
});

test('the false-verdict model: exact values where it reduces to a product, bounds, and the hourly chance against a simulation', () => {
  // TCP with a 400 ms timeout: our three SYNs at 0, 100 and 200 ms, no kernel retry; each handshake needs 2 packets.
  assert.ok(Math.abs(probeFailureChance('tcp', { timeoutMs: 400 }, 0.2) - 0.36 ** 3) < 1e-12);
  // A 1.5 s timeout adds the kernel's own SYN retries at 1 s after each of ours.
  assert.ok(Math.abs(probeFailureChance('tcp', { timeoutMs: 1500 }, 0.2) - 0.36 ** 6) < 1e-12);
  assert.ok(Math.abs(probeFailureChance('icp', { timeoutMs: 400 }, 0.2) - 0.36) < 1e-12);
  for (const kind of ['http', 'tcp', 'icp', 'icmp'] as const) {
    assert.equal(probeFailureChance(kind, { timeoutMs: 400 }, 0), 0, `${kind}: no loss, no failure`);
    assert.equal(probeFailureChance(kind, { timeoutMs: 400 }, 1), 1, `${kind}: total loss, total failure`);
  }
  const http = [0.01, 0.05, 0.1, 0.2, 0.4].map((l) => probeFailureChance('http', { timeoutMs: 400 }, l));
  assert.deepEqual(
    [...http].sort((a, b) => a - b),
    http,
    'more loss, more failures',
  );
  assert.ok(
    (http[3] ?? 0) > probeFailureChance('tcp', { timeoutMs: 400 }, 0.2),
    'an HTTP exchange needs more packets than a handshake',
  );
  // Hourly chance of a run of `fall` failures, against a seeded simulation of 2000 hours of independent probes.
  const q = 0.5;
  const settings = { intervalMs: 1000, fall: 10 };
  const rand = seededUnit(7);
  let hoursWithRun = 0;
  for (let h = 0; h < 2000; h++) {
    let run = 0;
    let hit = false;
    for (let i = 0; i < 3600 && !hit; i++) {
      run = rand() < q ? run + 1 : 0;
      if (run >= settings.fall) hit = true;
    }
    if (hit) hoursWithRun++;
  }
  const simulated = hoursWithRun / 2000;
  const model = falseVerdictPerHour(q, settings);
  assert.ok(Math.abs(model - simulated) < 0.04, `model ${model.toFixed(3)} vs simulated ${simulated.toFixed(3)}`);
});

test('the snapshot carries, per enabled kind, the hard-evidence bound and the false-verdict chance at 5% and 20% loss', () => {
  const { cluster } = setup({ http: { ...ON, intervalMs: 100, timeoutMs: 400, fall: 12, hardFall: 2 } });
  const [http] = cluster.service(0)?.detection.probes ?? [];
  assert.deepEqual(http && [http.kind, http.worstCaseMs, http.hardWorstCaseMs, http.falseVerdict.map((f) => f.loss)], [
    'http',
    1600,
    250,
    [0.05, 0.2],
  ]);
  const [at5, at20] = http?.falseVerdict ?? [];
  assert.ok(at5 && at20 && at5.perHour < at20.perHour && at20.perHour < 1e-3, JSON.stringify(http?.falseVerdict));
});
