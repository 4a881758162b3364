// The ingress backend's packets past a full flow map (dataplane.flows.max) reach status, /metrics and `wccpctl
// status`; with a backend that does not count them there is no figure (null, no sample, no row), not a made-up 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ClusterModel } from '../../src/admin/cluster-model.js';
import type { TrafficCounters } from '../../src/admin/cluster-model.js';
import { createMetrics } from '../../src/admin/metrics.js';
import { renderStatus } from '../../src/admin/render.js';
import { idleDeps } from './model-fixture.js';
import { fakeClock, testCluster } from '../cluster/helpers.js';

function model(traffic: TrafficCounters): ClusterModel {
  const clock = fakeClock();
  return new ClusterModel({
    cluster: testCluster({ clock }).cluster,
    clock,
    dataplane: () => ({ backend: 'ingress', detail: '', bridgeNetfilter: null }),
    ...idleDeps,
    traffic: () => Promise.resolve(traffic),
  });
}

const service = (flowsFull?: number) =>
  new Map([
    [
      0,
      {
        denied: { packets: 0 },
        unassigned: { packets: 2 },
        ...(flowsFull !== undefined ? { flowsFull: { packets: flowsFull } } : {}),
      },
    ],
  ]);

test('packets past a full flow map: in status, on /metrics and in wccpctl status where the backend counts them', async () => {
  const m = model({ engines: new Map(), services: service(7) });
  const status = await m.statusWithTraffic();
  assert.equal(status.services[0]?.counters.packetsFlowsFull, 7);
  assert.match(await createMetrics(m).render(), /^wccpd_packets_flows_full_total\{service="0"\} 7$/m);
  assert.match(renderStatus(status), /Packets past a full flow map:\s+7$/m);
});

test('a backend that does not count them: null in status, no sample, no row', async () => {
  const m = model({ engines: new Map(), services: service() });
  const status = await m.statusWithTraffic();
  assert.equal(status.services[0]?.counters.packetsFlowsFull, null);
  assert.doesNotMatch(await createMetrics(m).render(), /^wccpd_packets_flows_full_total\{/m);
  assert.doesNotMatch(renderStatus(status), /full flow map/);
});
