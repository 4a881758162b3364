// The ingress backend's table put back after someone else deletes it, in namespaces this test creates: a firewall
// reload's `flush ruleset`, an `nft flush table` (every chain emptied) and a deleted base chain each stop redirection
// until wccpd notices (nft monitor) and writes the table again; an admin's own table is left alone.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { IngressRedirector } from '../../../src/dataplane/index.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip'),
  'root with nft and ip (ingress backend restore tests)',
);
const E1 = '192.0.2.11';
const ORIGIN = '198.51.100.80';

/** Polls until `f` is true, at most `ms` (bounded). */
async function until(f: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await f()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

describe('ingress backend: the table put back after a firewall reload', { skip }, () => {
  const topo = new Topology('ingr');
  let r: IngressRedirector;
  const served = async (): Promise<string> => (await topo.probe(ORIGIN)).data;

  before(async () => {
    // Restores in a row are not slowed down here: each test restores once or twice within seconds.
    r = await topo.upWith(
      () =>
        new IngressRedirector({
          netns: topo.gw,
          restoreBackoff: { free: 100, windowMs: 60_000, firstMs: 1000, maxMs: 1000 },
        }),
    );
    await r.apply(webCache(() => E1, [E1]));
    assert.equal(await served(), 'engine1');
    assert.ok(await until(async () => r.watchPid() !== undefined, 5000), 'the watch runs');
  });
  after(() => topo.downAfter(() => r?.stop()));

  for (const [what, cmd] of [
    ['flush ruleset (a firewall reload)', 'nft flush ruleset'],
    ['nft flush table (every chain emptied)', 'nft flush table netdev wccpd_ingress'],
    [
      'the base chain deleted (nft delete chain)',
      'c=$(nft list chains netdev | grep -o "ingress_[0-9]*" | head -1); ' +
        'nft flush chain netdev wccpd_ingress $c && nft delete chain netdev wccpd_ingress $c',
    ],
  ] as const) {
    test(`${what}: redirection comes back by itself, counted`, async () => {
      const before = r.restored().nftTables;
      topo.inGw(
        `nft add table inet admin_fw; nft add chain inet admin_fw input '{ type filter hook input priority 0; }'`,
      );
      topo.inGw(cmd);
      assert.ok(
        await until(async () => r.restored().nftTables > before && (await served()) === 'engine1', 10_000),
        `not restored: ${r.restored().nftTables} restores, served by ${await served()}`,
      );
      // Only ours was written: the admin's table is there unless the command itself deleted it.
      const admin = topo.inGw('nft list tables').includes('inet admin_fw');
      assert.equal(admin, !cmd.includes('flush ruleset'));
      topo.inGw('nft delete table inet admin_fw 2>/dev/null || true');
      const c = await r.counters();
      assert.ok((c.engines.get(0)?.get(E1)?.packets ?? 0) > 0, 'counting again');
    });
  }

  test('our own changes (a slot released and placed again, the base chain rewritten) are not restores', async () => {
    const before = r.restored().nftTables;
    await r.apply(webCache(() => null, []));
    await r.apply(webCache(() => E1, [E1]));
    await new Promise((res) => setTimeout(res, 1500));
    assert.equal(r.restored().nftTables, before);
    assert.equal(await served(), 'engine1');
  });
});
