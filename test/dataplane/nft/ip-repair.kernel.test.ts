// The slots' ip rules and routes against an unlucky admin, in the real kernel (namespaces named with process.pid): a
// link that goes down takes every route through it along, silently, and redirection stops (packets find no route in
// the slot's table and go on to the main one); an admin's script deletes rules. wccpd puts back its own objects, and
// only those: at the link's return (`ip monitor`), and by a periodic read-back.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { NftRedirector } from '../../../src/dataplane/index.js';
import { routeTable } from '../../../src/dataplane/kernel/names.js';
import { recordingLog } from '../../../src/log.js';
import { waitFor } from '../../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../../helpers/prom-text.js';
import type { StatusView } from '../../../src/admin/api-types.js';
import { startGwDaemon, type GwDaemon, needGwDaemon } from '../gw-daemon.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (nft backend kernel tests)');
const skipDaemon = needGwDaemon();
const E1 = '192.0.2.11';
const DEST = '198.51.100.7';

describe("the slots' ip objects come back after someone else removed them", { skip }, () => {
  const topo = new Topology('iprep');
  before(async () => {
    await topo.up();
  });
  after(async () => {
    await topo.down();
  });

  /** The slot's routing table (the one rule at priority 2048 names it). */
  const slotTable = (): string => {
    const rules = JSON.parse(topo.inGw('ip -j rule list')) as { priority?: number; table?: string }[];
    const ours = rules.filter((r) => r.priority === 2048);
    assert.equal(ours.length, 1, `one slot rule: ${JSON.stringify(rules)}`);
    return String(ours[0]!.table);
  };
  const routeOf = (table: string): string => topo.inGw(`ip route show table ${table}`).trim();
  const flap = (): void => void topo.inGw('ip link set br0 down; ip link set br0 up');

  test('a link that went down and up: the route is gone and traffic goes direct, until checkIpObjects puts it back', async () => {
    const log = recordingLog();
    const r = new NftRedirector({ netns: topo.gw, log, ipCheckMs: 0, watchLinks: false });
    await r.start();
    try {
      await r.apply(webCache(() => E1, [E1]));
      assert.equal((await topo.probe(DEST)).data, 'engine1');
      const held = await topo.hold(DEST);
      assert.equal(held.first, 'engine1');
      const table = slotTable();
      assert.equal(Number(table) >= routeTable(1), true);
      assert.match(routeOf(table), /^default via 192\.0\.2\.11 dev br0/);

      flap();
      assert.equal(routeOf(table), '', 'the kernel took the route along with the link');
      assert.equal((await topo.probe(DEST)).data, 'origin', 'redirection stopped silently');

      const missing = await r.checkIpObjects();
      assert.deepEqual(missing?.rules, []);
      assert.equal(missing?.routes.length, 1);
      assert.equal(missing?.guard, false);
      assert.match(routeOf(table), /^default via 192\.0\.2\.11 dev br0/);
      assert.equal((await topo.probe(DEST)).data, 'engine1', 'new connections reach the engine again');
      assert.equal(await held.send('still there?'), 'engine1', 'the held connection kept its engine');
      assert.deepEqual(r.restored(), {
        ipRules: 0,
        ipRoutes: 1,
        ipGuard: 0,
        enginesMoved: 0,
        nftTables: 0,
        failedChecks: 0,
      });
      assert.ok(log.lines.some((l) => l.level === 'warn' && /removed by someone else/.test(l.msg ?? '')));

      // Nothing missing: nothing done, nothing logged.
      const before = log.lines.length;
      const again = await r.checkIpObjects();
      assert.deepEqual(
        { rules: again?.rules, routes: again?.routes, guard: again?.guard },
        { rules: [], routes: [], guard: false },
      );
      assert.equal(log.lines.length, before);
    } finally {
      await r.stop();
    }
  });

  test('with the link monitor, the route is back after the link returns, with no call', async () => {
    const r = new NftRedirector({ netns: topo.gw, ipCheckMs: 0 });
    await r.start();
    const monitor = r.ipMonitorPid();
    try {
      assert.ok(monitor !== undefined, 'an ip monitor runs');
      await r.apply(webCache(() => E1, [E1]));
      const table = slotTable();
      flap();
      await waitFor('the route back', async () => (/^default via 192\.0\.2\.11/.test(routeOf(table)) ? true : null));
      assert.equal((await topo.probe(DEST)).data, 'engine1');
      assert.equal(r.restored().ipRoutes >= 1, true);
    } finally {
      await r.stop();
    }
    assert.equal(r.ipMonitorPid(), undefined);
    assert.throws(() => process.kill(monitor!, 0), 'stop() ended the ip monitor');
  });

  test("an admin's script deletes wccpd's rules: the periodic check puts back ours and never touches theirs", async () => {
    topo.inGw('ip rule add fwmark 0x5 table 100 priority 10000');
    const r = new NftRedirector({ netns: topo.gw, ipCheckMs: 200, watchLinks: false });
    await r.start();
    try {
      await r.apply(webCache(() => E1, [E1]));
      const rulesBefore = topo.inGw('ip rule list');
      topo.inGw('ip rule del priority 2048; ip rule del priority 2047; ip rule del priority 2049');
      assert.equal((await topo.probe(DEST)).data, 'origin', 'no rule: redirection stopped');
      await waitFor('the rules back', async () => (topo.inGw('ip rule list') === rulesBefore ? true : null));
      assert.equal((await topo.probe(DEST)).data, 'engine1');
      assert.deepEqual(r.restored(), {
        ipRules: 1,
        ipRoutes: 0,
        ipGuard: 1,
        enginesMoved: 0,
        nftTables: 0,
        failedChecks: 0,
      });
      // The admin deletes their own rule: it stays deleted (wccpd puts back only its own).
      topo.inGw('ip rule del priority 10000');
      const without = topo.inGw('ip rule list');
      await new Promise((res) => setTimeout(res, 600));
      assert.equal(topo.inGw('ip rule list'), without);
      assert.doesNotMatch(without, /10000:/);
    } finally {
      await r.stop();
      topo.inGw('ip rule del priority 10000 2>/dev/null || true');
    }
  });

  test('while the link stays down nothing can be put back: the check says so, and succeeds once the link is up', async () => {
    const log = recordingLog();
    const r = new NftRedirector({ netns: topo.gw, log, ipCheckMs: 0, watchLinks: false });
    await r.start();
    try {
      await r.apply(webCache(() => E1, [E1]));
      const table = slotTable();
      topo.inGw('ip link set br0 down');
      await assert.rejects(r.checkIpObjects(), /192\.0\.2\.11/);
      topo.inGw('ip link set br0 up');
      const missing = await r.checkIpObjects();
      assert.equal(missing?.routes.length, 1);
      assert.match(routeOf(table), /^default via 192\.0\.2\.11/);
    } finally {
      await r.stop();
    }
  });

  test(
    "the daemon, as the unit's user: the link flaps, the route comes back by itself, status and /metrics say so",
    { skip: skipDaemon },
    async () => {
      let d: GwDaemon | undefined;
      try {
        d = startGwDaemon(topo, { backend: 'nft', asUnitUser: true });
        d.startEngine(120);
        await waitFor(
          'the engine reached through the nft data plane',
          async () => ((await topo.probe(DEST)).data === 'engine1' ? true : null),
          30_000,
        );
        flap();
        await waitFor(
          'redirection back after the flap',
          async () =>
            (await topo.probe(DEST)).data === 'engine1' && /^default via/.test(routeOf(slotTable())) ? true : null,
          30_000,
        );
        const status = JSON.parse(d.api('/api/v1/status')) as StatusView;
        assert.ok((status.dataplane.restored?.ipRoutes ?? 0) >= 1, JSON.stringify(status.dataplane));
        const metrics = parsePrometheusText(d.api('/metrics')).samples;
        assert.ok((sampleValue(metrics, 'wccpd_dataplane_restored_total', { kind: 'ip-route' }) ?? 0) >= 1);
        assert.match(d.output.join(''), /removed by someone else/);
      } finally {
        await d?.close();
      }
    },
  );
});
