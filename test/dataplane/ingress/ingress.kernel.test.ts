// The ingress backend against the real kernel, in namespaces this test creates (names carry process.pid): a client's
// TCP connection is served by the engine the table names, handed over by L2 from the client interface's ingress hook;
// a held connection keeps its engine across a table change (its flow map entry, written at its first packet after the
// move) while a new one follows the table; where no bucket moved nothing is recorded; a flow's first packet holds its
// entry for 30 s only, until its second gives it the idle timeout.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { DataplaneError, IngressRedirector, explain } from '../../../src/dataplane/index.js';
import { DIRECT_VALUE } from '../../../src/dataplane/ingress/names.js';
import { createNftSession } from '../../../src/dataplane/kernel/nft-session.js';
import { webCache } from '../service-fixture.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import { flowEntries, sendSegments, Topology } from '../topology.js';

const rawSocket = await import('raw-socket').then(
  () => true,
  () => false,
);
const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip') && rawSocket,
  'root with nft and ip, and the native raw-socket package (ingress backend kernel tests)',
);
/** Sends bare TCP segments of 4-tuples no socket owns, from the client namespace. */
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const everyBucket = Array.from({ length: 256 }, (_, i) => `198.51.100.${i}`);
const name = (e: string | null): string => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : 'origin');

