// A firewall reload deletes our table: the nft backend notices (its `nft monitor`), puts it back with every applied
// service's state, keeps claimed connections on their engine, never touches an admin's table, backs off a deletion
// loop, and leaves no monitor behind at stop(). In namespaces this test creates (names carry process.pid).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { NftRedirector, explain } from '../../../src/dataplane/index.js';
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
const E2 = '192.0.2.12';
const owner = (b: number): string => (b % 2 === 0 ? E1 : E2);
const name = (e: string | null): string => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : 'origin');

/** Waits (bounded) until `ok()`; the bound is generous and no figure is asserted. */
async function until(ok: () => boolean, what: string, ms = 15_000): Promise<void> {
  for (let waited = 0; !ok(); waited += 50) {
    if (waited >= ms) assert.fail(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('nft backend after a firewall reload', { skip }, () => {
  const topo = new Topology('rs');
  const log = recordingLog();
  let r: NftRedirector;
  const svc = webCache(owner, [E1, E2], {
    table: { changeNumber: 7, buckets: Array.from({ length: 256 }, (_, b) => owner(b)) },
  });
  const hasTable = (t: string): boolean => topo.inGw('nft list tables').split('\n').includes(`table ${t}`);
  const restored = (): number => r.tableRestores().restored;
  const check = async (count = 64): Promise<string[]> => {
    const bad: string[] = [];
    for (let i = 0; i < count; i++) {
      const d = `198.51.100.${i * 4 + 1}`;
      const res = await topo.probe(d);
      const want = name(explain(svc, d).engine);
      if (res.data !== want) bad.push(`${d}: want ${want}, got ${res.data || res.code}`);
    }
    return bad;
  };
  const adminTable = (): string => topo.inGw('nft list table inet admin');
  const addAdminTable = (): void => {
    topo.inGw(
      `nft add table inet admin; nft add chain inet admin input '{ type filter hook input priority 0; policy accept; }'; ` +
        `nft add rule inet admin input tcp dport 22 counter accept; nft add set inet admin blocked '{ type ipv4_addr; }'`,
    );
  };

  before(async () => {
    // These tests restore the table about ten times within a minute: under the default backoff (3 a minute free,
    // then 1, 2, 4, 8, 16 s...) a later test's restore waited longer than its bound whenever the earlier tests ran
    // fast. The backoff has its own test below, with its own redirector.
    r = await topo.upWith(
      () =>
        new NftRedirector({
          netns: topo.gw,
          log,
          restoreBackoff: { free: 100, windowMs: 60_000, firstMs: 1000, maxMs: 5000 },
        }),
    );
  });
  after(() => topo.downAfter(() => r?.stop()));

  test('`nft flush ruleset`: the table comes back; new connections go to the right engine, a claimed one keeps its engine', async () => {
    await r.apply(svc);
    assert.deepEqual(await check(), []);
    const held = await topo.hold('198.51.100.2'); // bucket 248+2... owned by E1 (even)
    assert.equal(held.first, name(explain(svc, '198.51.100.2').engine));
    assert.ok(r.watchPid() !== undefined, 'the table watch runs');
    topo.inGw('nft flush ruleset');
    await until(() => restored() === 1, 'the first restore');
    assert.ok(hasTable('inet wccpd'));
    const warn = log.lines.filter((l) => l.level === 'warn' && /deleted by someone else/.test(l.msg ?? ''));
    assert.equal(warn.length, 1, JSON.stringify(log.lines));
    assert.match(
      warn[0]?.msg ?? '',
      /^nftables table inet wccpd was deleted by someone else \(a firewall reload's flush ruleset\?\); restored with service 0 change 7; per-bucket and per-engine counters start again from zero$/,
    );
    assert.deepEqual(r.tableRestores().last?.tables, ['inet wccpd']);
    assert.equal(await held.send('ping'), held.first, 'the claimed connection keeps its engine');
    assert.deepEqual(await check(), []);
    // Counted again from zero, by the restored table.
    const engines = (await r.counters()).engines.get(0);
    assert.ok((engines?.get(E1)?.packets ?? 0) > 0 && (engines?.get(E2)?.packets ?? 0) > 0);
  });

  test("`nft delete table inet wccpd`: restored the same way, and an admin's own table is never touched", async () => {
    addAdminTable();
    topo.inGw('nft add element inet admin blocked { 203.0.113.99 }');
    const before = adminTable();
    const held = await topo.hold('198.51.100.3');
    const first = held.first;
    assert.equal(first, name(explain(svc, '198.51.100.3').engine));
    const n = restored();
    topo.inGw('nft delete table inet wccpd');
    await until(() => restored() === n + 1, 'the restore');
    assert.equal(adminTable(), before, "the admin's table is as it was");
    assert.equal(await held.send('ping'), first);
    assert.deepEqual(await check(), []);
    // An admin deleting a table of another family with our name, or another table, changes nothing of ours.
    topo.inGw('nft add table ip wccpd; nft delete table ip wccpd; nft delete table inet admin');
    await r.settled();
    assert.equal(restored(), n + 1);
  });

  test("`nft flush table inet wccpd` (the table stays, its chains emptied) is put back; an admin's flush or deletions, and our own changes, are not restores", async () => {
    addAdminTable();
    await r.settled();
    let n = restored();
    const handle = (
      JSON.parse(topo.inGw('nft -j list chain inet admin input')) as { nftables: { rule?: { handle: number } }[] }
    ).nftables.find((o) => o.rule !== undefined)?.rule?.handle;
    topo.inGw(`nft delete rule inet admin input handle ${handle}`);
    topo.inGw('nft add rule inet admin input tcp dport 22 accept; nft flush table inet admin');
    topo.inGw('nft add chain inet admin spare; nft delete chain inet admin spare');
    const before = adminTable();
    // Our own changes delete chains and rules of ours too (a service removed and applied again): not restores.
    await r.removeService(0);
    await r.apply(svc);
    await new Promise((res) => setTimeout(res, 1000));
    await r.settled();
    assert.equal(restored(), n);
    assert.equal(adminTable(), before, "the admin's emptied table is left as they left it");

    const held = await topo.hold('198.51.100.5');
    const from = log.lines.length;
    topo.inGw('nft flush table inet wccpd');
    await until(() => restored() === n + 1, 'the restore after a flush table');
    const warn = log.lines.slice(from).filter((l) => l.level === 'warn' && /by someone else/.test(l.msg ?? ''));
    assert.equal(warn.length, 1, JSON.stringify(log.lines.slice(from)));
    assert.match(
      warn[0]?.msg ?? '',
      /^nftables table inet wccpd emptied \(its prerouting chain has 0 of its 2 rules\) by someone else .*restored with service 0 change 7/,
    );
    assert.equal(await held.send('ping'), held.first, 'the claimed connection keeps its engine');
    assert.deepEqual(await check(16), []);
    assert.equal(adminTable(), before);
    n = restored();
    topo.inGw('nft delete table inet admin');
    await new Promise((res) => setTimeout(res, 500));
    await r.settled();
    assert.equal(restored(), n, "deleting the admin's table is not a restore");
  });

  test('one rule of the prerouting chain deleted, or one of our chains: put back the same way', async () => {
    const listing = JSON.parse(topo.inGw('nft -j list chain inet wccpd prerouting')) as {
      nftables: { rule?: { handle: number } }[];
    };
    const first = listing.nftables.find((o) => o.rule !== undefined)?.rule?.handle;
    assert.ok(first !== undefined);
    let n = restored();
    topo.inGw(`nft delete rule inet wccpd prerouting handle ${first}`);
    await until(() => restored() === n + 1, 'the restore after a rule deletion');
    assert.match(topo.inGw('nft list chain inet wccpd prerouting'), /vmap @claims/);
    assert.deepEqual(await check(16), []);
    // The source-address hash chain: no service of this test uses it, so nothing refers to it and it can be deleted.
    n = restored();
    topo.inGw('nft delete chain inet wccpd hash_saddr');
    await until(() => restored() === n + 1, 'the restore after a chain deletion');
    assert.match(topo.inGw('nft list chains inet'), /chain hash_saddr/);
    assert.ok(log.lines.some((l) => /inet wccpd lost its chain hash_saddr by someone else/.test(l.msg ?? '')));
    assert.deepEqual(await check(16), []);
  });

  test('the closed table deleted while a service fails closed comes back; our own deletion of it is not restored', async () => {
    const closed = webCache(() => null, [], {
      failMode: 'closed',
      table: { changeNumber: 8, buckets: Array(256).fill(null) },
    });
    await r.apply(closed);
    assert.ok(hasTable('inet wccpd_closed'));
    const n = restored();
    topo.inGw('nft delete table inet wccpd_closed');
    await until(() => restored() === n + 1, 'the closed table restore');
    assert.match(topo.inGw('nft list table inet wccpd_closed'), /chain closed_0/);
    assert.equal((await topo.probe('198.51.100.80')).code, 'ECONNREFUSED');
    // Fail open: wccpd deletes the closed table itself; that is not put back.
    await r.apply(svc);
    await new Promise((res) => setTimeout(res, 300));
    await r.settled();
    assert.ok(!hasTable('inet wccpd_closed'));
    assert.equal(restored(), n + 1);
    assert.deepEqual(await check(16), []);
  });

  test('a monitor that dies is started again and still sees a deletion', async () => {
    const pid = r.watchPid();
    assert.ok(pid !== undefined);
    process.kill(pid, 'SIGKILL');
    await until(() => r.watchPid() !== undefined && r.watchPid() !== pid, 'a new monitor');
    assert.ok(log.lines.some((l) => l.level === 'warn' && /the table watch \(nft monitor\) ended/.test(l.msg ?? '')));
    await new Promise((res) => setTimeout(res, 300)); // its subscription
    const n = restored();
    topo.inGw('nft delete table inet wccpd');
    await until(() => restored() === n + 1, 'the restore after the monitor restart');
    assert.deepEqual(await check(16), []);
  });

  test('a restore while the engine segment is down: the table comes back at once, the routes when the link does', async () => {
    const n = restored();
    topo.inGw('ip link set br0 down');
    try {
      topo.inGw('nft delete table inet wccpd');
      await until(() => restored() === n + 1, 'the restore with the link down');
      assert.ok(hasTable('inet wccpd'));
      assert.ok(
        log.lines.some((l) => /cannot be put back yet/.test(l.msg ?? '')),
        JSON.stringify(log.lines.slice(-3)),
      );
    } finally {
      topo.inGw('ip link set br0 up');
    }
    // The link watch puts the routes back at the link's return.
    for (let i = 0; i < 60; i++) {
      if ((await check(8)).length === 0) break;
      await new Promise((res) => setTimeout(res, 500));
    }
    assert.deepEqual(await check(16), []);
  });

  test('stop() leaves no monitor process and no table of ours', async () => {
    const pid = r.watchPid();
    assert.ok(pid !== undefined && alive(pid));
    await r.stop();
    assert.equal(alive(pid), false, `monitor ${pid} is gone`);
    assert.equal(r.watchPid(), undefined);
    assert.ok(!hasTable('inet wccpd'));
  });

  test('a loop of deletions is backed off, said so, and the table is back once it stops', async (t) => {
    const loopLog = recordingLog();
    r = new NftRedirector({
      netns: topo.gw,
      log: loopLog,
      restoreBackoff: { free: 3, windowMs: 60_000, firstMs: 1000, maxMs: 5000 },
    });
    await r.start();
    await r.apply(svc);
    // 60 attempts, 50 ms apart: without a backoff nearly every one would find a freshly restored table to delete.
    // Run asynchronously: the daemon must be able to restore meanwhile.
    const { stdout: out } = await promisify(execFile)(
      'ip',
      [
        'netns',
        'exec',
        topo.gw,
        'sh',
        '-c',
        'n=0; for i in $(seq 60); do nft delete table inet wccpd 2>/dev/null && n=$((n+1)); sleep 0.05; done; echo $n',
      ],
      { encoding: 'utf8' },
    );
    const deleted = Number(out.trim());
    t.diagnostic(`the loop of 60 deletions found the table ${deleted} times`);
    assert.ok(deleted >= 4, `deleted ${deleted} times: ${JSON.stringify(loopLog.lines)}`);
    assert.ok(deleted <= 12, `the loop found the table only ${deleted} times of 60: restores were backed off`);
    assert.ok(
      loopLog.lines.some((l) => l.level === 'warn' && /something keeps deleting it; backing off/.test(l.msg ?? '')),
    );
    await until(() => hasTable('inet wccpd') && r.tableRestores().restored === deleted, 'the last restore', 30_000);
    assert.deepEqual(await check(16), []);
    await r.stop(); // the daemon below is the namespace's only wccpd
  });

  test(
    "the daemon, as the unit's user: a flush ruleset is undone, and status, /metrics and the log say so",
    { skip: skipDaemon },
    async () => {
      let d: GwDaemon | undefined;
      try {
        d = startGwDaemon(topo, { backend: 'nft', asUnitUser: true });
        d.startEngine(120);
        const dest = '198.51.100.7';
        await waitFor(
          'the engine reached through the nft data plane',
          async () => ((await topo.probe(dest)).data === 'engine1' ? true : null),
          30_000,
        );
        const held = await topo.hold(dest);
        assert.equal(held.first, 'engine1');
        topo.inGw('nft flush ruleset');
        await waitFor(
          'the restore counted in status',
          async () => {
            const st = JSON.parse(d!.api('/api/v1/status')) as StatusView;
            return (st.dataplane.restored?.nftTables ?? 0) >= 1 ? true : null;
          },
          30_000,
        );
        assert.ok(hasTable('inet wccpd'));
        assert.equal(await held.send('ping'), 'engine1', 'the claimed connection keeps its engine');
        assert.equal((await topo.probe(dest)).data, 'engine1');
        const metrics = parsePrometheusText(d.api('/metrics')).samples;
        assert.equal(sampleValue(metrics, 'wccpd_dataplane_restored_total', { kind: 'nft-table' }), 1);
        assert.match(d.output.join(''), /nftables table inet wccpd was deleted by someone else/);
        assert.match(d.api('/api/v1/status'), /"nftTables":1/);
      } catch (e) {
        throw new Error(`${(e as Error).message}\n${d?.output.join('').slice(-3000)}`);
      } finally {
        await d?.close();
      }
    },
  );
});
