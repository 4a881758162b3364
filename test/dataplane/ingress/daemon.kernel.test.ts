// wccpd with `dataplane.backend: ingress`, built, in a namespace gateway of its own (names carry process.pid) under the
// unit's user and capabilities, with a registered test engine: new connections reach the engine through the netdev
// table, with no ip rule and no inet table of ours (an nft run's fail-closed table is removed at start); status and
// /metrics say so, and the buckets view lists the buckets the engine took as in a move; SIGTERM leaves nothing.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { BucketsView, StatusView } from '../../../src/admin/api-types.js';
import { waitFor } from '../../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../../helpers/prom-text.js';
import { startGwDaemon, type GwDaemon, needGwDaemon } from '../gw-daemon.js';
import { Topology } from '../topology.js';

const skip = needGwDaemon();

describe('wccpd with the ingress backend', { skip }, () => {
  const topo = new Topology('igd', 1);
  let d: GwDaemon | undefined;
  before(() => topo.up());
  after(() => topo.downAfter(() => d?.close()));

  test("a registered engine gets the clients' connections; SIGTERM removes the table and traffic goes direct", async () => {
    // An nft run's fail-closed table, left by its cleanup: it would refuse the bypassed connections of service 0.
    topo.inGw(
      `nft add table inet wccpd_closed; nft add chain inet wccpd_closed closed_0 '{ type filter hook forward priority 0; }'; ` +
        `nft add rule inet wccpd_closed closed_0 tcp dport 80 reject with tcp reset`,
    );
    d = startGwDaemon(topo, { backend: 'ingress', asUnitUser: true });
    const daemon = d;
    try {
      // No engine yet: bypass, not refused.
      await waitFor('the daemon listening', async () => (daemon.api('/api/v1/status') !== '' ? true : null), 30_000);
      assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd_closed/);
      await waitFor(
        'the removal logged',
        async () =>
          /removed table inet wccpd_closed left by the nft or userland data plane/.test(daemon.output.join(''))
            ? true
            : null,
        10_000,
      );
      assert.equal((await topo.probe('198.51.100.7')).data, 'origin');
      daemon.startEngine(120);
      const dest = '198.51.100.7';
      await waitFor(
        'the engine reached through the ingress data plane',
        async () => ((await topo.probe(dest)).data === 'engine1' ? true : null),
        30_000,
      );
      // Every bucket: one destination each (XOR of the address bytes), all to the only engine.
      const bad: string[] = [];
      for (let i = 0; i < 256; i += 17) {
        const res = await topo.probe(`198.51.100.${i}`);
        if (res.data !== 'engine1') bad.push(`198.51.100.${i}: ${res.data || res.code}`);
      }
      assert.deepEqual(bad, []);

      const tables = topo.inGw('nft list tables');
      assert.match(tables, /^table netdev wccpd_ingress$/m);
      assert.doesNotMatch(tables, /^table inet wccpd$/m, 'no nft backend table');
      assert.doesNotMatch(topo.inGw('ip rule list'), /^204[789]:/m, 'no ip rule: the gateway keeps the rule-free path');

      const status = JSON.parse(daemon.api('/api/v1/status')) as StatusView;
      assert.equal(status.dataplane.backend, 'ingress');
      assert.match(status.dataplane.detail, /flow map of 262143 per service, idle 600 s/);
      assert.equal(status.services[0]?.counters.packetsFlowsFull, 0, 'counted (none past a full map), not null');
      const metrics = parsePrometheusText(daemon.api('/metrics')).samples;
      const redirected = sampleValue(metrics, 'wccpd_redirected_packets_total', {
        service: '0',
        engine: topo.engineAddress(0),
      });
      assert.ok((redirected ?? 0) >= 3 * 17, `redirected packets ${redirected}`);
      assert.ok(
        (sampleValue(metrics, 'wccpd_dataplane_apply_seconds_count', { backend: 'ingress', outcome: 'ok' }) ?? 0) >= 1,
      );
      // The engine took every bucket from no engine: each is in a move for flows.idle (10 minutes), where a connection
      // older than the move would still be routed normally, and the admin surfaces say so.
      const buckets = JSON.parse(daemon.api('/api/v1/services/0/buckets')) as BucketsView;
      assert.equal(buckets.moved?.length, 256);
      assert.ok(
        buckets.moved?.every((m) => m.before === 'unassigned' && m.engineBefore === null && m.endsInMs > 0),
        JSON.stringify(buckets.moved?.[0]),
      );
      assert.equal(status.services[0]?.movedBuckets, 256);
      assert.equal(sampleValue(metrics, 'wccpd_buckets_moved', { service: '0' }), 256);

      process.kill(daemon.pid, 'SIGTERM');
      assert.equal(await daemon.exited, 0);
      assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd/);
      assert.equal((await topo.probe(dest)).data, 'origin');
    } catch (e) {
      throw new Error(`${(e as Error).message}\n${daemon.output.join('').slice(-3000)}`);
    }
  });
});
