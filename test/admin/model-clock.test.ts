// The admin model reads the data plane's counters at most once a second and reuses that read meanwhile, on the
// monotonic clock; the dates it shows (last HERE_I_AM, events) are wall-clock times, read when shown, so a step of
// the wall clock shows at once and moves nothing else (src/clock.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster } from '../../src/cluster/index.js';
import { ClusterModel } from '../../src/admin/cluster-model.js';
import type { TrafficCounters } from '../../src/admin/cluster-model.js';
import { idleDeps } from './model-fixture.js';
import { fakeClock, testCluster } from '../cluster/helpers.js';

function makeModel(clock: ReturnType<typeof fakeClock>, cluster: Cluster, traffic: () => Promise<TrafficCounters>) {
  return new ClusterModel({
    cluster,
    clock,
    dataplane: () => ({ backend: 'none', detail: '', bridgeNetfilter: null }),
    ...idleDeps,
    traffic,
  });
}

test('the wall clock stepped an hour forward, then back: the views date by it, ages and reuse run on', async () => {
  const { clock, cluster, say } = testCluster();
  let reads = 0;
  const m = makeModel(clock, cluster, async () => {
    reads++;
    return { engines: new Map() };
  });
  say('192.0.2.11');
  const heardAt = clock.wall();
  const joined = m.recentEvents(10).find((e) => e.type === 'engine-state');
  assert.equal(joined?.time, heardAt);
  assert.equal(joined?.['at'], heardAt, "the cluster's own time of the event, as a wall-clock time");
  await m.engines(0);
  clock.advance(400);
  clock.stepWall(3_600_000);
  let e = (await m.engines(0))?.engines[0];
  assert.equal(reads, 1, 'the read of 400 ms ago is reused');
  assert.equal(e?.lastHereIAmAgoMs, 400);
  assert.equal(
    e?.lastHereIAm,
    new Date(clock.wall() - 400).toISOString(),
    'an hour later than heard: the clock says so',
  );
  clock.stepWall(-2 * 3_600_000);
  say('192.0.2.11');
  clock.advance(100);
  e = (await m.engines(0))?.engines[0];
  assert.equal(e?.lastHereIAmAgoMs, 100);
  assert.equal(e?.lastHereIAm, new Date(clock.wall() - 100).toISOString());
  say('192.0.2.12');
  const last = m.recentEvents(10).at(-1);
  assert.equal(last?.time, clock.wall(), 'an event dated by the wall clock set back');
  assert.equal(m.status().uptimeSeconds, 1, 'uptime is monotonic: 0.5 s, not an hour either way');
});

test('a clock that goes back an hour (an injected one; the monotonic one never does): the counters are read again, not reused for the hour', async () => {
  const { clock, cluster } = testCluster({ clock: fakeClock(10 * 3_600_000) });
  let reads = 0;
  const model = makeModel(clock, cluster, async () => {
    reads++;
    return { engines: new Map() };
  });
  await model.engines(0);
  await model.engines(0);
  assert.equal(reads, 1, 'reused within the second');
  clock.advance(-3_600_000);
  await model.engines(0);
  assert.equal(reads, 2, 'read again after the step');
  clock.advance(500);
  await model.engines(0);
  assert.equal(reads, 2, 'then reused for a second again');
});
