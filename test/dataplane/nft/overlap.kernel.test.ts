// Two services that match the same traffic, through the nft backend in the kernel (namespaces this test creates):
// the higher priority claims each connection, whatever it decides (an engine, direct, refused), every connection is
// counted by exactly one service, and a fail-closed service refuses only what it claimed.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { NftRedirector } from '../../../src/dataplane/index.js';
import type { RedirectCounters, ServiceRedirect } from '../../../src/dataplane/index.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip'),
  'root with nft and ip (overlapping services in the kernel)',
);
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const HIGH = 70;
const WEB = 0;
// Half of the buckets, one connection each (bucket of 198.51.100.i = 145 ^ i); the other half must stay at 0.
const destinations = Array.from({ length: 128 }, (_, i) => `198.51.100.${i}`);
const N = destinations.length;
const once = Array.from({ length: 256 }, (_, b) => (destinations.some((d) => bucketOf(d) === b) ? 1 : 0));

/** Per service: new connections counted in its buckets, unassigned and denied, and packets per engine. */
interface Tally {
  buckets: number[];
  unassigned: number;
  denied: number;
  engines: Map<string, number>;
}

function tally(c: RedirectCounters, id: number): Tally {
  return {
    buckets: (c.buckets.get(id) ?? []).map((b) => b.packets),
    unassigned: c.services?.get(id)?.unassigned.packets ?? NaN,
    denied: c.services?.get(id)?.denied.packets ?? NaN,
    engines: new Map(
      [...(c.engines.get(id) ?? new Map<string, { packets: number }>())].map(([e, v]) => [e, v.packets]),
    ),
  };
}

function delta(after: Tally, before: Tally): Tally {
  return {
    buckets: after.buckets.map((n, b) => n - (before.buckets[b] ?? 0)),
    unassigned: after.unassigned - before.unassigned,
    denied: after.denied - before.denied,
    engines: new Map([...after.engines].map(([e, n]) => [e, n - (before.engines.get(e) ?? 0)])),
  };
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

describe('overlapping services in the kernel', { skip }, () => {
  const topo = new Topology('ovl');
  let r: NftRedirector;

  before(async () => {
    r = await topo.upWith(() => new NftRedirector({ netns: topo.gw }));
  });
  after(() => topo.downAfter(() => r?.stop()));

  /** Connects to every destination once; returns what answered each and both services' counter changes. */
  async function round(): Promise<{ answers: string[]; high: Tally; web: Tally }> {
    const c0 = await r.counters();
    const answers: string[] = [];
    for (const d of destinations) {
      const res = await topo.probe(d);
      answers.push(res.ok ? res.data : (res.code ?? 'error'));
    }
    const c1 = await r.counters();
    return { answers, high: delta(tally(c1, HIGH), tally(c0, HIGH)), web: delta(tally(c1, WEB), tally(c0, WEB)) };
  }

  const high = (over: Partial<ServiceRedirect>): ServiceRedirect =>
    webCache((b) => (b % 2 === 0 ? E2 : null), [E2], { serviceId: HIGH, priority: 250, serviceFlags: 0x12, ...over });
  const web = (over: Partial<ServiceRedirect>): ServiceRedirect =>
    webCache(() => E1, [E1], { failMode: 'closed', priority: 240, ...over });

  test("the higher priority claims every connection: its engine, or direct for its unassigned buckets, never the other's", async () => {
    await r.apply(web({}));
    await r.apply(high({}));
    const { answers, high: h, web: w } = await round();
    const wrong = destinations.flatMap((d, i) => {
      const want = bucketOf(d) % 2 === 0 ? 'engine2' : 'origin';
      return answers[i] === want ? [] : [`${d}: want ${want}, got ${answers[i]}`];
    });
    assert.deepEqual(wrong, []);
    // Every connection counted once, in its bucket, by the service that claimed it; none by the other.
    assert.deepEqual(h.buckets, once);
    assert.equal(h.unassigned, N / 2);
    assert.equal(h.denied, 0);
    assert.ok(
      (h.engines.get(E2) ?? 0) >= (N / 2) * 3,
      `service ${HIGH} counted the packets of its ${N / 2} redirected connections`,
    );
    assert.equal(sum(w.buckets), 0);
    assert.equal(w.unassigned + w.denied, 0);
    assert.equal(w.engines.get(E1) ?? 0, 0);
    console.log(
      `priority 250 vs 240: ${N} connections, ${sum(h.buckets)} counted by service ${HIGH} ` +
        `(${h.engines.get(E2)} packets to engine2, ${h.unassigned} unassigned), ${sum(w.buckets)} by service 0`,
    );
  });

  test('a fail-closed service with no engine refuses nothing another service claimed', async () => {
    await r.apply(web({ engines: [], table: { changeNumber: 2, buckets: Array(256).fill(null) } }));
    const { answers, high: h, web: w } = await round();
    assert.deepEqual(
      answers.filter((a) => a !== 'engine2' && a !== 'origin'),
      [],
    );
    assert.equal(sum(h.buckets), N);
    assert.equal(w.denied, 0);
    assert.equal(sum(w.buckets), 0);
  });

  test('the claiming service refuses (fail closed) without the other one redirecting; a swap of priorities hands every connection to the other', async () => {
    await r.apply(web({}));
    await r.apply(
      high({ failMode: 'closed', engines: [], table: { changeNumber: 3, buckets: Array(256).fill(null) } }),
    );
    const refused = await round();
    assert.deepEqual([...new Set(refused.answers)], ['ECONNREFUSED']);
    assert.equal(refused.high.denied, N);
    assert.equal(sum(refused.web.buckets), 0);

    await r.apply(high({ priority: 100 }));
    const swapped = await round();
    assert.deepEqual([...new Set(swapped.answers)], ['engine1']);
    assert.deepEqual(swapped.web.buckets, once);
    assert.equal(sum(swapped.high.buckets), 0);
    assert.equal(swapped.high.engines.get(E2) ?? 0, 0);
  });

  test('a connection keeps the service that claimed it when priorities change under it', async () => {
    await r.apply(high({ priority: 250 }));
    const held = await topo.hold('198.51.100.81'); // bucket 145 ^ 81 = 192, even: engine 2
    assert.equal(bucketOf('198.51.100.81') % 2, 0);
    assert.equal(held.first, 'engine2');
    const before = tally(await r.counters(), WEB);
    await r.apply(high({ priority: 100 }));
    assert.equal(
      await held.send('ping'),
      'engine2',
      'the live connection stays with the service and engine that claimed it',
    );
    const after = delta(tally(await r.counters(), WEB), before);
    assert.equal(after.engines.get(E1) ?? 0, 0, 'service 0 never counts a connection it did not claim');
    assert.equal((await topo.probe('198.51.100.81')).data, 'engine1', 'a new connection goes to the service now first');
  });
});
