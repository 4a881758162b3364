// The nft backend against the real kernel, in namespaces this test creates (names carry process.pid).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { DataplaneError, NftRedirector, explain } from '../../../src/dataplane/index.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (nft backend kernel tests)');
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

/** Every address of 198.51.100.0/24 (each bucket exactly once), plus 128 more from two other TEST-NET ranges. */
const destinations = [
  ...Array.from({ length: 256 }, (_, i) => `198.51.100.${i}`),
  ...Array.from({ length: 64 }, (_, i) => `203.0.113.${64 + i}`),
  ...Array.from({ length: 64 }, (_, i) => `198.51.100.${(i * 37) % 256}`),
];

describe('nft backend in the kernel', { skip }, () => {
  const topo = new Topology('nft');
  let r: NftRedirector;

  before(async () => {
    r = await topo.upWith(() => new NftRedirector({ netns: topo.gw }));
  });
  after(() => topo.downAfter(() => r?.stop()));

  test('every new connection lands in bucket XOR(destination bytes), for 384 destinations covering all buckets', async () => {
    await r.apply(webCache(() => null, [], { failMode: 'open' }));
    let before = (await r.counters()).buckets.get(0);
    assert.equal(before?.length, 256);
    const mismatches: string[] = [];
    const hit = new Set<number>();
    for (const d of destinations) {
      const res = await topo.probe(d);
      assert.equal(res.data, 'origin', `${d} should go direct with no engine (fail open): ${JSON.stringify(res)}`);
      const now = (await r.counters()).buckets.get(0) ?? [];
      const moved = now.flatMap((c, b) => (c.packets > (before?.[b]?.packets ?? 0) ? [b] : []));
      const want = bucketOf(d);
      if (moved.length !== 1 || moved[0] !== want) mismatches.push(`${d}: want ${want}, kernel ${moved.join(',')}`);
      else hit.add(want);
      before = now;
    }
    assert.deepEqual(mismatches, []);
    assert.equal(hit.size, 256);
  });

  test("each connection reaches the engine the table names; a rebalance moves new connections; a departed engine's buckets go direct", async () => {
    const owner = (b: number): string => (b % 3 === 0 ? E2 : E1);
    const svc = webCache(owner, [E1, E2]);
    await r.apply(svc);
    const name = (e: string | null): string => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : 'origin');
    const check = async (s: typeof svc): Promise<string[]> => {
      const bad: string[] = [];
      for (const d of destinations.slice(0, 256)) {
        const res = await topo.probe(d);
        const want = name(explain(s, d).engine);
        if (res.data !== want) bad.push(`${d}: want ${want}, got ${res.data || res.code}`);
      }
      return bad;
    };
    assert.deepEqual(await check(svc), []);
    const engineCounts = (await r.counters()).engines.get(0);
    assert.ok((engineCounts?.get(E1)?.packets ?? 0) > 0 && (engineCounts?.get(E2)?.packets ?? 0) > 0);
    // Rebalance: the owners swap; E2 then leaves and its buckets are unassigned (forward normally).
    const swapped = webCache((b) => (owner(b) === E1 ? E2 : E1), [E1, E2], {
      table: { changeNumber: 2, buckets: svc.table.buckets.map((e) => (e === E1 ? E2 : E1)) },
    });
    await r.apply(swapped);
    assert.deepEqual(await check(swapped), []);
    const gone = { ...swapped, engines: [E1] };
    await r.apply(gone);
    assert.deepEqual(await check(gone), []);
    // The engine that left is parked: its rule and route stay for its return, but its slot is not live.
    assert.equal((topo.inGw('ip rule list').match(/^2048:.* lookup 20480\d+$/gm) ?? []).length, 2);
    assert.deepEqual([...r.parkedSlots().values()], [`0 l2 ${E2}`]);
    const claims = topo.inGw('nft list map inet wccpd claims');
    assert.equal((claims.match(/goto slot_\d+/g) ?? []).length, 1, claims);
    // It comes back to the same slot, with no new rule.
    const parkedSlot = [...r.parkedSlots().keys()][0];
    await r.apply(swapped);
    assert.equal(r.slotsInUse().get(`0 l2 ${E2}`), parkedSlot);
    assert.deepEqual(await check(swapped), []);
    assert.equal((topo.inGw('ip rule list').match(/^2048:.* lookup 20480\d+$/gm) ?? []).length, 2);
  });

  test("an L2 engine behind a router, or one of the gateway's own addresses, is refused clearly and leaves nothing", async () => {
    await r.apply(webCache(() => E1, [E1]));
    const rules = topo.inGw('ip rule list');
    const tables = topo.inGw('ip route show table all | grep -E "table 20480[0-9]{5}" || true');
    const recorded = JSON.stringify(r.record.objects());
    for (const [engine, why] of [
      ['198.51.100.80', /reached via the router 192\.0\.2\.130, not directly/],
      ['192.0.2.1', /not on a network this gateway reaches/],
    ] as const) {
      await assert.rejects(
        r.apply(webCache(() => engine, [E1, engine])),
        (e: unknown) => e instanceof DataplaneError && e.reason === 'engine-not-attached' && why.test(e.message),
      );
      assert.equal(topo.inGw('ip rule list'), rules);
      assert.equal(topo.inGw('ip route show table all | grep -E "table 20480[0-9]{5}" || true'), tables);
      assert.equal(JSON.stringify(r.record.objects()), recorded);
    }
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
  });

  test('an established connection keeps its engine across a rebalance, and is reset when its engine leaves', async () => {
    await r.apply(webCache(() => E1, [E1, E2]));
    const held = await topo.hold('198.51.100.80');
    assert.equal(held.first, 'engine1');
    await r.apply(webCache(() => E2, [E1, E2]));
    assert.equal(await held.send('ping'), 'engine1', 'the live connection stays on its engine');
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine2', 'a new connection goes to the new owner');
    // The origin is silenced for this step, so the reset can come from the gateway only (its first prerouting rules:
    // the slot is no longer in the claims map).
    const silence = `ip netns exec ${topo.origin} nft`;
    execFileSync('sh', [
      '-ec',
      `${silence} add table ip silent; ${silence} add chain ip silent in '{ type filter hook input priority 0; }'; ${silence} add rule ip silent in tcp dport 80 drop`,
    ]);
    try {
      await r.apply(webCache(() => E2, [E2]));
      const answer = await Promise.race([
        held.send('ping'),
        new Promise<string>((resolve) => setTimeout(() => resolve('no answer in 5 s'), 5000).unref()),
      ]);
      assert.equal(answer, 'error ECONNRESET', "the gone engine's flow is reset at once, by the gateway");
    } finally {
      execFileSync('sh', ['-ec', `${silence} delete table ip silent`]);
    }
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine2');
  });

  test('fail closed refuses the service at once; other ports and fail open go direct', async () => {
    await r.apply(webCache(() => null, [], { failMode: 'closed' }));
    const deniedBefore = (await r.counters()).services?.get(0)?.denied.packets ?? NaN;
    const refused = await topo.probe('198.51.100.80');
    assert.equal(refused.code, 'ECONNREFUSED', JSON.stringify(refused));
    const other = await topo.probe('198.51.100.80', 8080);
    assert.equal(other.data, 'origin');
    const deniedAfter = (await r.counters()).services?.get(0);
    assert.equal((deniedAfter?.denied.packets ?? NaN) - deniedBefore, 1, 'one refused connection counted as denied');
    await r.apply(webCache(() => E1, [], { failMode: 'open' }));
    const unassignedBefore = (await r.counters()).services?.get(0)?.unassigned.packets ?? NaN;
    assert.equal((await topo.probe('198.51.100.80')).data, 'origin');
    const unassignedAfter = (await r.counters()).services?.get(0)?.unassigned.packets ?? NaN;
    assert.equal(unassignedAfter - unassignedBefore, 1, 'one connection forwarded normally counted as unassigned');
  });

  test("a connection to the gateway's own address is never refused or reset, though a service claims it", async () => {
    await topo.serve(topo.gw, 'gateway', 80);
    await r.apply(webCache(() => null, [], { failMode: 'closed' }));
    assert.equal((await topo.probe('198.51.100.80')).code, 'ECONNREFUSED');
    assert.equal((await topo.probe('203.0.113.1')).data, 'gateway', 'refused claim, local destination');
    await r.apply(webCache(() => E1, [E1]));
    const held = await topo.hold('203.0.113.1');
    assert.equal(held.first, 'gateway');
    await r.apply(webCache(() => E2, [E2]));
    assert.equal(await held.send('ping'), 'gateway', "its slot's engine is gone; the local connection lives on");
  });

  test("a broken nft input gives a typed error with nft's stderr, and the previous table stays in force", async () => {
    await r.apply(webCache(() => E1, [E1]));
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
    const rulesBefore = topo.inGw('ip rule list');
    const mapBefore = topo.inGw('nft list map inet wccpd bucket_0');
    assert.match(mapBefore, /0:ff : jump claim_\d+ \}/);
    await assert.rejects(r.apply(webCache(() => E2, [E1, E2], { ports: [70000] })), (e: unknown) => {
      assert.ok(e instanceof DataplaneError, String(e));
      assert.equal(e.reason, 'command-failed');
      assert.match(e.stderr ?? '', /70000/);
      return true;
    });
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
    assert.equal(topo.inGw('nft list map inet wccpd bucket_0'), mapBefore);
    assert.equal(topo.inGw('ip rule list'), rulesBefore, "the failed apply's new engine route is rolled back");
  });

  test("applyAll puts two services' tables in force in one transaction: a second service nft refuses changes neither", async () => {
    const other = (owner: (b: number) => string | null, engines: string[], over = {}) =>
      webCache(owner, engines, { serviceId: 51, ports: [8080], ...over });
    await r.applyAll([webCache(() => E1, [E1]), other(() => E1, [E1])]);
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
    const maps = () => [0, 51].map((id) => topo.inGw(`nft list map inet wccpd bucket_${id}`));
    const before = maps();
    const rulesBefore = topo.inGw('ip rule list');
    // Engine 2 takes over both; service 51's table is one nft refuses (a port out of range).
    await assert.rejects(
      r.applyAll([webCache(() => E2, [E1, E2]), other(() => E2, [E1, E2], { ports: [70000] })]),
      (e: unknown) => e instanceof DataplaneError && /70000/.test(e.stderr ?? ''),
    );
    assert.deepEqual(maps(), before, "neither service's bucket map changed");
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1', "service 0's old table still steers");
    assert.equal(topo.inGw('ip rule list'), rulesBefore, "engine 2's new routes are rolled back");
    // Both good: both maps now name engine 2's slots, and service 0 steers there.
    await r.applyAll([webCache(() => E2, [E1, E2]), other(() => E2, [E1, E2])]);
    const after = maps();
    for (const [i, id] of [0, 51].entries()) {
      const slot = r.slotsInUse().get(`${id} l2 ${E2}`);
      assert.ok(slot !== undefined);
      assert.notEqual(after[i], before[i]);
      assert.match(after[i] ?? '', new RegExp(`0:ff : jump claim_${slot} \\}`));
    }
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine2');
    await r.removeService(51);
  });

  test("stop() leaves nothing of ours; start() clears a crashed run's leftovers", async () => {
    await r.apply(webCache((b) => (b < 128 ? E1 : E2), [E1, E2]));
    assert.match(topo.inGw('ip rule list'), /^2048:\s+from all fwmark 0x[0-9a-f]+\/0xfff80000 lookup 20480\d{5}$/m);
    // The guard pair: a packet with an empty field skips the slots' rules, a slot's mark still reaches its engine.
    assert.match(
      topo.inGw('ip rule list'),
      /^2047:\s+from all fwmark 0\/0xfff80000 goto 2049\n2048:[^]*\n2049:\s+from all fwmark 0\/0xfff80000 nop$/m,
    );
    const slot1 = r.slotsInUse().get(`0 l2 ${E1}`) ?? 0;
    const routeGet = (mark: number): string =>
      topo.inGw(`ip route get 198.51.100.80 from 203.0.113.10 iif c0 mark ${mark}`);
    assert.match(routeGet(slot1 * 2 ** 19), new RegExp(`via ${E1.replaceAll('.', '\\.')} `));
    assert.match(routeGet(0x5), /via 192\.0\.2\.130 dev o0/, "other tools' bits alone: the main table");
    await r.stop();
    assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd/);
    assert.doesNotMatch(topo.inGw('ip rule list'), /^204[789]:/m);
    assert.equal(topo.inGw('ip route show table all | grep -E "table 20480[0-9]{5}" || true'), '');
    assert.equal((await topo.probe('198.51.100.80')).data, 'origin');

    // A run that crashes leaves its table and routes; the next start() removes them and works.
    const crashed = new NftRedirector({ netns: topo.gw, watchTables: false }); // a crashed run watches nothing
    await crashed.start();
    await crashed.apply(webCache(() => E2, [E2]));
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine2');
    r = new NftRedirector({ netns: topo.gw });
    await r.start();
    assert.doesNotMatch(topo.inGw('ip rule list'), /^204[789]:/m);
    assert.equal((topo.inGw('nft list tables').match(/wccpd/g) ?? []).length, 1);
    assert.equal((await topo.probe('198.51.100.80')).data, 'origin');
    await r.apply(webCache(() => E1, [E1]));
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
  });
});
