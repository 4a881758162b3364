// The nft backend's IPv6 (issue 36, docs/dataplane/nft.md "IPv6") against the real kernel, in dual-stack namespaces
// this test creates (names carry process.pid): engines registered by their IPv4 address take their buckets' IPv6
// connections at layer 2, through their IPv6 neighbour on the engine segment.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { recordingLog } from '../../../src/log.js';
import { NftRedirector, explain, type ServiceRedirect } from '../../../src/dataplane/index.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (nft backend kernel tests)');
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const DUAL = ['ipv4', 'ipv6'] as const;

// 2001:db8:5100::<ii>: the prefix's bytes XOR to a constant, so the last byte walks all 256 buckets once.
const destinations = Array.from({ length: 256 }, (_, i) => `2001:db8:5100::${i.toString(16)}`);
const name = (e: string | null): string => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : 'origin');

describe('nft backend: IPv6 in the kernel', { skip }, () => {
  const topo = new Topology('nv6', 2, { ipv6: true });
  const log = recordingLog();
  let r: NftRedirector;
  const ours6 = (): string[] => topo.inGw('ip -6 rule list').match(/^204[789]:.*$/gm) ?? [];

  before(async () => {
    r = await topo.upWith(() => new NftRedirector({ netns: topo.gw, log }));
  });
  after(() => topo.downAfter(() => r?.stop()));

  const check = async (s: ServiceRedirect, list: readonly string[] = destinations): Promise<string[]> => {
    const bad: string[] = [];
    for (const d of list) {
      const res = await topo.probe(d);
      const want = name(explain(s, d).engine);
      if (res.data !== want) bad.push(`${d}: want ${want}, got ${res.data || res.code}`);
    }
    return bad;
  };

  test('families [ipv4]: IPv6 goes direct, and no IPv6 rule, route or nft object is made', async () => {
    const svc = webCache(() => E1, [E1, E2]);
    await r.apply(svc);
    // The first IPv6 connection may wait for the gateway's neighbour discovery towards the origin.
    assert.equal((await topo.probe(destinations[7]!, 80, 5000)).data, 'origin');
    assert.equal((await topo.probe('198.51.100.7')).data, 'engine1');
    assert.deepEqual(ours6(), []);
    assert.doesNotMatch(topo.inGw('nft list table inet wccpd'), /classify6|hash6|ip6|nfproto ipv6/);
  });

  test('each of 256 IPv6 destinations (every bucket) reaches the engine the table names; IPv4 too', async () => {
    assert.equal(new Set(destinations.map((d) => bucketOf(d))).size, 256);
    const owner = (b: number): string => (b % 3 === 0 ? E2 : E1);
    const svc = webCache(owner, [E1, E2], { families: DUAL });
    await r.apply(svc);
    assert.deepEqual(await check(svc), []);
    assert.deepEqual(await check(svc, ['198.51.100.3', '198.51.100.4']), []);
    // Counted apart by family: each IPv6 connection once in its bucket; the totals hold both families.
    const c = await r.counters();
    assert.deepEqual(
      c.ipv6?.buckets.get(0)?.map((x) => x.packets),
      new Array<number>(256).fill(1),
    );
    assert.ok(
      (c.ipv6?.engines.get(0)?.get(E1)?.packets ?? 0) > 0 && (c.ipv6?.engines.get(0)?.get(E2)?.packets ?? 0) > 0,
    );
    const all = c.engines.get(0)?.get(E1)?.packets ?? 0;
    assert.ok(all > (c.ipv6?.engines.get(0)?.get(E1)?.packets ?? 0), 'the total counts IPv4 too');
    assert.equal(c.buckets.get(0)?.[bucketOf('198.51.100.3')]?.packets, 1 + 1);
    // One IPv6 rule per slot and the guard pair, via each engine's IPv6 neighbour (here its global address).
    assert.equal(ours6().length, 4, ours6().join('\n'));
    const tables = topo.inGw('ip -6 route show table all | grep -E "table 20480[0-9]{5}"');
    // Each route's next hop is a neighbour with that engine's MAC (link-local first).
    const neigh = topo.inGw('ip -6 neigh show dev br0');
    const vias = [...tables.matchAll(/default via (\S+) dev br0 table 20480\d+/g)].map((m) => m[1]!);
    const macOf = (a: string): string | undefined => new RegExp(`^${a} lladdr (\\S+)`, 'm').exec(neigh)?.[1];
    const engineMacs = [E1, E2].map((e) => new RegExp(`^${e} .*lladdr (\\S+)`, 'm').exec(topo.inGw('ip neigh'))?.[1]);
    assert.deepEqual(vias.map(macOf).sort(), [...engineMacs].sort(), `${tables}\n${neigh}`);
    assert.equal(r.record.objects().filter((o) => o.kind === 'rule6').length, 2);
  });

  test('IPv6 rules and routes someone else removed are put back by the ip check, and the engines served again', async () => {
    const svc = webCache((b) => (b % 2 === 0 ? E2 : E1), [E1, E2], { families: DUAL });
    await r.apply(svc);
    const tables = [...topo.inGw('ip -6 route show table all').matchAll(/table (20480\d{5})/g)].map((m) => m[1]!);
    assert.equal(tables.length, 2);
    for (const t of tables) topo.inGw(`ip -6 route del default table ${t}`);
    const rule = ours6().find((l) => /^2048:/.test(l))!;
    const [, mark, table] = /fwmark (\S+) lookup (\d+)/.exec(rule)!;
    topo.inGw(`ip -6 rule del priority 2048 fwmark ${mark} lookup ${table}`);
    const before = r.restored();
    const missing = await r.checkIpObjects();
    assert.ok(missing !== null);
    const after = r.restored();
    assert.equal(after.ipRoutes - before.ipRoutes, 2);
    assert.equal(after.ipRules - before.ipRules, 1);
    assert.equal(ours6().length, 4);
    assert.deepEqual(await check(svc, destinations.slice(0, 16)), []);
    assert.ok(log.lines.some((l) => /IPv6 ip objects were removed by someone else/.test(l.msg ?? '')));
  });

  test('a live IPv6 connection keeps its engine across a rebalance; new ones go to the new owner', async () => {
    await r.apply(webCache(() => E1, [E1, E2], { families: DUAL }));
    const held = await topo.hold(destinations[80]!);
    assert.equal(held.first, 'engine1');
    await r.apply(webCache(() => E2, [E1, E2], { families: DUAL }));
    assert.equal(await held.send('ping'), 'engine1', 'the live IPv6 connection stays on its engine');
    assert.equal((await topo.probe(destinations[80]!)).data, 'engine2', 'a new one goes to the new owner');
  });

  test('no engine: IPv6 bypasses (fail open) or is refused (fail closed)', async () => {
    await r.apply(webCache(() => null, [], { families: DUAL }));
    assert.equal((await topo.probe(destinations[5]!)).data, 'origin');
    await r.apply(webCache(() => null, [], { families: DUAL, failMode: 'closed' }));
    const refused = await topo.probe(destinations[5]!);
    assert.equal(refused.code, 'ECONNREFUSED', JSON.stringify(refused));
    assert.equal((await topo.probe('198.51.100.5')).code, 'ECONNREFUSED');
  });

  test("an engine without an IPv6 neighbour entry: warned, its buckets' IPv6 go direct, the other engine serves", async () => {
    await r.apply(webCache(() => null, [], { families: DUAL }));
    // Engine 2 stops answering neighbour solicitations, and the gateway forgets its IPv6 entry.
    execIn(topo.engines[1]!, 'ip -6 addr flush dev eth0 scope global; sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1');
    topo.inGw('ip -6 neigh flush dev br0');
    // Engine 1 is heard again (a refused connection to the gateway, as the topology's set-up does).
    try {
      execIn(topo.engines[0]!, 'curl -sg --max-time 3 http://[2001:db8:e::1]:9/');
    } catch {
      /* refused: exit 7 */
    }
    const owner = (b: number): string => (b % 2 === 0 ? E2 : E1);
    const svc = webCache(owner, [E1, E2], { families: DUAL });
    await r.apply(svc);
    const warned = log.lines.filter((l) => /no IPv6 neighbour entry/.test(l.msg ?? ''));
    assert.equal(warned.length, 1, JSON.stringify(log.lines.map((l) => l.msg)));
    assert.match(warned[0]!.msg!, /192\.0\.2\.12 .*go direct/);
    assert.deepEqual(r.ipv6WithoutNeighbour().engines, [E2]);
    assert.deepEqual(r.restored().enginesWithoutIpv6, [E2]);
    assert.ok((r.restored().ipv6WithoutNeighbour ?? 0) >= 1);
    const bad: string[] = [];
    for (const d of destinations.slice(0, 32)) {
      const want = bucketOf(d) % 2 === 0 ? 'origin' : 'engine1';
      const got = (await topo.probe(d)).data;
      if (got !== want) bad.push(`${d}: want ${want}, got ${got}`);
    }
    assert.deepEqual(bad, []);
    // IPv4 is untouched: engine 2 still serves its IPv4 buckets.
    assert.equal((await topo.probe('198.51.100.0')).data, bucketOf('198.51.100.0') % 2 === 0 ? 'engine2' : 'engine1');
    // Its IPv6 comes back: within the 10 s retry its buckets' IPv6 connections reach it, with no change applied.
    execIn(
      topo.engines[1]!,
      'sysctl -qw net.ipv6.conf.eth0.disable_ipv6=0; ip -6 addr add 2001:db8:e::12/64 dev eth0 nodad; ' +
        'ip -6 route add ::/0 via 2001:db8:e::1; curl -sg --max-time 3 http://[2001:db8:e::1]:9/ || true',
    );
    const until = Date.now() + 20_000;
    while (r.ipv6WithoutNeighbour().engines.length > 0 && Date.now() < until) await sleep(250);
    assert.deepEqual(r.ipv6WithoutNeighbour().engines, []);
    const even = destinations.find((d) => bucketOf(d) % 2 === 0)!;
    assert.equal((await topo.probe(even)).data, 'engine2');
  });

  test('wccpd-cleanup, and a start over a crashed run, remove the IPv6 rules and routes by their names', async () => {
    const tables6 = (): string =>
      topo.inGw('ip -6 route show table all | grep -cE "table 20480[0-9]{5}" || true').trim();
    const dual = webCache((b) => (b % 2 === 0 ? E2 : E1), [E1, E2], { families: DUAL });
    await r.stop();
    await r.start();
    await r.apply(dual);
    assert.equal(ours6().length, 4);
    const cleanup = new URL('../../../systemd/wccpd-cleanup', import.meta.url).pathname;
    topo.inGw(`sh ${cleanup} --state-dir /nonexistent-wccpd-${process.pid}`);
    assert.deepEqual(ours6(), []);
    assert.equal(tables6(), '0');
    await r.stop();
    // A run that crashes (no watch of its own to put anything back), then another that starts over what it left: it
    // finds them by their names.
    const quiet = { netns: topo.gw, watchTables: false, watchLinks: false, ipCheckMs: 0 };
    const crashed = new NftRedirector(quiet);
    await crashed.start();
    await crashed.apply(dual);
    assert.equal(ours6().length, 4);
    const again = new NftRedirector(quiet);
    await again.start();
    assert.deepEqual(ours6(), []);
    assert.equal(tables6(), '0');
    await again.stop();
    await crashed.stop();
    await r.start();
  });

  test('stop() leaves no IPv6 rule or route of ours', async () => {
    await r.apply(webCache(() => E1, [E1, E2], { families: DUAL }));
    assert.equal(ours6().length, 4, 'a slot per engine of the group (both), and the guard pair');
    await r.stop();
    assert.deepEqual(ours6(), []);
    assert.equal(topo.inGw('ip -6 route show table all | grep -cE "table 20480[0-9]{5}" || true').trim(), '0');
    assert.deepEqual(r.record.objects(), []);
    await r.start();
  });
});

function execIn(ns: string, cmd: string): void {
  execFileSync('ip', ['netns', 'exec', ns, 'sh', '-c', cmd]);
}
