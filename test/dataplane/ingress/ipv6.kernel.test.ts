// IPv6 through the ingress backend (docs/dataplane/ingress.md, "IPv6") in a real kernel, in a dual-stack topology of
// namespaces this test creates (names carry process.pid; 2001:db8::/32 and TEST-NET): a service with `families: [ipv4,
// ipv6]` hands each IPv6 connection to the engine its bucket names (the IPv6 fold, src/buckets/hash.ts), by the
// engine's MAC address; a live one keeps its engine across a rebalance and a drain; no engine is bypass or refusal;
// the counters are split by family; `families: [ipv4]` writes the table as without the key.
import { after, before, describe, test } from 'node:test';
import { spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { ipv6Words } from '../../../src/address.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { IngressRedirector } from '../../../src/dataplane/index.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import type { Log } from '../../../src/log.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip'),
  'root with nft and ip (ingress IPv6 kernel tests)',
);
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const name = (e: string | null): string => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : 'origin');
const TABLE = 'netdev wccpd_ingress';
const BOTH = ['ipv4', 'ipv6'] as const;

/** One IPv6 destination per bucket, in the origin's 2001:db8:5100::/64. */
const everyBucket: string[] = (() => {
  const out = new Array<string>(256);
  for (let i = 1; out.filter(Boolean).length < 256 && i < 65_536; i++) {
    const d = `2001:db8:5100::${i.toString(16)}`;
    out[bucketOf(d)] ??= d;
  }
  return out;
})();

