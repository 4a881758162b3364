// What an admin sees of the ingress backend (docs/dataplane/ingress.md, "The ingress backend") in a real kernel, in
// namespaces this test creates (names carry process.pid): a departed engine's connections are reset by the gateway, no
// engine is bypass or refusal, an engine's own traffic and the gateway's own addresses are never redirected, the
// counters count what passed, a full flow map still redirects (a FIN or RST of an unknown flow too) and is counted,
// stop() leaves other tools' tables alone.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { IngressRedirector, explain } from '../../../src/dataplane/index.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import { webCache } from '../service-fixture.js';
import { flowEntries, sendSegments, Topology } from '../topology.js';

const rawSocket = await import('raw-socket').then(
  () => true,
  () => false,
);
const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip') && rawSocket,
  'root with nft and ip, and the native raw-socket package (ingress backend kernel tests)',
);
const PROBE = fileURLToPath(new URL('../bin/probe.mjs', import.meta.url));
/** Sends bare TCP segments of 4-tuples no socket owns, from the client namespace. */
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const name = (e: string | null): string => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : 'origin');
const TABLE = 'netdev wccpd_ingress';

/** Resolves with the held connection's next line, or 'no answer' after `ms` (a bound, not a figure under test). */
function within(p: Promise<string>, ms = 5000): Promise<string> {
  return Promise.race([
    p,
    new Promise<string>((resolve) => setTimeout(() => resolve(`no answer in ${ms} ms`), ms).unref()),
  ]);
}

