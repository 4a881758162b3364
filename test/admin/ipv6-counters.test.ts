// A service that redirects IPv6 (issue 36): its figures count both families, and the IPv6 part is in status
// (counters.ipv6), on /metrics (wccpd_ipv6_*) and in `wccpctl status`; a service without it has none (null, no
// sample, no row), not a made-up 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ClusterModel, trafficOf } from '../../src/admin/cluster-model.js';
import { createMetrics } from '../../src/admin/metrics.js';
import { renderStatus } from '../../src/admin/render.js';
import type { RedirectCounters } from '../../src/dataplane/index.js';
import { idleDeps } from './model-fixture.js';
import { fakeClock, testCluster } from '../cluster/helpers.js';

const E1 = '192.0.2.11';
const c = (packets: number, bytes = packets * 60) => ({ packets, bytes });

function model(counters: RedirectCounters, withoutIpv6: readonly string[] = []): ClusterModel {
  const clock = fakeClock();
  return new ClusterModel({
    cluster: testCluster({ clock }).cluster,
    clock,
    dataplane: () => ({
      backend: 'nft',
      detail: '',
      bridgeNetfilter: null,
      restored: {
        ipRules: 0,
        ipRoutes: 0,
        ipGuard: 0,
        nftTables: 0,
        failedChecks: 0,
        ipv6WithoutNeighbour: withoutIpv6.length > 0 ? 3 : 0,
        enginesWithoutIpv6: withoutIpv6,
      },
    }),
    ...idleDeps,
    traffic: () => Promise.resolve(trafficOf(counters)),
  });
}

const both: RedirectCounters = {
  buckets: new Map(),
  engines: new Map([[0, new Map([[E1, c(30)]])]]),
  services: new Map([[0, { denied: c(4), unassigned: c(5) }]]),
  ipv6: {
    buckets: new Map(),
    engines: new Map([[0, new Map([[E1, c(12)]])]]),
    services: new Map([[0, { denied: c(1), unassigned: c(2) }]]),
  },
};

test('the IPv6 part of a service that redirects IPv6: status, /metrics, wccpctl status', async () => {
  const m = model(both);
  const s = (await m.statusWithTraffic()).services[0]!;
  assert.equal(s.counters.packetsRedirected, 30, 'both families');
  assert.deepEqual(s.counters.ipv6, {
    packetsRedirected: 12,
    bytesRedirected: 720,
    packetsDenied: 1,
    packetsUnassigned: 2,
  });
  const metrics = await createMetrics(m).render();
  assert.match(metrics, /^wccpd_ipv6_redirected_packets_total\{service="0"\} 12$/m);
  assert.match(metrics, /^wccpd_ipv6_packets_unassigned_total\{service="0"\} 2$/m);
  assert.match(
    renderStatus(await m.statusWithTraffic()),
    /Of which IPv6:\s+12 packets \(720 bytes\) redirected, 1 denied, 2 unassigned$/m,
  );
});

test('a service without IPv6: no IPv6 figure, no sample, no row', async () => {
  const { ipv6: _, ...ipv4 } = both;
  const m = model(ipv4);
  const status = await m.statusWithTraffic();
  assert.equal(status.services[0]?.counters.ipv6, null);
  assert.doesNotMatch(await createMetrics(m).render(), /^wccpd_ipv6_/m);
  assert.doesNotMatch(renderStatus(status), /IPv6/);
});

test('engines without an IPv6 neighbour: counted on /metrics and named in wccpctl status while they lack it', async () => {
  const m = model(both, ['192.0.2.12']);
  assert.match(await createMetrics(m).render(), /^wccpd_dataplane_ipv6_no_neighbour_total 3$/m);
  assert.match(
    renderStatus(await m.statusWithTraffic()),
    /Engines without an IPv6 neighbour:\s+192\.0\.2\.12 \(their IPv6 is not redirected\)$/m,
  );
  assert.doesNotMatch(renderStatus(await model(both).statusWithTraffic()), /without an IPv6 neighbour/);
});

test('data-plane counters without labels: a 0 read is a 0 sample; one this data plane does not count, no sample', async () => {
  // The fixture's `restored` lists no enginesMoved: that one is not counted, the others are.
  const counted = await createMetrics(model(both)).render();
  assert.match(counted, /^wccpd_dataplane_restore_failures_total 0$/m);
  assert.match(counted, /^wccpd_dataplane_ipv6_no_neighbour_total 0$/m);
  assert.doesNotMatch(counted, /^wccpd_dataplane_engines_moved_total /m);
  assert.match(counted, /^# TYPE wccpd_dataplane_engines_moved_total counter$/m);
  const clock = fakeClock();
  const none = new ClusterModel({
    cluster: testCluster({ clock }).cluster,
    clock,
    dataplane: () => ({ backend: 'none', detail: '', bridgeNetfilter: null }),
    ...idleDeps,
    traffic: () => Promise.resolve({ engines: new Map() }),
  });
  const text = await createMetrics(none).render();
  for (const name of ['restore_failures', 'ipv6_no_neighbour', 'engines_moved'])
    assert.doesNotMatch(text, new RegExp(`^wccpd_dataplane_${name}_total `, 'm'));
});
