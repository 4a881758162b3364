// The admin model reads the data plane's counters at most once a second and reuses that read meanwhile. The clock
// is the wall clock: set back an hour, the last read lies in the future and must not be reused for the hour (every
// view's counters would stand still).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster } from '../../src/cluster/index.js';
import { ClusterModel } from '../../src/admin/cluster-model.js';
import type { TrafficCounters } from '../../src/admin/cluster-model.js';
import { fakeClock, serviceConfig } from '../cluster/helpers.js';

test('the clock set back an hour: the counters are read again, not reused for the hour', async () => {
  const clock = fakeClock(10 * 3_600_000);
  const cluster = new Cluster({ clock, routerAddress: '192.0.2.1', hereIAmMs: 10_000, services: [serviceConfig()] });
  let reads = 0;
  const model = new ClusterModel({
    cluster,
    clock,
    dataplane: () => ({ backend: 'none', detail: '', bridgeNetfilter: null }),
    inForce: () => null,
    traffic: async (): Promise<TrafficCounters> => {
      reads++;
      return { engines: new Map() };
    },
    dropped: () => ({}),
    which: () => null,
    admin: () => ({
      eventClients: 0,
      eventClientsMax: 64,
      eventClientsRefused: 0,
      eventClientsDropped: 0,
      hostRefused: 0,
      connectionsRefused: 0,
    }),
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