describe('ingress backend: what clients and admins see', { skip }, () => {
  const topo = new Topology('ig');
  let r: IngressRedirector;
  /** Another tool's tables: a netdev one hooking the same client interface, and an inet one. */
  const otherTables = (): string => topo.inGw('nft list table netdev other') + topo.inGw('nft list table inet other');
  const tables = (): string => topo.inGw('nft list tables');
  const silence = (on: boolean): void => {
    const nft = `ip netns exec ${topo.origin} nft`;
    execFileSync('sh', [
      '-ec',
      on
        ? `${nft} add table ip silent; ${nft} add chain ip silent in '{ type filter hook input priority 0; }'; ` +
          `${nft} add rule ip silent in tcp dport 80 drop`
        : `${nft} delete table ip silent`,
    ]);
  };
  /** A connection from an engine's namespace (one request), as probe.mjs reports it. */
  const fromEngine = (i: number, host: string): { data: string; code: string | null } =>
    JSON.parse(
      execFileSync('ip', ['netns', 'exec', topo.engines[i]!, process.execPath, PROBE], {
        input: `${host} 80 3000\n`,
        encoding: 'utf8',
      }),
    ) as { data: string; code: string | null };
  /** A named counter of our table: packets, bytes. */
  const counter = (n: string): { packets: number; bytes: number } => {
    const m = /packets (\d+) bytes (\d+)/.exec(topo.inGw(`nft list counter ${TABLE} ${n}`));
    assert.ok(m, `counter ${n}`);
    return { packets: Number(m[1]), bytes: Number(m[2]) };
  };

  before(async () => {
    r = await topo.upWith(
      () => new IngressRedirector({ netns: topo.gw }),
      () =>
        topo.inGw(
          `nft add table netdev other; nft add chain netdev other in '{ type filter hook ingress device "c0" priority -5; policy accept; }'; ` +
            `nft add rule netdev other in ip saddr 192.0.2.250 drop; ` +
            `nft add table inet other; nft add chain inet other screen '{ type filter hook forward priority 0; policy accept; }'; ` +
            `nft add rule inet other screen ip daddr 192.0.2.250 drop`,
        ),
    );
  });
  after(() => topo.downAfter(() => r?.stop()));

  test('each new connection reaches the engine the table names; per-engine and per-bucket counters count what passed', async () => {
    const owner = (b: number): string => (b % 3 === 0 ? E2 : E1);
    const svc = webCache(owner, [E1, E2]);
    await r.apply(svc);
    const destinations = Array.from({ length: 48 }, (_, i) => `198.51.100.${i * 5}`);
    const before = await r.counters({ buckets: [0] });
    const bad: string[] = [];
    const perEngine = new Map<string, number>();
    for (const d of destinations) {
      const want = name(explain(svc, d).engine);
      const res = await topo.probe(d);
      if (res.data !== want) bad.push(`${d}: want ${want}, got ${res.data || res.code}`);
      perEngine.set(want, (perEngine.get(want) ?? 0) + 1);
    }
    assert.deepEqual(bad, []);
    const after = await r.counters({ buckets: [0] });
    // Per bucket: exactly one new connection classified into each probed bucket, none elsewhere.
    const moved = new Map<number, number>();
    const b0 = before.buckets.get(0) ?? [];
    (after.buckets.get(0) ?? []).forEach((c, b) => {
      const d = c.packets - (b0[b]?.packets ?? 0);
      if (d !== 0) moved.set(b, d);
    });
    assert.deepEqual(
      [...moved].sort((a, b) => a[0] - b[0]),
      destinations.map((d) => [bucketOf(d), 1]).sort((a, b) => Number(a[0]) - Number(b[0])),
    );
    // Per engine: every packet the client sent on its connections (SYN, request, ACKs, FIN: at least 3 each).
    for (const [engine, label] of [
      [E1, 'engine1'],
      [E2, 'engine2'],
    ] as const) {
      const was = before.engines.get(0)?.get(engine) ?? { packets: 0, bytes: 0 };
      const now = after.engines.get(0)?.get(engine);
      assert.ok(now, `engine ${engine} counted`);
      const connections = perEngine.get(label) ?? 0;
      assert.ok(connections > 0);
      assert.ok(now.packets - was.packets >= 3 * connections, `${engine}: ${now.packets - was.packets} packets`);
      assert.ok(now.bytes - was.bytes >= 40 * (now.packets - was.packets), `${engine}: bytes of IP packets`);
    }
  });

  test('no engine: connections go to the origin directly (counted as unassigned); fail closed refuses them (denied)', async () => {
    await r.apply(webCache(() => null, [], { failMode: 'open' }));
    const un0 = (await r.counters()).services?.get(0)?.unassigned.packets ?? NaN;
    for (const d of ['198.51.100.7', '198.51.100.8', '203.0.113.70'])
      assert.equal((await topo.probe(d)).data, 'origin');
    const un1 = (await r.counters()).services?.get(0)?.unassigned.packets ?? NaN;
    assert.ok(un1 - un0 >= 3, `unassigned moved by ${un1 - un0}`);

    await r.apply(webCache(() => null, [], { failMode: 'closed' }));
    const de0 = (await r.counters()).services?.get(0)?.denied.packets ?? NaN;
    const refused = await topo.probe('198.51.100.9');
    assert.equal(refused.code, 'ECONNREFUSED', JSON.stringify(refused));
    assert.equal((await topo.probe('198.51.100.9', 8080)).data, 'origin', 'another port is not the service');
    const de1 = (await r.counters()).services?.get(0)?.denied.packets ?? NaN;
    assert.equal(de1 - de0, 1, 'the refused SYN counted as denied');
    // An engine back: the same destination is redirected again.
    await r.apply(webCache(() => E1, [E1], { failMode: 'closed' }));
    assert.equal((await topo.probe('198.51.100.9')).data, 'engine1');
  });

  test("a connection to the gateway's own address on the service port is neither redirected nor refused", async () => {
    await topo.serve(topo.gw, 'gateway', 80);
    await r.apply(webCache(() => E1, [E1]));
    assert.equal((await topo.probe('198.51.100.10')).data, 'engine1');
    assert.equal((await topo.probe('203.0.113.1')).data, 'gateway', "the client interface's own address");
    assert.equal((await topo.probe('192.0.2.1')).data, 'gateway', "another interface's address");
    await r.apply(webCache(() => null, [], { failMode: 'closed' }));
    assert.equal((await topo.probe('198.51.100.10')).code, 'ECONNREFUSED');
    assert.equal((await topo.probe('203.0.113.1')).data, 'gateway', 'fail closed, local destination');
  });

  test('traffic sourced by an engine is never redirected, even where it arrives on a client interface', async () => {
    // br0 (the engines' segment) is a client interface too: E2's own connection arrives there.
    const svc = webCache(() => E1, [E1, E2], { clientInterfaces: ['c0', 'br0'] });
    await r.apply(svc);
    assert.equal((await topo.probe('198.51.100.11')).data, 'engine1', "a client's connection is redirected");
    const own = fromEngine(1, '198.51.100.11');
    assert.equal(own.data, 'origin', `engine 2's own connection goes to the origin: ${JSON.stringify(own)}`);
    // Once it is no engine of the service, its traffic on a client interface is a client's.
    await r.apply({ ...svc, engines: [E1] });
    const asClient = fromEngine(1, '198.51.100.11');
    assert.notEqual(
      asClient.data,
      'origin',
      `redirected to engine 1 (which does not serve it): ${JSON.stringify(asClient)}`,
    );
  });

  test('an engine removed from the service: its held connection is reset by the gateway; new connections follow the new table', async () => {
    await r.apply(webCache(() => E1, [E1, E2]));
    const held = await topo.hold('198.51.100.12');
    assert.equal(held.first, 'engine1');
    await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 2, buckets: Array(256).fill(E2) } }));
    assert.equal(await held.send('ping'), 'engine1', 'a live connection keeps its engine across a rebalance');
    assert.equal((await topo.probe('198.51.100.12')).data, 'engine2', 'a new connection follows the new table');
    // Engine 1 leaves, and no engine is left for the bucket (fail open): were its flow not reset, its next packet
    // would go to the origin, silenced here, and hang.
    silence(true);
    try {
      await r.apply(webCache(() => null, [E2], { table: { changeNumber: 3, buckets: Array(256).fill(null) } }));
      assert.equal(await within(held.send('ping')), 'error ECONNRESET', "the departed engine's flow is reset");
      assert.equal((await topo.probe('198.51.100.12', 80, 1000)).code, 'TIMEOUT', 'new connections go direct');
    } finally {
      silence(false);
    }
    assert.equal((await topo.probe('198.51.100.12')).data, 'origin');
    await r.apply(webCache(() => E2, [E2], { table: { changeNumber: 4, buckets: Array(256).fill(E2) } }));
    assert.equal((await topo.probe('198.51.100.12')).data, 'engine2');
  });

  test("stop() removes our table and nothing else: another tool's netdev and inet tables stay as they were", async () => {
    await r.apply(webCache(() => E1, [E1]));
    assert.match(tables(), /^table netdev wccpd_ingress$/m);
    const others = otherTables();
    await r.stop();
    assert.doesNotMatch(tables(), /wccpd/);
    assert.equal(otherTables(), others);
    assert.equal((await topo.probe('198.51.100.13')).data, 'origin');
  });

  test('a full flow map (max 4): further connections are still redirected, not sticky, and counted as flows_full', async () => {
    r = new IngressRedirector({ netns: topo.gw, flowMax: 4 });
    await r.start();
    const svc: ServiceRedirect = webCache(() => E1, [E1, E2]);
    // From no engine to engine 1: every bucket moved, so the new connections are recorded (until flows.idle later).
    await r.apply(webCache(() => null, [E1, E2]));
    await r.apply({ ...svc, table: { ...svc.table, changeNumber: 2 } });
    const held = [];
    for (let i = 0; i < 8; i++) {
      const h = await topo.hold(`198.51.100.${20 + i}`);
      assert.equal(h.first, 'engine1', `connection ${i} is redirected`);
      held.push(h);
    }
    const map = topo.inGw(`nft list map ${TABLE} flows_0`);
    assert.equal(flowEntries(map).filter((e) => e.dport === 80).length, 4, map);
    const full = counter('flows_full_0');
    assert.ok(full.packets >= 4, `flows_full_0 counted ${full.packets} packets`);
    assert.deepEqual((await r.counters()).flowsFull.get(0), full, 'the backend reports what the kernel counted');
    // A FIN of an unknown flow (it would be recorded closing): taken for one older than the move, so steered by the
    // claim before it (unassigned: routed) all the same, counted, no entry.
    const unassigned = async (): Promise<number> => (await r.counters()).services?.get(0)?.unassigned.packets ?? NaN;
    const u = await unassigned();
    sendSegments(topo.client, ['203.0.113.10,198.51.100.40,21200,80,FA']);
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(counter('flows_full_0').packets - full.packets, 1, 'the FIN counted as flows_full');
    assert.equal((await unassigned()) - u, 1, 'the FIN was routed, as unassigned');
    const after = flowEntries(topo.inGw(`nft list map ${TABLE} flows_0`));
    assert.equal(after.filter((e) => e.dport === 80).length, 4);
    assert.ok(!after.some((e) => e.sport === 21200), 'not recorded');
    for (const h of held) assert.equal(await h.send('ping'), 'engine1');
    // A rebalance: the recorded four keep engine 1; the others (the map full, they follow the table) go to engine 2,
    // which knows no such connection and resets it.
    await r.apply({ ...svc, table: { changeNumber: 3, buckets: Array(256).fill(E2) } });
    const answers = [];
    for (const h of held) answers.push(await within(h.send('ping')));
    assert.deepEqual(answers, [...Array(4).fill('engine1'), ...Array(4).fill('error ECONNRESET')]);
    assert.ok(counter('flows_full_0').packets > full.packets);
    await r.stop();
    assert.doesNotMatch(tables(), /wccpd/);
  });
});
