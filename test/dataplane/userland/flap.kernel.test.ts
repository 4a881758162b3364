// A link flap under the userland backend with the native pcap and raw-socket addons (root, namespaces this test
// creates, test/dataplane/topology.ts): a native pcap session on a link that goes down captures nothing once it is up
// again, and an injection session fails on a link deleted and re-created, silently, while the kernel guard still drops
// the service's new connections. The backend reopens them when `ip monitor link` tells the link is back.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import type { ServiceRedirect } from '../../../src/dataplane/index.js';
import { webCache } from '../service-fixture.js';
import { Topology, type ProbeResult } from '../topology.js';
import { nativeUserlandGateway } from '../userland-gw.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (userland link flaps)');
const E1 = '192.0.2.11';

describe('userland data plane across a link flap, native addons', { skip }, () => {
  const topo = new Topology('uflap');
  // Every bucket to engine 1: without redirection the origin would answer.
  const service: ServiceRedirect = webCache(() => E1, [E1]);
  const gw = nativeUserlandGateway(topo, service);

  /** New connections until one reaches engine 1 (at most 20: the reopen follows the link's return within ~1 s). */
  async function untilEngine(host: string): Promise<ProbeResult> {
    let res = await topo.probe(host, 80, 1500);
    for (let i = 0; i < 20 && res.data !== 'engine1'; i++) {
      await sleep(250);
      res = await topo.probe(host, 80, 1500);
    }
    return res;
  }

  test('a client interface that goes down and up again: new connections are redirected again', async () => {
    assert.equal((await topo.probe('198.51.100.5', 80, 1500)).data, 'engine1');
    topo.inGw('ip link set c0 down; ip link set c0 up');
    const res = await untilEngine('198.51.100.6');
    assert.equal(res.data, 'engine1', `after the flap: ${res.data || String(res.code)}`);
    const stats = await gw().stats();
    assert.equal(stats.capturesReopened, 1, 'the capture on c0 reopened once');
  });

  test('the engine segment deleted and re-created (a new ifindex): frames reach the engine again', async () => {
    topo.inGw(
      'ip link del br0; ip link add br0 type bridge; ip addr add 192.0.2.1/25 dev br0; ' +
        'ip link set e1 master br0; ip link set e2 master br0; ip link set br0 up',
    );
    const res = await untilEngine('198.51.100.7');
    assert.equal(res.data, 'engine1', `after br0 was re-created: ${res.data || String(res.code)}`);
    const stats = await gw().stats();
    assert.equal(stats.capturesReopened, 2, 'the injection session on br0 reopened');
  });
});
