// An engine of an IPv6 service that moves (docs/dataplane/nft.md, "IPv6"), in dual-stack namespaces this test creates
// (names carry process.pid, 2001:db8::/32 and TEST-NET only): its IPv6 route follows it at the next ip check, with no
// table change: to its IPv6 neighbour on the device it is on now, or to a neighbour with its new MAC; one that moved
// and has no IPv6 neighbour on its new device goes direct at once (not out of the device it left) and is served again
// within the 10 s retry once it has one. The ip check is called here as the periodic check (every ipCheckMs) and the
// link watch call it; before, the route stayed where it was made until the service's next table change.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { recordingLog } from '../../../src/log.js';
import { NftRedirector } from '../../../src/dataplane/index.js';
import { webCache } from '../service-fixture.js';
import { TOPOLOGY6, Topology } from '../topology.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (nft backend kernel tests)');
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const DUAL = ['ipv4', 'ipv6'] as const;
const destinations = Array.from({ length: 16 }, (_, i) => `2001:db8:5100::${(i * 17).toString(16)}`);

describe('nft backend: an IPv6 engine that moves', { skip }, () => {
  const topo = new Topology('nv6m', 2, { ipv6: true });
  const log = recordingLog();
  let r: NftRedirector;
  // Every bucket to engine 1 (engine 2 in the group: its slot is live too).
  const svc = (n: number) =>
    webCache(() => E1, [E1, E2], { families: DUAL, table: { changeNumber: n, buckets: new Array(256).fill(E1) } });

  before(async () => {
    // No periodic check and no link watch: the test runs the check they run, when it means to.
    r = await topo.upWith(() => new NftRedirector({ netns: topo.gw, log, ipCheckMs: 0, watchLinks: false }));
    await r.apply(svc(1));
  });
  after(() => topo.downAfter(() => r?.stop()));

  /** Engine 1's slot's IPv6 route: `default via X dev Y`. */
  const route6 = (): string => {
    const slot = r.slotsInUse().get(`0 l2 ${E1}`);
    return topo.inGw(`ip -6 route show table ${2048000000 + slot!}`).trim();
  };
  const served = async (want: string): Promise<string[]> => {
    const bad: string[] = [];
    for (const d of destinations) {
      const res = await topo.probe(d, 80, 1500);
      if (res.data !== want) bad.push(`${d}: ${res.data || String(res.code)}`);
    }
    return bad;
  };
  /** Each engine talks to the gateway in both families (a refused connection), as one that serves does. */
  const heard = (engines: readonly number[], also: readonly string[] = []): void => {
    for (const i of engines)
      for (const to of ['192.0.2.1', `[${TOPOLOGY6.router}]`, ...also])
        execIn(topo.engines[i]!, `curl -sg --max-time 3 http://${to}:9/ || true`);
  };
  /** The engines' segment, both families, onto bridge `to` (their cables re-plugged). */
  const renumber = (from: string, to: string): void => {
    topo.inGw(
      `ip link show ${to} >/dev/null 2>&1 || { ip link add ${to} type bridge mcast_snooping 0; ip link set ${to} up; }
       ip addr del 192.0.2.1/25 dev ${from}; ip -6 addr del ${TOPOLOGY6.router}/64 dev ${from}
       for e in e1 e2; do ip link set $e down; ip link set $e nomaster; ip link set $e master ${to}; ip link set $e up; done
       ip addr add 192.0.2.1/25 dev ${to}; ip -6 addr add ${TOPOLOGY6.router}/64 dev ${to} nodad`,
    );
  };
  const moveLine = (from: string, to: string): boolean =>
    log.lines.some((l) => l.msg?.startsWith(`engine ${E1}'s IPv6 next hop moved from ${from} to ${to}: `) === true);

  test('its MAC changes (its link-local with it): its IPv6 route follows to a neighbour with its new MAC', async () => {
    assert.equal((await topo.probe(destinations[0]!, 80, 5000)).data, 'engine1');
    // The gateway learns engine 1's link-local (it speaks to the gateway's), and a change prefers it.
    const gwLinkLocal = /inet6 (fe80::\S+)\//.exec(topo.inGw('ip -6 addr show dev br0 scope link'))?.[1];
    assert.ok(gwLinkLocal !== undefined);
    heard([0], [`[${gwLinkLocal}%25eth0]`]);
    await r.apply(svc(2));
    const old = /^default via (fe80::\S+) dev br0 /.exec(route6())?.[1];
    assert.ok(old !== undefined, `${route6()}\n${topo.inGw('ip neigh show dev br0')}`);
    // A new network card: its MAC, so its link-local (EUI-64), are new; its IPv4 and global IPv6 addresses stay.
    execIn(
      topo.engines[0]!,
      `ip link set eth0 down; ip link set eth0 address 02:00:00:00:e1:99; ip link set eth0 up
       ip addr replace ${E1}/25 dev eth0; ip route replace default via 192.0.2.1
       ip -6 addr replace 2001:db8:e::11/64 dev eth0 nodad; ip -6 route replace ::/0 via ${TOPOLOGY6.router}`,
    );
    heard([0], [`[${gwLinkLocal}%25eth0]`]);
    const changes = r.ipv6WithoutNeighbour().changes;
    await r.checkIpObjects();
    const now = /^default via (\S+) dev br0 /.exec(route6())?.[1];
    assert.ok(now !== undefined && now !== old, `${old} -> ${route6()}`);
    assert.match(topo.inGw(`ip -6 neigh show ${now} dev br0`), /lladdr 02:00:00:00:e1:99/);
    assert.deepEqual(await served('engine1'), []);
    assert.ok(moveLine(`${old} dev br0`, `${now} dev br0`));
    assert.equal(r.ipv6WithoutNeighbour().changes, changes, 'no service was applied again');
  });

  test('renumbered onto another bridge: its IPv6 route follows at the next ip check, no table change', async () => {
    await r.apply(svc(3));
    const was = /^default via (\S+) dev br0 /.exec(route6())?.[1];
    assert.ok(was !== undefined, route6());
    const changes = r.ipv6WithoutNeighbour().changes;
    renumber('br0', 'br2');
    heard([0, 1]);
    await r.checkIpObjects();
    const now = /^default via (\S+) dev br2 /.exec(route6())?.[1];
    assert.ok(now !== undefined, route6());
    assert.deepEqual(await served('engine1'), []);
    assert.equal((await topo.probe('198.51.100.9')).data, 'engine1', 'IPv4 followed too');
    assert.ok(moveLine(`${was} dev br0`, `${now} dev br2`), 'the log says where it moved');
    assert.equal(r.ipv6WithoutNeighbour().changes, changes, 'no service was applied again');
  });

  test('moved with no IPv6 neighbour on its new device: its IPv6 goes direct at once, served again once heard', async () => {
    renumber('br2', 'br0');
    topo.inGw('ip neigh flush dev br0; ip -6 neigh flush dev br0');
    await r.checkIpObjects();
    // The services applied again at once: the engines without an IPv6 neighbour, their IPv6 direct.
    for (let i = 0; i < 40 && !r.ipv6WithoutNeighbour().engines.includes(E1); i++) await sleep(100);
    assert.deepEqual(r.ipv6WithoutNeighbour().engines, [E1, E2]);
    assert.doesNotMatch(topo.inGw('ip -6 route show table all'), /dev br2 table 20480/);
    assert.deepEqual(await served('origin'), [], 'direct, not out of the bridge it left');
    heard([0, 1]);
    // The 10 s retry finds its neighbour.
    for (let i = 0; i < 60 && r.ipv6WithoutNeighbour().engines.length > 0; i++) await sleep(250);
    assert.deepEqual(r.ipv6WithoutNeighbour().engines, []);
    assert.match(route6(), / dev br0 /);
    assert.deepEqual(await served('engine1'), []);
  });
});

function execIn(ns: string, cmd: string): void {
  execFileSync('ip', ['netns', 'exec', ns, 'sh', '-c', cmd]);
}
