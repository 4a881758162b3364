// Mask assignment in the kernel (nft backend, namespaces this test creates): each new connection reaches the engine
// the Mask/Value Sets name, by the draft's lookup (src/buckets/mask.ts matchMask), for destination and source masks,
// several sets in order, a change of the sets, and failing closed.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { ipv4ToNumber } from '../../../src/address.js';
import { SQUID_MASK, matchMask } from '../../../src/buckets/mask.js';
import type { MaskValueSet } from '../../../src/buckets/mask.js';
import type { EngineAddress } from '../../../src/buckets/table.js';
import { NftRedirector } from '../../../src/dataplane/index.js';
import type { ServiceRedirect } from '../../../src/dataplane/index.js';
import { maskSet, webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip'),
  'root with nft and ip (nft mask assignment kernel tests)',
);
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const CLIENT = '203.0.113.10';
const name = (e: EngineAddress | null): string => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : 'origin');
const num = (a: string): number => ipv4ToNumber(a) ?? NaN;

/** Every address of 198.51.100.0/24 and of 203.0.113.64/26 (the origin answers on both). */
const destinations = [
  ...Array.from({ length: 256 }, (_, i) => `198.51.100.${i}`),
  ...Array.from({ length: 64 }, (_, i) => `203.0.113.${64 + i}`),
];

const maskService = (
  sets: MaskValueSet[],
  engines: EngineAddress[],
  over: Partial<ServiceRedirect> = {},
): ServiceRedirect =>
  // The bucket table says "everything to E2": a data plane that redirected by hash would fail every check.
  webCache(() => E2, engines, { maskSets: sets, ...over });

/** What the draft's lookup says for a connection from `source` to `destination`:80, as the probe would see it. */
function want(s: ServiceRedirect, destination: string, source = CLIENT): string {
  const e = matchMask(s.maskSets ?? [], {
    sourceIp: num(source),
    destinationIp: num(destination),
    sourcePort: 0,
    destinationPort: 80,
  });
  return name(e !== null && s.engines.includes(e) ? e : null);
}