describe('ingress backend: IPv6 connections go to the engines of their buckets', { skip }, () => {
  const topo = new Topology('i6', 2, { ipv6: true });
  let r: IngressRedirector;
  const warnings: string[] = [];
  const log: Log = {
    info: () => undefined,
    debug: () => undefined,
    error: () => undefined,
    warn: (_o, msg) => void warnings.push(msg ?? ''),
  };
  /** Our table as nft lists it, without the address caches' expiry times (they tick). */
  const listing = (): string => topo.inGw(`nft list table ${TABLE}`).replace(/ expires \S+/g, '');

  /** The destinations whose IPv6 connection did not reach the engine `svc`'s table names. */
  async function mismatches(svc: ServiceRedirect): Promise<string[]> {
    const out: string[] = [];
    for (const [b, d] of everyBucket.entries()) {
      const got = (await topo.probe(d)).data;
      const want = name(svc.table.buckets[b] ?? null);
      if (got !== want) out.push(`bucket ${b} ${d}: ${got} (want ${want})`);
    }
    return out;
  }

  before(async () => {
    r = await topo.upWith(() => new IngressRedirector({ netns: topo.gw, log, linkDebounceMs: 50, linkMinGapMs: 100 }));
  });
  after(() => topo.downAfter(() => r?.stop()));

  test('every bucket: 256 IPv6 destinations, each served by the engine the table names; IPv4 beside them', async () => {
    const owner = (b: number): string => (b % 2 === 0 ? E1 : E2);
    const svc = webCache(owner, [E1, E2], { families: BOTH });
    await r.apply(svc);
    assert.deepEqual(await mismatches(svc), []);
    assert.equal((await topo.probe('198.51.100.80')).data, name(owner(bucketOf('198.51.100.80'))), 'IPv4 as before');
    // The counters, both families' and IPv6's part: IPv6's SYNs per bucket and packets per engine; IPv4's one.
    const c = await r.counters();
    const six = c.ipv6;
    assert.ok(six !== undefined, 'IPv6 counters');
    const seen6 = six.buckets.get(0) ?? [];
    assert.equal(seen6.filter((x) => x.packets >= 1).length, 256, 'every bucket counted its IPv6 connection');
    assert.ok((six.engines.get(0)?.get(E1)?.packets ?? 0) > 0 && (six.engines.get(0)?.get(E2)?.packets ?? 0) > 0);
    const all = (c.buckets.get(0) ?? []).reduce((t, x) => t + x.packets, 0);
    const six6 = seen6.reduce((t, x) => t + x.packets, 0);
    assert.equal(all - six6, 1, 'of both families, the one IPv4 connection is IPv4');
  });

  test('the IPv6 objects: the base chain matches ip6, an engine slot hands frames over by MAC address', () => {
    const text = listing();
    assert.match(text, /th dport 80 meta protocol ip6 meta l4proto tcp jump svc6_0/);
    assert.match(text, /th dport 80 meta protocol ip meta l4proto tcp jump svc_0/);
    const mac = JSON.parse(topo.inGw(`ip -j neigh show to ${E1} dev br0`))[0].lladdr as string;
    assert.match(text, new RegExp(`ether daddr set ${mac} fwd to "br0"`));
    assert.match(text, /chain hash6_daddr/);
  });

  test('a live IPv6 connection keeps its engine across a rebalance and a drain; a new one follows the table', async () => {
    const d = everyBucket[0]!;
    await r.apply(webCache(() => E1, [E1, E2], { families: BOTH }));
    const held = await topo.hold(d);
    assert.equal(held.first, 'engine1');
    // Rebalanced: every bucket to engine2, engine1 still in the group (draining).
    await r.apply(
      webCache(() => E2, [E1, E2], { families: BOTH, table: { changeNumber: 2, buckets: new Array(256).fill(E2) } }),
    );
    assert.equal((await topo.probe(d)).data, 'engine2', 'a new connection follows the new table');
    assert.equal(await held.send('ping'), 'engine1', 'the held connection stays on its engine');
    // Recorded in the IPv6 flow map: hash of the addresses . ports . the destination's low 64 bits : engine1's slot.
    const w = ipv6Words(d)!;
    const low = ((BigInt(w[2]) << 32n) | BigInt(w[3])).toString(16);
    const entry = new RegExp(`\\. 0x[0-9a-f]*0050 \\. 0x${low} [^,}]*: 0:${slotOf(E1).toString(16)}\\b`);
    assert.match(topo.inGw(`nft list map ${TABLE} flows6_0`), entry, 'recorded in the IPv6 flow map');
    assert.equal(await held.send('ping'), 'engine1');
    // engine1 leaves the group: its connection is reset, not left to hang.
    await r.apply(
      webCache(() => E2, [E2], { families: BOTH, table: { changeNumber: 3, buckets: new Array(256).fill(E2) } }),
    );
    assert.match(await held.send('ping'), /^(end|error)/);
  });

  test('bypass: no engine, failing open, IPv6 connections reach the origin, counted unassigned', async () => {
    await r.apply(
      webCache(() => null, [], { families: BOTH, table: { changeNumber: 4, buckets: new Array(256).fill(null) } }),
    );
    assert.equal((await topo.probe(everyBucket[7]!)).data, 'origin');
    const c = await r.counters();
    const six = c.ipv6?.services.get(0)?.unassigned.packets ?? 0;
    assert.ok(six >= 1, 'IPv6 unassigned');
    assert.equal(c.services?.get(0)?.unassigned.packets, six, 'of both families, all IPv6');
  });

  test('fail closed with no usable engine: IPv6 connections are refused, counted denied', async () => {
    await r.apply(
      webCache(() => null, [], {
        families: BOTH,
        failMode: 'closed',
        table: { changeNumber: 5, buckets: new Array(256).fill(null) },
      }),
    );
    const got = await topo.probe(everyBucket[9]!);
    assert.equal(got.code, 'ECONNREFUSED');
    const c = await r.counters();
    const six = c.ipv6?.services.get(0)?.denied.packets ?? 0;
    assert.ok(six >= 1, 'IPv6 denied');
    assert.equal(c.services?.get(0)?.denied.packets, six, 'of both families, all IPv6');
  });

  test('an engine without an ARP entry: its IPv6 connections routed normally, said; redirected once it has one', async () => {
    await r.apply(
      webCache(() => E1, [E1, E2], { families: BOTH, table: { changeNumber: 6, buckets: new Array(256).fill(E1) } }),
    );
    assert.equal((await topo.probe(everyBucket[3]!)).data, 'engine1');
    warnings.length = 0;
    topo.inGw(`ip neigh del ${E1} dev br0`);
    // The neighbour watch sees the deletion: the slot's IPv6 chain routes normally.
    await until(() => routedNormally(E1));
    assert.equal((await topo.probe(everyBucket[4]!)).data, 'origin');
    assert.ok(
      warnings.some((w) => /no MAC address for engine 192\.0\.2\.11 on br0/.test(w)),
      warnings.join('\n'),
    );
    // Engine 1 talks to the gateway (a refused connection): the gateway has its ARP entry again.
    spawnSync('ip', ['netns', 'exec', topo.engines[0]!, 'curl', '-s', '--max-time', '3', 'http://192.0.2.1:9/']);
    await until(() => !routedNormally(E1));
    assert.equal((await topo.probe(everyBucket[5]!)).data, 'engine1');
  });

  test('families [ipv4]: the table as without the key, IPv6 routed normally; [ipv6]: IPv4 routed normally', async () => {
    await r.apply(webCache(() => E1, [E1, E2], { table: { changeNumber: 7, buckets: new Array(256).fill(E1) } }));
    const without = listing();
    await r.apply(
      webCache(() => E1, [E1, E2], {
        families: ['ipv4'],
        table: { changeNumber: 8, buckets: new Array(256).fill(E1) },
      }),
    );
    assert.equal(listing(), without);
    assert.doesNotMatch(without, /svc6_0|slot6_|flows6_0|bseen6_0/);
    assert.equal((await topo.probe(everyBucket[11]!)).data, 'origin');
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
    // families [ipv6]: IPv4 routed normally, IPv6 redirected.
    await r.apply(
      webCache(() => E1, [E1, E2], {
        families: ['ipv6'],
        table: { changeNumber: 9, buckets: new Array(256).fill(E1) },
      }),
    );
    assert.equal((await topo.probe('198.51.100.81')).data, 'origin');
    assert.equal((await topo.probe(everyBucket[12]!)).data, 'engine1');
  });

  test('a firewall reload deletes the table: put back with its IPv6 objects, IPv6 redirected again', async () => {
    await r.apply(
      webCache(() => E2, [E1, E2], { families: BOTH, table: { changeNumber: 10, buckets: new Array(256).fill(E2) } }),
    );
    assert.equal((await topo.probe(everyBucket[13]!)).data, 'engine2');
    const before = r.restored().nftTables;
    topo.inGw(`nft delete table ${TABLE}`);
    await until(() => r.restored().nftTables > before && /chain slot6_/.test(listing()));
    assert.equal(r.restored().nftTables, before + 1, 'restored once');
    assert.match(listing(), /chain hash6_daddr/);
    assert.equal((await topo.probe(everyBucket[14]!)).data, 'engine2');
  });

  /** The IPv6 chain of `engine`'s slot routes its frames normally (no MAC address for it). */
  const routedNormally = (engine: string): boolean =>
    /goto direct/.test(topo.inGw(`nft list chain ${TABLE} slot6_${slotOf(engine)}`));

  /** Waits up to 5 s (a bound, not a figure under test) for `ok`; the assertions after it say what did not happen. */
  async function until(ok: () => boolean): Promise<void> {
    for (let i = 0; i < 50 && !ok(); i++) await new Promise((res) => setTimeout(res, 100));
  }

  /** The slot of `engine` in service 0 now. */
  function slotOf(engine: string): number {
    const s = [...r.slotsInUse()].find(([k]) => k.endsWith(` ${engine}`))?.[1];
    assert.ok(s !== undefined, `a slot of ${engine}`);
    return s;
  }
});