describe('ingress backend in the kernel', { skip }, () => {
  const topo = new Topology('ing');
  let r: IngressRedirector;

  /** Added to the redirector's clock: settle() moves it past flows.idle (600 s), so every move has ended. */
  let skew = 0;
  const now = (): number => performance.now() + skew;
  /** Every bucket steady: each move ended, nothing recorded where nothing moves. */
  async function settle(): Promise<void> {
    skew += 601_000;
    await r.expireMoves();
    assert.equal(r.movedBuckets(0).size, 0);
  }
  /**
   * Applies `svc` with every bucket moved, from another claim than its own (unassigned where it names an engine, its
   * first engine where it names none): new flows are recorded, as in the flows.idle after a change of the table.
   */
  async function applyMoved(svc: ServiceRedirect): Promise<void> {
    const other = svc.table.buckets.map((e) => (e === null ? (svc.engines[0] ?? null) : null));
    await r.apply({ ...svc, table: { changeNumber: svc.table.changeNumber + 100, buckets: other } });
    await settle();
    await r.apply(svc);
    assert.equal(r.movedBuckets(0).size, 256, 'every bucket moved');
  }

  before(async () => {
    r = await topo.upWith(() => new IngressRedirector({ netns: topo.gw, now }));
  });
  after(() => topo.downAfter(() => r?.stop()));

  /**
   * One new connection to each of the 256 destinations: what differs from the table's engine and bucket (the
   * answering engine, the one bucket counter that moved, and with countedOnce that it moved by exactly one packet).
   */
  async function probeEveryBucket(svc: ServiceRedirect, o: { countedOnce?: boolean } = {}): Promise<string[]> {
    let seen = (await r.counters()).buckets.get(0) ?? [];
    const bad: string[] = [];
    for (const d of everyBucket) {
      const res = await topo.probe(d);
      const want = name(explain(svc, d).engine);
      if (res.data !== want) bad.push(`${d}: want ${want}, got ${res.data || res.code}`);
      const now = (await r.counters()).buckets.get(0) ?? [];
      const moved = now.flatMap((c, b) => (c.packets > (seen[b]?.packets ?? 0) ? [b] : []));
      if (moved.length !== 1 || moved[0] !== bucketOf(d)) bad.push(`${d}: bucket ${bucketOf(d)}, kernel ${moved}`);
      // Counted once per flow: only its first packet is classified, the others follow its flow map entry.
      const grew = (now[bucketOf(d)]?.packets ?? 0) - (seen[bucketOf(d)]?.packets ?? 0);
      if (o.countedOnce === true && grew !== 1) bad.push(`${d}: counted twice`);
      seen = now;
    }
    return bad;
  }

  test('each new connection lands in bucket XOR(destination bytes) and reaches the engine the table names', async () => {
    const owner = (b: number): string => (b % 3 === 0 ? E2 : E1);
    const svc = webCache(owner, [E1, E2]);
    await r.apply(svc);
    assert.deepEqual(await probeEveryBucket(svc, { countedOnce: true }), []);
    const c = await r.counters();
    const e1 = c.engines.get(0)?.get(E1)?.packets ?? 0;
    const e2 = c.engines.get(0)?.get(E2)?.packets ?? 0;
    // Every client packet of the 256 connections (SYN, ACK, request, FIN: at least 3 each) was steered and counted.
    assert.ok(e1 + e2 >= 3 * 256, `engine counters ${e1} + ${e2}`);
    assert.ok(e2 > 0 && e1 > e2, `engine counters ${e1} / ${e2}`);
    assert.equal(c.flowsFull.get(0)?.packets, 0);
    // Nothing of ours outside the table: no ip rule, no routing table, no conntrack entry.
    assert.deepEqual(
      topo
        .inGw('ip rule list')
        .trim()
        .split('\n')
        .map((l) => l.split(':')[0]),
      ['0', '32766', '32767'],
    );
    assert.equal(topo.inGw('cat /proc/net/nf_conntrack 2>/dev/null | wc -l').trim(), '0');
  });

  test('the address cache: a destination hashed before keeps its bucket, and the bucket follows the new table', async () => {
    // The test before hashed all 256 destinations: each is in @hcache_daddr with its bucket.
    const cached = topo.inGw('nft -j list map netdev wccpd_ingress hcache_daddr');
    assert.equal((cached.match(/"198\.51\.100\.\d+"/g) ?? []).length, 256, 'every destination hashed is cached');
    // Another table (the owners shifted): a cached destination's new flow goes where the new table puts its bucket.
    const owner = (b: number): string => (b % 3 === 1 ? E2 : E1);
    const svc = webCache(owner, [E1, E2], { table: { changeNumber: 7, buckets: everyBucket.map((_, b) => owner(b)) } });
    await r.apply(svc);
    assert.deepEqual(await probeEveryBucket(svc), []);
  });

  test('a held connection keeps its engine across a table change; a new one goes to the new engine', async () => {
    await r.apply(webCache(() => E1, [E1, E2]));
    const held = await topo.hold('198.51.100.80');
    assert.equal(held.first, 'engine1');
    await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 2, buckets: new Array(256).fill(E2) } }));
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine2', 'a new connection follows the new table');
    assert.equal(await held.send('ping'), 'engine1', 'the held connection stays on its engine');
    assert.equal((await topo.probe('198.51.100.81')).data, 'engine2');
    assert.equal(await held.send('ping'), 'engine1');
  });

  test('where no bucket moved nothing is recorded; a moved bucket records its flows until flows.idle after the move', async () => {
    const d = '198.51.100.90';
    const flows = (): string => topo.inGw('nft list map netdev wccpd_ingress flows_0');
    const recorded = (port: number): boolean => flowEntries(flows()).some((e) => e.daddr === d && e.sport === port);
    await r.apply(webCache(() => E1, [E1, E2]));
    await settle();
    const port1 = 40000 + ((process.pid + 21) % 20000);
    const held = await topo.hold(d, 80, port1);
    assert.equal(held.first, 'engine1');
    assert.equal(await held.send('ping'), 'engine1');
    assert.ok(!recorded(port1), `steady: not recorded, in ${flows()}`);
    // The bucket moves: the held connection's next packet goes where it went (the claim before the move) and records
    // it; a new connection follows the table and is recorded too.
    await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 2, buckets: new Array(256).fill(E2) } }));
    assert.equal(r.movedBuckets(0).get(bucketOf(d)), slotOf(E1), 'moved, from engine 1');
    assert.equal(await held.send('ping'), 'engine1');
    assert.equal(entry(d, port1).value, `0:${slotOf(E1).toString(16)}`);
    const port2 = port1 + 1;
    const held2 = await topo.hold(d, 80, port2);
    assert.equal(held2.first, 'engine2');
    assert.equal(entry(d, port2).value, `0:${slotOf(E2).toString(16)}`);
    // flows.idle later the move has ended: the bucket is steady again (its verdict the engine's slot), its recorded
    // flows keep their engines, and a new connection is steered without a record.
    await settle();
    assert.doesNotMatch(topo.inGw('nft list map netdev wccpd_ingress bucket_0'), /moved_0/);
    assert.equal(await held.send('ping'), 'engine1');
    assert.equal(await held2.send('ping'), 'engine2');
    const port3 = port1 + 2;
    const held3 = await topo.hold(d, 80, port3);
    assert.equal(held3.first, 'engine2');
    assert.ok(!recorded(port3), `steady again: not recorded, in ${flows()}`);
  });

  test('changes written as differences steer as a whole write would; a bucket someone else deleted is written whole again by the next change that moves it', async () => {
    const own = (b: number): string => (b % 3 === 0 ? E2 : E1);
    const table = (f: (b: number) => string, n: number): ServiceRedirect =>
      webCache(f, [E1, E2], { table: { changeNumber: n, buckets: Array.from({ length: 256 }, (_, b) => f(b)) } });
    const elements = (): number =>
      (
        JSON.parse(topo.inGw('nft -j list map netdev wccpd_ingress bucket_0')) as {
          nftables: { map?: { elem?: unknown[] } }[];
        }
      ).nftables.find((o) => o.map !== undefined)?.map?.elem?.length ?? 0;
    await r.apply(table(own, 20));
    await settle();
    // Engine 2 takes 64 buckets, gives half back, then the first table again: three changes written as differences.
    const steps = [(b: number) => (b < 64 ? E2 : own(b)), (b: number) => (b < 32 ? E1 : b < 64 ? E2 : own(b)), own];
    let svc = table(own, 20);
    for (const [i, f] of steps.entries()) {
      svc = table(f, 21 + i);
      await r.apply(svc);
    }
    assert.equal(elements(), 256);
    assert.deepEqual(await probeEveryBucket(svc), []);
    // Someone deletes one bucket's element; the next change moves that bucket: nft refuses the differences (the
    // element to delete is not there) and the change is written whole.
    const b = bucketOf('198.51.100.100');
    topo.inGw(`nft delete element netdev wccpd_ingress bucket_0 { ${b} }`);
    assert.equal(elements(), 255);
    svc = table((x) => (x === b ? (own(b) === E1 ? E2 : E1) : own(x)), 30);
    await r.apply(svc);
    assert.equal(elements(), 256);
    assert.deepEqual(await probeEveryBucket(svc), []);
  });

  test('a mask service steers by its Mask/Value Sets', async () => {
    const mask = { sourceAddressMask: 0, destinationAddressMask: 0x1, sourcePortMask: 0, destinationPortMask: 0 };
    const value = (d: number, engine: string) => ({
      sourceAddress: 0,
      destinationAddress: d,
      sourcePort: 0,
      destinationPort: 0,
      engine,
    });
    await r.apply(webCache(() => null, [E1, E2], { maskSets: [{ mask, values: [value(0, E1), value(1, E2)] }] }));
    for (const [d, want] of [
      ['198.51.100.8', 'engine1'],
      ['198.51.100.9', 'engine2'],
      ['203.0.113.70', 'engine1'],
      ['203.0.113.71', 'engine2'],
    ] as const)
      assert.equal((await topo.probe(d)).data, want, d);
    // Back to hash assignment: the mask maps go.
    await r.apply(webCache(() => E1, [E1, E2]));
    assert.doesNotMatch(topo.inGw('nft list maps netdev'), /mask_0_/);
  });

  /** Runs a Node script in the client namespace; its stdout. */
  const inClient = (script: string): string =>
    execFileSync('ip', ['netns', 'exec', topo.client, process.execPath, '-e', script], {
      encoding: 'utf8',
      timeout: 5000,
    });
  /** The flow map's entry of a connection to `d` (port 80, from `port` when given): its value and seconds left. */
  const entry = (d: string, port?: number): { value: string; expires: number } => {
    const listing = topo.inGw('nft list map netdev wccpd_ingress flows_0');
    const e = flowEntries(listing).find(
      (x) => x.daddr === d && x.dport === 80 && (port === undefined || x.sport === port),
    );
    assert.ok(e !== undefined, `${d} in ${listing}`);
    return e;
  };
  const slotOf = (e: string): number => r.slotsInUse().get(`0 l2 ${e}`) ?? NaN;

  test("a closed flow's entry lasts 10 s whoever closed first, marked closing; a live one keeps the idle timeout", async () => {
    await applyMoved(webCache(() => E1, [E1, E2]));
    const held = await topo.hold('203.0.113.100');
    assert.equal(held.first, 'engine1');
    assert.equal((await topo.probe('203.0.113.101')).data, 'engine1', 'the engine closes first');
    // The client closes first: its FIN, the engine's FIN, then its bare ACK (which must not refresh the entry, and
    // must reach engine 1, not the origin: a counter in the origin's namespace sees every packet to that address).
    const clientFirst = `const s = require('net').connect(80, '203.0.113.102', () => s.write('hold\\n'));
      s.once('data', (d) => { process.stdout.write(String(d)); s.end(); }); s.on('close', () => process.exit(0));`;
    const engineCounter = async (): Promise<number> => (await r.counters()).engines.get(0)?.get(E1)?.packets ?? NaN;
    const before = await engineCounter();
    const originNft = (cmd: string): string =>
      execFileSync('ip', ['netns', 'exec', topo.origin, 'sh', '-c', cmd], { encoding: 'utf8' });
    originNft(
      "nft add table ip seen; nft add chain ip seen pre '{ type filter hook prerouting priority -300; }'; " +
        'nft add rule ip seen pre ip daddr 203.0.113.102 counter',
    );
    assert.equal(inClient(clientFirst), 'engine1\n');
    await new Promise((resolve) => setTimeout(resolve, 200));
    const slot = slotOf(E1);
    assert.equal(entry('203.0.113.100').value, `0:${slot.toString(16)}`, 'open');
    assert.ok(entry('203.0.113.100').expires > 590);
    // A closed one's value says closing (CLOSING_FLAG: major 1 in nft's notation) and still names engine 1's slot.
    for (const d of ['203.0.113.101', '203.0.113.102']) {
      const e = entry(d);
      assert.equal(e.value, `1:${slot.toString(16)}`, d);
      assert.ok(e.expires <= 10, `${d}: ${e.expires} s left`);
    }
    const seen = originNft('nft list chain ip seen pre; nft delete table ip seen');
    assert.match(
      seen,
      /counter packets 0 bytes 0/,
      "every packet of the connection, the client's last ACK too, went to engine 1",
    );
    // SYN, ACK, request, FIN, last ACK at least: every one steered to engine 1 and counted there.
    assert.ok((await engineCounter()) - before >= 5, `${(await engineCounter()) - before} packets to engine 1`);
    assert.equal(await held.send('ping'), 'engine1');
  });

  test('a new SYN on a closing 4-tuple (its port reused within the 10 s) is a new flow: the current table, idle timeout', async () => {
    await applyMoved(webCache(() => E1, [E1, E2]));
    const port = 40000 + (process.pid % 20000);
    // The engine closes first ("once"), so the client's side ends at once (no TIME-WAIT) and its port is free again.
    const once = `const s = require('net').connect({ port: 80, host: '203.0.113.103', localPort: ${port} },
        () => s.write('once\\n'));
      s.on('data', (d) => process.stdout.write(String(d))); s.on('close', () => process.exit(0));`;
    assert.equal(inClient(once), 'engine1\n');
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(entry('203.0.113.103', port).value, `1:${slotOf(E1).toString(16)}`, 'closing');
    // The bucket moves to engine 2; the same 4-tuple again within the 10 s.
    await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 2, buckets: new Array(256).fill(E2) } }));
    // A new connection follows the table in force (engine 2) and is recorded open, with the idle timeout.
    const held = await topo.hold('203.0.113.103', 80, port);
    assert.equal(held.first, 'engine2');
    const e = entry('203.0.113.103', port);
    assert.equal(e.value, `0:${slotOf(E2).toString(16)}`, 'open, engine 2');
    assert.ok(e.expires > 590, `${e.expires} s left`);
    assert.equal(await held.send('ping'), 'engine2');
  });

  test('one 4-tuple opened and closed again and again is written at most once a second; a FIN on a closing entry leaves it as it is', async () => {
    await applyMoved(webCache(() => E1, [E1, E2]));
    const d = '203.0.113.105';
    // Below the client's ephemeral range; dropped where it arrives, before conntrack, so no engine answers a SYN and
    // makes the client reset the 4-tuple.
    const port = 23000 + (process.pid % 900);
    const places = [...topo.engines, topo.origin];
    const inNs = (ns: string, cmd: string): string =>
      execFileSync('ip', ['netns', 'exec', ns, 'sh', '-ec', cmd], { encoding: 'utf8' });
    for (const ns of places) {
      inNs(
        ns,
        "nft add table ip quiet; nft add chain ip quiet pre '{ type filter hook prerouting priority -300; }'; " +
          `nft add rule ip quiet pre tcp sport ${port} counter drop`,
      );
    }
    /** Bare segments of the one 4-tuple, with these flags each. */
    const go = (...flags: string[]): void =>
      sendSegments(
        topo.client,
        flags.map((f) => `203.0.113.10,${d},${port},80,${f}`),
      );
    const packets = async (): Promise<number> => (await r.counters()).engines.get(0)?.get(E1)?.packets ?? NaN;
    const closing = `1:${slotOf(E1).toString(16)}`;
    try {
      const before = await packets();
      // A connection, closed; the same 4-tuple opened again (a new flow) and closed; then a third SYN within the
      // second: steered by the closing entry, which it leaves closing (the old code opened it again every time).
      go('S', 'FA', 'S', 'FA', 'S');
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal((await packets()) - before, 5, 'every segment reached engine 1');
      const first = entry(d, port);
      assert.equal(first.value, closing, 'still closing after the third SYN');
      assert.ok(first.expires <= 10, `${first.expires} s left`);
      // FINs on a closing entry (a flood of them) are steered by it and leave it as it is: its 10 s run from the
      // first FIN (the old code deleted it and wrote it again at each one, 10 s from the last).
      await new Promise((resolve) => setTimeout(resolve, 2000));
      go(...Array.from({ length: 20 }, () => 'FA'));
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal((await packets()) - before, 25, 'the FINs reached engine 1');
      const later = entry(d, port);
      assert.equal(later.value, closing);
      assert.ok(later.expires <= first.expires - 1, `${later.expires} s left, ${first.expires} s before the FINs`);
      // More than a second after the last opening: a SYN opens the 4-tuple again (the current table, recorded open).
      go('S');
      await new Promise((resolve) => setTimeout(resolve, 200));
      const reopened = entry(d, port);
      assert.equal(reopened.value, `0:${slotOf(E1).toString(16)}`, 'open again');
      assert.ok(reopened.expires > 20 && reopened.expires <= 30, `${reopened.expires} s left`);
    } finally {
      for (const ns of places) inNs(ns, 'nft delete table ip quiet');
    }
  });

  test('a FIN or RST of an unknown flow: steered by the table where its bucket did not move (nothing recorded); where it moved, by the claim before the move, recorded closing (10 s)', async () => {
    // A third of the buckets each: engine 1, engine 2, none (unassigned: routed to the origin).
    const owner = (b: number): string | null => (b % 3 === 1 ? E1 : b % 3 === 2 ? E2 : null);
    const svc = webCache(owner, [E1, E2]);
    await r.apply(svc);
    await settle();
    const of = (e: string | null): string[] => everyBucket.filter((d) => explain(svc, d).engine === e);
    // A live connection, steady: no entry; nothing below breaks it.
    const live = of(E1)[5]!;
    // From a port of its own: the earlier tests' connections to this destination may still have closing entries.
    const livePort = 40000 + ((process.pid + 13) % 20000);
    const held = await topo.hold(live, 80, livePort);
    assert.equal(held.first, 'engine1');
    const recorded = (d: string, port: number): boolean =>
      flowEntries(topo.inGw('nft list map netdev wccpd_ingress flows_0')).some(
        (e) => e.daddr === d && e.sport === port,
      );
    assert.ok(!recorded(live, livePort), 'a connection of a steady bucket is not recorded');
    // Two destinations of each fate; to each a FIN|ACK and an RST of 4-tuples no connection has (forged, or a late
    // one of a flow whose entry is gone), source ports from `base` (below the client's ephemeral range).
    const pick = (e: string | null): string[] => of(e).slice(0, 2);
    const segmentsFrom = (base: number) =>
      [E1, E2, null]
        .flatMap((e) => pick(e))
        .flatMap((d, i) => [
          { d, port: base + 2 * i, flags: 'FA', at: name(explain(svc, d).engine) },
          { d, port: base + 2 * i + 1, flags: 'R', at: name(explain(svc, d).engine) },
        ]);
    // Where each arrives: a set of (destination, source port) in the engines' and the origin's namespaces, before
    // their own conntrack and NAT.
    const places = { engine1: topo.engines[0]!, engine2: topo.engines[1]!, origin: topo.origin };
    const inNs = (ns: string, cmd: string): string =>
      execFileSync('ip', ['netns', 'exec', ns, 'sh', '-ec', cmd], { encoding: 'utf8' });
    for (const ns of Object.values(places)) {
      inNs(
        ns,
        "nft add table ip seen; nft add set ip seen got '{ type ipv4_addr . inet_service; flags dynamic; }'; " +
          "nft add chain ip seen pre '{ type filter hook prerouting priority -300; }'; " +
          'nft add rule ip seen pre tcp sport 21000-21999 add @got { ip daddr . tcp sport }',
      );
    }
    const packets = (c: Awaited<ReturnType<typeof r.counters>>, e: string): number =>
      c.engines.get(0)?.get(e)?.packets ?? 0;
    const unassigned = (c: Awaited<ReturnType<typeof r.counters>>): number =>
      c.services?.get(0)?.unassigned.packets ?? 0;
    /** Sends the segments; asserts where each arrived and what the counters counted (per engine, unassigned). */
    const sendAndCheck = async (segments: ReturnType<typeof segmentsFrom>, unassignedGrows: number): Promise<void> => {
      const c0 = await r.counters();
      sendSegments(
        topo.client,
        segments.map((x) => `203.0.113.10,${x.d},${x.port},80,${x.flags}`),
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      for (const [where, ns] of Object.entries(places)) {
        const got = [
          ...inNs(ns, 'nft list set ip seen got; nft flush set ip seen got').matchAll(/(\d+\.\d+\.\d+\.\d+) \. (\d+)/g),
        ]
          .map((m) => `${m[1]}:${m[2]}`)
          .sort();
        const want = segments
          .filter((x) => x.at === where)
          .map((x) => `${x.d}:${x.port}`)
          .sort();
        assert.ok(want.length === 4, `${where}: 4 segments`);
        assert.deepEqual(got, want, `what reached ${where}`);
      }
      const c1 = await r.counters();
      assert.equal(packets(c1, E1) - packets(c0, E1), 4, 'engine 1 counted its four');
      assert.equal(packets(c1, E2) - packets(c0, E2), 4, 'engine 2 counted its four');
      assert.equal(unassigned(c1) - unassigned(c0), unassignedGrows, 'unassigned');
    };
    const direct = DIRECT_VALUE.toString(16);
    try {
      // Steady: where the table sends them; nothing recorded, and Unassigned counts new connections (SYNs) only.
      const steady = segmentsFrom(21000);
      await sendAndCheck(steady, 0);
      for (const x of steady) assert.ok(!recorded(x.d, x.port), `${x.d}:${x.port} not recorded`);
      // Every bucket moves (each to the next bucket's claim): a FIN or RST without an entry belongs to a connection
      // older than the move, so it goes where the table before sent it (x.at still), and is recorded closing (the
      // closing flag, major 1, with the slot or the direct value) for at most 10 s, not open for the idle timeout: a
      // flood of them cannot fill the map for 10 minutes.
      const buckets = everyBucket.map((_, b) => owner(b + 1));
      await r.apply(webCache((b) => owner(b + 1), [E1, E2], { table: { changeNumber: 2, buckets } }));
      assert.equal(r.movedBuckets(0).size, 256);
      const moved = segmentsFrom(21300);
      await sendAndCheck(moved, 4);
      for (const x of moved) {
        const e = entry(x.d, x.port);
        const value = x.at === 'origin' ? direct : slotOf(x.at === 'engine1' ? E1 : E2).toString(16);
        assert.deepEqual(
          { value: e.value, expires: e.expires <= 10 ? 'at most 10 s' : `${e.expires} s` },
          { value: `1:${value}`, expires: 'at most 10 s' },
          `${x.d}:${x.port} ${x.flags}: closing, ${x.at}`,
        );
      }
      // The live connection too: its next packet goes to its engine and records it.
      assert.equal(await held.send('ping'), 'engine1');
      assert.equal(entry(live, livePort).value, `0:${slotOf(E1).toString(16)}`, 'recorded open');
      // Such a flow's next packet (the client's last ACK after a late FIN) follows its entry, even across another
      // table change within the 10 s, and does not refresh it.
      await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 3, buckets: new Array(256).fill(E2) } }));
      const late = moved.find((x) => x.at === 'engine1' && x.flags === 'FA')!;
      const before = packets(await r.counters(), E1);
      sendSegments(topo.client, [`203.0.113.10,${late.d},${late.port},80,A`]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(packets(await r.counters(), E1) - before, 1, 'the last ACK went to engine 1');
      const after = entry(late.d, late.port);
      assert.equal(after.value, `1:${slotOf(E1).toString(16)}`);
      assert.ok(after.expires <= 10, `${after.expires} s left`);
      // The live connection is as it was: open, idle timeout, its engine.
      const open = entry(live, livePort);
      assert.equal(open.value, `0:${slotOf(E1).toString(16)}`, 'open');
      assert.ok(open.expires > 590, `${open.expires} s left`);
      assert.equal(await held.send('ping'), 'engine1');
    } finally {
      for (const ns of Object.values(places)) inNs(ns, 'nft delete table ip seen');
    }
  });

  /** Sends bare TCP segments ("SRC,DST,SPORT,DPORT,FLAGS" each) from the client namespace. */
  const send = (...segments: string[]): void => sendSegments(topo.client, segments);
  /** A flow map's entry of the 4-tuple 203.0.113.10:sport -> d:dport. */
  const entryOf = (map: string, d: string, sport: number, dport: number) => {
    const listing = topo.inGw(`nft list map netdev wccpd_ingress ${map}`);
    const e = flowEntries(listing).find((x) => x.daddr === d && x.sport === sport && x.dport === dport);
    assert.ok(e !== undefined, `${d}:${dport} from ${sport} in ${listing}`);
    return e;
  };

  test("a forged SYN or UDP datagram of an unknown 4-tuple reaches the engine the table names and holds its entry 30 s, not the idle timeout; the flow's second packet gives it the idle timeout", async () => {
    // A third of the buckets each: engine 1, engine 2, none (unassigned: routed to the origin). A UDP service (60,
    // port 53) beside the TCP one, with the same table.
    const owner = (b: number): string | null => (b % 3 === 1 ? E1 : b % 3 === 2 ? E2 : null);
    const svc = webCache(owner, [E1, E2]);
    const udp = webCache(owner, [E1, E2], { serviceId: 60, protocol: 17, ports: [53] });
    await applyMoved(svc);
    await r.apply(udp);
    const of = (e: string | null): string[] => everyBucket.filter((d) => explain(svc, d).engine === e);
    // Two destinations of each fate, one SYN each from source ports 22000.. (below the client's ephemeral range), and
    // one UDP datagram each to port 53 from the same ports.
    const flows = [E1, E2, null]
      .flatMap((e) => of(e).slice(10, 12))
      .map((d, i) => ({ d, port: 22000 + i, at: name(explain(svc, d).engine) }));
    // Where each arrives: sets of (destination, source port), each element counting its packets, in the engines' and
    // the origin's namespaces, before their own conntrack and NAT; dropped there, so no SYN-ACK makes the client answer
    // with an RST (which would close the entry) and no UDP datagram an ICMP error.
    const places = { engine1: topo.engines[0]!, engine2: topo.engines[1]!, origin: topo.origin };
    const inNs = (ns: string, cmd: string): string =>
      execFileSync('ip', ['netns', 'exec', ns, 'sh', '-ec', cmd], { encoding: 'utf8' });
    /** One datagram from 203.0.113.10:port to d:53. */
    const datagram = (d: string, port: number): void => {
      inClient(`const s = require('dgram').createSocket('udp4');
        s.bind(${port}, '203.0.113.10', () => s.send('x', 53, '${d}', () => s.close()));`);
    };
    /** What reached each place: `destination:port packets` per flow, for the TCP segments and the datagrams. */
    const reached = (): Record<string, string[]> =>
      Object.fromEntries(
        Object.entries(places).flatMap(([where, ns]) =>
          ['segments', 'datagrams'].map((set) => [
            `${where} ${set}`,
            [
              ...inNs(ns, `nft list set ip seen ${set}`).matchAll(
                /(\d+\.\d+\.\d+\.\d+) \. (\d+) counter packets (\d+)/g,
              ),
            ]
              .map((m) => `${m[1]}:${m[2]} ${m[3]}`)
              .sort(),
          ]),
        ),
      );
    /** What should have: each flow where the table sends it, with n packets. */
    const expected = (n: number): Record<string, string[]> =>
      Object.fromEntries(
        Object.keys(places).flatMap((where) =>
          ['segments', 'datagrams'].map((set) => [
            `${where} ${set}`,
            flows
              .filter((f) => f.at === where)
              .map((f) => `${f.d}:${f.port} ${n}`)
              .sort(),
          ]),
        ),
      );
    try {
      for (const ns of Object.values(places)) {
        inNs(
          ns,
          'nft add table ip seen; ' +
            "nft add set ip seen segments '{ type ipv4_addr . inet_service; flags dynamic; counter; }'; " +
            "nft add set ip seen datagrams '{ type ipv4_addr . inet_service; flags dynamic; counter; }'; " +
            "nft add chain ip seen pre '{ type filter hook prerouting priority -300; }'; " +
            'nft add rule ip seen pre tcp sport 22000-22999 add @segments { ip daddr . tcp sport } drop; ' +
            'nft add rule ip seen pre udp sport 22000-22999 add @datagrams { ip daddr . udp sport } drop',
        );
      }
      send(...flows.map((f) => `203.0.113.10,${f.d},${f.port},80,S`));
      for (const f of flows) datagram(f.d, f.port);
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.ok(
        Object.values(expected(1)).every((l) => l.length === 2),
        'two flows of each fate',
      );
      assert.deepEqual(
        reached(),
        expected(1),
        'each SYN and datagram reached the engine the table names (or the origin)',
      );
      // Recorded open (major 0) with the engine's slot or the direct value, for 30 s: a flood of such packets holds no
      // entry for the idle timeout (600 s).
      const valueOf = (at: string, id: number): string => {
        const slot = r.slotsInUse().get(`${id} l2 ${at === 'engine1' ? E1 : E2}`) ?? NaN;
        return `0:${(at === 'origin' ? DIRECT_VALUE : slot).toString(16)}`;
      };
      const seen = (id: number, dport: number) =>
        flows.map((f) => {
          const e = entryOf(`flows_${id}`, f.d, f.port, dport);
          return {
            flow: `${f.d}:${f.port}`,
            value: e.value,
            expires: e.expires <= 30 ? 'at most 30 s' : `${e.expires} s`,
          };
        });
      const want = (id: number) =>
        flows.map((f) => ({ flow: `${f.d}:${f.port}`, value: valueOf(f.at, id), expires: 'at most 30 s' }));
      assert.deepEqual(seen(0, 80), want(0), 'the SYNs');
      assert.deepEqual(seen(60, 53), want(60), 'the datagrams');
      // Each flow's second packet (an ACK, a datagram again) goes where the first went and gives its entry the idle
      // timeout: the refresh names none, so the map's (the entry's own 30 s is still listed).
      send(...flows.map((f) => `203.0.113.10,${f.d},${f.port},80,A`));
      for (const f of flows) datagram(f.d, f.port);
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.deepEqual(reached(), expected(2), 'each second packet went where its first went');
      for (const [id, dport] of [
        [0, 80],
        [60, 53],
      ] as const) {
        for (const f of flows) {
          const e = entryOf(`flows_${id}`, f.d, f.port, dport);
          assert.deepEqual(
            { value: e.value, timeout: e.timeout, expires: e.expires > 590 ? 'over 590 s' : `${e.expires} s` },
            { value: valueOf(f.at, id), timeout: 30, expires: 'over 590 s' },
            `flows_${id}: ${f.d}:${f.port}, its second packet`,
          );
        }
      }
    } finally {
      for (const ns of Object.values(places)) inNs(ns, 'nft delete table ip seen 2>/dev/null || true');
      await r.removeService(60);
    }
  });

  test("a SYN's retransmission is steered by its entry (the same engine across a table change) but leaves it 30 s: an unanswered connection attempt never gets the idle timeout; the handshake's ACK does", async () => {
    await applyMoved(webCache(() => E1, [E1, E2]));
    const d = '203.0.113.105';
    const port = 22500;
    const places = { engine1: topo.engines[0]!, engine2: topo.engines[1]!, origin: topo.origin };
    const inNs = (ns: string, cmd: string): string =>
      execFileSync('ip', ['netns', 'exec', ns, 'sh', '-ec', cmd], { encoding: 'utf8' });
    /** The 4-tuple's segments that reached each place (dropped there, before their conntrack: no SYN-ACK, no RST). */
    const reached = (): Record<string, number> =>
      Object.fromEntries(
        Object.entries(places).map(([where, ns]) => [
          where,
          Number(/counter packets (\d+)/.exec(inNs(ns, 'nft list chain ip seen pre'))?.[1] ?? NaN),
        ]),
      );
    const state = () => {
      const e = entryOf('flows_0', d, port, 80);
      const expires = e.expires <= 30 ? 'at most 30 s' : e.expires > 590 ? 'over 590 s' : `${e.expires} s`;
      return { value: e.value, timeout: e.timeout, expires };
    };
    const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 200));
    try {
      for (const ns of Object.values(places)) {
        inNs(
          ns,
          'nft add table ip seen; ' +
            "nft add chain ip seen pre '{ type filter hook prerouting priority -300; }'; " +
            `nft add rule ip seen pre ip daddr ${d} tcp sport ${port} counter drop`,
        );
      }
      const open1 = `0:${slotOf(E1).toString(16)}`;
      send(`203.0.113.10,${d},${port},80,S`);
      await settle();
      assert.deepEqual(reached(), { engine1: 1, engine2: 0, origin: 0 }, 'the SYN');
      assert.deepEqual(state(), { value: open1, timeout: 30, expires: 'at most 30 s' }, 'the SYN');
      // The bucket moves to engine 2 before the retransmission: the connection must not move.
      await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 2, buckets: new Array(256).fill(E2) } }));
      send(`203.0.113.10,${d},${port},80,S`);
      await settle();
      assert.deepEqual(reached(), { engine1: 2, engine2: 0, origin: 0 }, 'the retransmission, to the same engine');
      assert.deepEqual(state(), { value: open1, timeout: 30, expires: 'at most 30 s' }, 'not refreshed by a SYN');
      // The handshake's ACK promotes it.
      send(`203.0.113.10,${d},${port},80,A`);
      await settle();
      assert.deepEqual(reached(), { engine1: 3, engine2: 0, origin: 0 }, 'the ACK');
      assert.deepEqual(state(), { value: open1, timeout: 30, expires: 'over 590 s' }, 'the idle timeout');
    } finally {
      for (const ns of Object.values(places)) inNs(ns, 'nft delete table ip seen 2>/dev/null || true');
    }
  });

  test('a real connection: recorded for 30 s at its SYN, the idle timeout from its handshake on; it keeps its engine across a table change', async () => {
    await applyMoved(webCache(() => E1, [E1, E2]));
    const port = 40000 + ((process.pid + 7) % 20000);
    const held = await topo.hold('203.0.113.104', 80, port);
    assert.equal(held.first, 'engine1');
    // Added with 30 s at the SYN (nft lists the entry's own timeout where it is not the map's), given the idle
    // timeout by the handshake's ACK.
    const e = entryOf('flows_0', '203.0.113.104', port, 80);
    assert.deepEqual(
      { value: e.value, timeout: e.timeout, expires: e.expires > 590 ? 'over 590 s' : `${e.expires} s` },
      { value: `0:${slotOf(E1).toString(16)}`, timeout: 30, expires: 'over 590 s' },
    );
    await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 2, buckets: new Array(256).fill(E2) } }));
    assert.equal((await topo.probe('203.0.113.104')).data, 'engine2', 'a new connection follows the new table');
    assert.equal(await held.send('ping'), 'engine1', 'the connection stays on its engine');
    assert.ok(entryOf('flows_0', '203.0.113.104', port, 80).expires > 590);
  });

  test('fail closed with no engine: a FIN of an unknown flow is refused (counted denied) and not recorded', async () => {
    await r.apply(webCache(() => null, [], { failMode: 'closed' }));
    const denied = async (): Promise<number> => (await r.counters()).services?.get(0)?.denied.packets ?? NaN;
    const before = await denied();
    sendSegments(topo.client, ['203.0.113.10,198.51.100.95,21100,80,FA']);
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal((await denied()) - before, 1);
    const listing = topo.inGw('nft list map netdev wccpd_ingress flows_0');
    assert.ok(!flowEntries(listing).some((e) => e.sport === 21100), listing);
  });

  test('GRE, an engine behind a router and one of the gateway’s own addresses are refused clearly; nothing changes', async () => {
    await r.apply(webCache(() => E1, [E1]));
    const objects = (): string =>
      topo.inGw('nft list map netdev wccpd_ingress bucket_0; nft list map netdev wccpd_ingress slots; nft list chains');
    const table = objects();
    await assert.rejects(
      r.apply(webCache(() => E1, [E1], { forwarding: 'gre' })),
      (e: unknown) => e instanceof DataplaneError && e.reason === 'unsupported-service' && /L2 only/.test(e.message),
    );
    for (const [engine, why] of [
      ['198.51.100.80', /reached via the router 192\.0\.2\.130, not directly/],
      ['192.0.2.1', /not on a network this gateway reaches/],
    ] as const) {
      await assert.rejects(
        r.apply(webCache(() => engine, [E1, engine])),
        (e: unknown) => e instanceof DataplaneError && e.reason === 'engine-not-attached' && why.test(e.message),
      );
    }
    assert.equal(objects(), table);
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
  });

  test('a service whose protocol changes (TCP to UDP and back) is made anew, one transaction each', async () => {
    // Moved buckets first, so every TCP-only map and chain is named by another when the service stops being TCP.
    await applyMoved(webCache(() => E1, [E1, E2]));
    await r.apply(
      webCache(() => E1, [E1, E2], { protocol: 17, table: { changeNumber: 2, buckets: Array(256).fill(E1) } }),
    );
    const chains = topo.inGw('nft list chains netdev');
    for (const gone of ['close_0', 'closing_0', 'hashed_0', 'moved_0', 'lost_0'])
      assert.doesNotMatch(chains, new RegExp(`chain ${gone} `));
    assert.doesNotMatch(topo.inGw('nft list maps netdev'), /newclaim_0|oldclaim_0|newsteer_0/);
    await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 3, buckets: Array(256).fill(E2) } }));
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine2');
  });

  test('stop() removes the table: traffic goes direct; start() again redirects', async () => {
    await r.apply(webCache(() => E2, [E2]));
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine2');
    await r.stop();
    assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd/);
    assert.equal((await topo.probe('198.51.100.80')).data, 'origin');
    // A crashed run's table is removed by the next start().
    const session = createNftSession({ netns: topo.gw });
    const crashed = new IngressRedirector({ netns: topo.gw, session });
    await crashed.start();
    await crashed.apply(webCache(() => E1, [E1]));
    await session.stop(); // it ends without its stop()
    r = new IngressRedirector({ netns: topo.gw });
    await r.start();
    assert.equal((topo.inGw('nft list tables').match(/wccpd/g) ?? []).length, 1);
    assert.equal((await topo.probe('198.51.100.80')).data, 'origin');
    await r.apply(webCache(() => E1, [E1]));
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
  });
});
