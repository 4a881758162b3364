// The userland backend's kernel guard (table inet wccpd_userland) against an unlucky admin, with the native addons in
// namespaces this test creates (test/dataplane/topology.ts): `nft flush table` or a deletion of the table lets the
// kernel forward the service's new connections too, silently. The backend's `nft monitor` notices, puts the guard back
// in one transaction and counts it; an admin's own table flushed or deleted changes nothing.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import type { ServiceRedirect } from '../../../src/dataplane/index.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';
import { nativeUserlandGateway } from '../userland-gw.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (userland guard)');
const E1 = '192.0.2.11';

describe('userland data plane: its guard table removed by someone else', { skip }, () => {
  const topo = new Topology('ugrd');
  // Every bucket to engine 1: without redirection the origin would answer.
  const service: ServiceRedirect = webCache(() => E1, [E1]);
  const gw = nativeUserlandGateway(topo, service);
  const restores = async (): Promise<number> => Number((await gw().restored()).nftTables);
  /** Waits (bounded) until the guard was put back `n` times in all. */
  async function restoredTimes(n: number): Promise<number> {
    let got = await restores();
    for (let i = 0; i < 100 && got < n; i++) {
      await sleep(100);
      got = await restores();
    }
    return got;
  }
  const guard = (): string => topo.inGw('nft list table inet wccpd_userland');

  test("an admin's own table flushed, emptied of a chain or deleted: nothing is put back", async () => {
    assert.equal((await topo.probe('198.51.100.5', 80, 1500)).data, 'engine1');
    await sleep(1000); // the monitor's first check after its start
    topo.inGw(
      "nft add table inet admin; nft add chain inet admin input '{ type filter hook input priority 0; policy accept; }'; " +
        'nft add rule inet admin input tcp dport 22 accept; nft add chain inet admin spare',
    );
    topo.inGw('nft flush table inet admin; nft delete chain inet admin spare; nft delete table inet admin');
    await sleep(1000);
    assert.equal(await restores(), 0);
  });

  test('`nft flush table inet wccpd_userland`: the guard is put back and counted, new connections reach the engine', async () => {
    const before = guard();
    assert.match(before, /drop comment "wccpd userland service 0"/);
    topo.inGw('nft flush table inet wccpd_userland');
    assert.equal(await restoredTimes(1), 1);
    assert.match(guard(), /drop comment "wccpd userland service 0"/);
    assert.equal((await topo.probe('198.51.100.6', 80, 1500)).data, 'engine1');
  });

  test('`nft delete table inet wccpd_userland` (a firewall reload): put back the same way', async () => {
    topo.inGw('nft delete table inet wccpd_userland');
    assert.equal(await restoredTimes(2), 2);
    assert.match(guard(), /drop comment "wccpd userland service 0"/);
    assert.equal((await topo.probe('198.51.100.7', 80, 1500)).data, 'engine1');
  });
});