describe('nft mask assignment in the kernel', { skip }, () => {
  const topo = new Topology('mask');
  let r: NftRedirector;
  const sources = Array.from({ length: 12 }, (_, i) => `203.0.113.${i < 8 ? 2 + i : 3 + i}`); // .2-.9, .11-.14

  before(async () => {
    r = await topo.upWith(
      () => new NftRedirector({ netns: topo.gw }),
      () => {
        for (const a of sources) topo.inClient(`ip addr add ${a}/28 dev eth0`);
      },
    );
  });
  after(() => topo.downAfter(() => r?.stop()));

  const check = async (
    s: ServiceRedirect,
    pairs: readonly [string, string | undefined][],
  ): Promise<Map<string, number>> => {
    await r.apply(s);
    const bad: string[] = [];
    const served = new Map<string, number>();
    for (const [d, src] of pairs) {
      const res = await topo.probe(d, 80, 1500, src);
      const w = want(s, d, src);
      if (res.data !== w) bad.push(`${src ?? CLIENT} -> ${d}: want ${w}, got ${res.data || res.code}`);
      served.set(res.data, (served.get(res.data) ?? 0) + 1);
    }
    assert.deepEqual(bad, []);
    return served;
  };

  test("Squid's destination mask 0x1741: each of 320 destinations reaches the engine its value names, not the hash's", async () => {
    const s = maskService([maskSet(SQUID_MASK, (i) => (i % 2 === 0 ? E1 : E2))], [E1, E2]);
    const served = await check(
      s,
      destinations.map((d) => [d, undefined]),
    );
    assert.deepEqual([...served.keys()].sort(), ['engine1', 'engine2']);
    // Per-engine counters count what went to each engine.
    const c = (await r.counters()).engines.get(0);
    assert.ok((c?.get(E1)?.packets ?? 0) > 0 && (c?.get(E2)?.packets ?? 0) > 0, JSON.stringify([...(c ?? [])]));
  });

  test('a 6-bit destination mask: 64 values, an uneven split with unassigned values (forwarded normally)', async () => {
    const mask = { ...SQUID_MASK, destinationAddressMask: 0x3f };
    const s = maskService([maskSet(mask, (i) => (i % 7 === 0 ? null : i % 3 === 0 ? E2 : E1))], [E1, E2]);
    const served = await check(
      s,
      destinations.map((d) => [d, undefined]),
    );
    assert.deepEqual([...served.keys()].sort(), ['engine1', 'engine2', 'origin']);
    const unassigned = (await r.counters()).services?.get(0)?.unassigned.packets ?? 0;
    assert.ok(unassigned >= (served.get('origin') ?? 0), `unassigned counter ${unassigned}`);
  });

  test('a source mask steers by the client address', async () => {
    const mask = { sourceAddressMask: 0xf, destinationAddressMask: 0, sourcePortMask: 0, destinationPortMask: 0 };
    const s = maskService([maskSet(mask, (i) => (i % 4 === 1 ? null : i % 2 === 0 ? E1 : E2))], [E1, E2]);
    await r.apply(s);
    const served = await check(
      s,
      sources.flatMap((src) => ['198.51.100.7', '203.0.113.99'].map((d): [string, string] => [d, src])),
    );
    assert.deepEqual([...served.keys()].sort(), ['engine1', 'engine2', 'origin']);
  });

  test('several sets: each in order, the first match wins; fewer sets later leave no map behind', async () => {
    const odd = { ...SQUID_MASK, destinationAddressMask: 0x1 };
    const low = { ...SQUID_MASK, destinationAddressMask: 0x6 };
    // Set 1 names odd destinations (E2); set 2 the rest by bits 1-2, one of its values twice (the first counts).
    const second = maskSet(low, (i) => (i === 3 ? null : i % 2 === 0 ? E1 : E2));
    const s = maskService(
      [
        maskSet(odd, (i) => (i === 1 ? E2 : null)),
        { mask: low, values: [{ ...second.values[0]!, engine: E2 }, ...second.values] },
      ],
      [E1, E2],
    );
    await r.apply(s);
    await check(
      s,
      destinations.slice(0, 64).map((d) => [d, undefined]),
    );
    assert.match(topo.inGw('nft list table inet wccpd'), /map mask_0_1 /);
    const one = maskService([maskSet(SQUID_MASK, () => E1)], [E1, E2]);
    await r.apply(one);
    await check(
      one,
      destinations.slice(0, 16).map((d) => [d, undefined]),
    );
    assert.doesNotMatch(topo.inGw('nft list table inet wccpd'), /map mask_0_1 /);
  });

  test("a change of the sets moves new connections; a gone engine's values go direct; fail closed without engines refuses", async () => {
    const mask = { ...SQUID_MASK, destinationAddressMask: 0x3 };
    const a = maskService([maskSet(mask, () => E1)], [E1, E2]);
    await r.apply(a);
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
    const b = maskService([maskSet(mask, (i) => (i === 0 ? E2 : E1))], [E1, E2]);
    await r.apply(b);
    await check(
      b,
      destinations.slice(0, 8).map((d) => [d, undefined]),
    );
    // E1 is gone: its values name an engine the group no longer has.
    const c = maskService(b.maskSets as MaskValueSet[], [E2]);
    await r.apply(c);
    const served = await check(
      c,
      destinations.slice(0, 8).map((d) => [d, undefined]),
    );
    assert.deepEqual([...served.keys()].sort(), ['engine2', 'origin']);
    await r.apply(maskService([maskSet(mask, () => E1)], [], { failMode: 'closed' }));
    assert.equal((await topo.probe('198.51.100.80')).code, 'ECONNREFUSED');
    assert.equal((await topo.probe('198.51.100.80', 8080)).data, 'origin');
    await r.removeService(0);
    assert.doesNotMatch(topo.inGw('nft list table inet wccpd'), /mask_0_/);
    assert.equal((await topo.probe('198.51.100.80')).data, 'origin');
  });
});
