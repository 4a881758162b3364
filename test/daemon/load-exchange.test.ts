// src/daemon/load-peers.ts without sockets: two gateways' clusters (mode consistent, the same engines), each with its
// LoadExchange, reading each other's published window through a fetch that answers from the other's view(): both
// decide on the sum of their loads and make the same moves; a peer that publishes nothing means no decision.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, DEFAULT_LOAD_AWARE } from '../../src/cluster/index.js';
import type { ClusterEvent, TableEvent } from '../../src/cluster/index.js';
import { LoadExchange, loadEpochOf, loadMemoryOf } from '../../src/daemon/load-peers.js';
import type { ServiceConfig } from '../../src/config/index.js';
import { recordingLog } from '../../src/log.js';
import { echoingEngines, fakeClock, serviceConfig } from '../cluster/helpers.js';

const E = ['192.0.2.11', '192.0.2.12', '192.0.2.13', '192.0.2.14'];
const WINDOW = 20_000;
const END0 = 90_000 * WINDOW;
const settings = { ...DEFAULT_LOAD_AWARE, enabled: true, windowMs: WINDOW, minConnections: 100 };

function side(router: string, loadAware = settings) {
  const clock = fakeClock();
  const cluster = new Cluster({
    clock,
    routerAddress: router,
    hereIAmMs: 10_000,
    services: [serviceConfig({ lenientReceiveId: 0, mode: 'consistent', loadAware })],
  });
  const say = echoingEngines(cluster);
  for (const e of E) {
    say(e);
    say(e);
  }
  const events: ClusterEvent[] = [];
  cluster.onEvent((e) => events.push(e));
  return { cluster, clock, events, log: recordingLog() };
}

type Side = ReturnType<typeof side>;
const loadMoves = (s: Side) => s.events.filter((e): e is TableEvent => e.type === 'table' && e.load !== undefined);
const tableOf = (s: Side) => s.cluster.service(0)!.buckets;

/**
 * Gateways A (192.0.2.1) and B (192.0.2.2), each reading the other's published windows through a fetch that answers
 * from the other's view(): `up.b` false, B answers nothing; `hidden` holds the gateways whose digest the other reads
 * as not yet published. `window(k)` reads both gateways' counters at window k's end and decides it on both (on A
 * alone while B is down).
 */
function pair(loadAware = settings) {
  const a = side('192.0.2.1', loadAware);
  let b = side('192.0.2.2', loadAware);
  const service = { id: 0, mode: 'consistent', loadAware } as unknown as ServiceConfig;
  const zero = () => Array.from({ length: 256 }, () => ({ packets: 0, bytes: 0 }));
  const counts = { a: zero(), b: zero() };
  const up = { a: true, b: true };
  const hidden = new Set<string>();
  /** The wall clock the gateways' loads so far are read at (GET /api/v1/services/0/load without an epoch). */
  const at = { wall: 0 };
  const soFar = (s: Side, counts: ReturnType<typeof zero>) => {
    const now = s.cluster.loadSoFar(0, at.wall, counts);
    return now === null
      ? null
      : {
          service: 0,
          epoch: now.windowEnd / now.windowMs,
          windowEnd: now.windowEnd,
          load: now.load?.load ?? null,
          connections: now.load?.connections ?? 0,
          digest: null,
        };
  };
  const exchanges = new Map<string, LoadExchange>();
  const make = (s: Side, peer: string) =>
    new LoadExchange({
      cluster: s.cluster,
      clock: { now: () => Date.now() },
      peers: () => [{ address: peer, api: `http://${peer}` }],
      services: () => [service],
      log: s.log,
      fetch: (async (url: string) => {
        const u = new URL(url);
        const epoch = u.searchParams.get('epoch');
        const down = u.host === '192.0.2.2' ? !up.b : !up.a;
        const v = down
          ? null
          : epoch === null
            ? soFar(u.host === '192.0.2.1' ? a : b, u.host === '192.0.2.1' ? counts.a : counts.b)
            : exchanges.get(u.host)!.view(0, Number(epoch));
        const answer = v !== null && hidden.has(u.host) ? { ...v, digest: null } : v;
        return new Response(JSON.stringify(answer ?? { error: 'not-found' }), { status: v === null ? 404 : 200 });
      }) as typeof fetch,
    });
  exchanges.set('192.0.2.1', make(a, '192.0.2.2'));
  exchanges.set('192.0.2.2', make(b, '192.0.2.1'));
  const xa = exchanges.get('192.0.2.1')!;
  let xb = exchanges.get('192.0.2.2')!;
  const end0 = Math.ceil(END0 / loadAware.windowMs) * loadAware.windowMs;
  const window = async (k: number) => {
    const end = end0 + k * loadAware.windowMs;
    const wa = a.cluster.loadAware(0)!.loadRead(end, counts.a);
    const wb = b.cluster.loadAware(0)!.loadRead(end, counts.b);
    await Promise.all([xa.decide(service, end, wa), ...(up.b ? [xb.decide(service, end, wb)] : [])]);
  };
  /** A sees traffic skewed onto three buckets of the first engine, B even traffic: only the sum is skewed enough. */
  const skew = (hotLoad: number) => {
    const hot = tableOf(a)
      .flatMap((e, i) => (e === E[0] ? [i] : []))
      .slice(0, 3);
    counts.a.forEach((c, i) => (c.packets += 5 + (hot.includes(i) ? hotLoad : 0)));
    counts.b.forEach((c) => (c.packets += 5));
  };
  /** B restarts without its state file: a new cluster (the same engines), counters and exchange. */
  const restartB = () => {
    b = side('192.0.2.2', loadAware);
    counts.b = zero();
    xb = make(b, '192.0.2.1');
    exchanges.set('192.0.2.2', xb);
    return b;
  };
  return { a, b, xa, xb, service, up, hidden, at, counts, end0, window, skew, restartB };
}

test('two gateways decide on the sum of their loads and make the same moves; without the peer, none', async () => {
  const { a, b, xa, service, up, window, skew } = pair();
  assert.ok(xa.shared(service));
  const table = tableOf(a);
  assert.deepEqual(tableOf(b), table);
  await window(0);
  skew(60);
  await window(1);
  assert.equal(loadMoves(a).length, 1, JSON.stringify(a.log.lines.slice(-3)));
  assert.equal(loadMoves(b).length, 1);
  assert.equal(loadMoves(a)[0]!.reason, loadMoves(b)[0]!.reason);
  assert.deepEqual(tableOf(b), tableOf(a));
  assert.notDeepEqual(tableOf(a), table);
  assert.deepEqual(a.cluster.memory()[0]!.load, b.cluster.memory()[0]!.load, 'the same holds, budget and pins');

  // B gone: A reads no load for the window and decides nothing, however skewed its own traffic.
  up.b = false;
  skew(600);
  await window(2);
  assert.equal(loadMoves(a).length, 1);
  assert.ok(a.log.lines.some((l) => /no load from peer 192\.0\.2\.2/.test(l.msg ?? '')));
});

test("plan rebalance on a gateway with peers decides on the sum of every gateway's load so far, as the window's end", async () => {
  const { b, xb, up, at, counts, end0, window, skew } = pair();
  await window(0);
  skew(60);
  at.wall = end0 + WINDOW / 2;
  const plan = async () => {
    const r = b.cluster.planRebalance(0, at.wall, counts.b, await xb.peersSoFar(0, at.wall));
    assert.ok(r.ok);
    return r.plan;
  };
  // B's own traffic is even: alone it would move nothing. Summed with A's skewed load, it moves what the end moves.
  const alone = b.cluster.planRebalance(0, at.wall, counts.b);
  assert.ok(alone.ok);
  assert.equal(alone.plan.moves.length, 0);
  const planned = await plan();
  assert.ok(planned.moves.length > 0, planned.notes.join('; '));
  assert.ok(planned.notes.some((n) => /this gateway and peer 192\.0\.2\.1 summed/.test(n)));
  assert.equal(planned.load?.windowEnd, end0 + WINDOW);
  await window(1);
  assert.equal(loadMoves(b).length, 1);
  assert.deepEqual(tableOf(b), planned.after.buckets, 'the window end made exactly the planned table');

  // A peer not read (down, or in another window): the end would decide nothing, and the plan says so.
  at.wall = end0 + WINDOW + WINDOW / 2;
  up.a = false;
  const unread = await plan();
  assert.equal(unread.moves.length, 0);
  assert.ok(
    unread.notes.some((n) => /no load so far from peer 192\.0\.2\.1/.test(n)),
    unread.notes.join('; '),
  );
  up.a = true;
  const other = await xb.peersSoFar(0, at.wall + WINDOW);
  assert.deepEqual(other?.unread, ['192.0.2.1'], "an answer for another window is not A's load");
});

test("a gateway restarted without its state file takes its peer's holds and pins, and the pair moves together again", async () => {
  const { a, xa, window, skew, restartB } = pair();
  await window(0);
  skew(60);
  await window(1);
  assert.equal(loadMoves(a).length, 1);
  const moved = tableOf(a);
  const kept = a.cluster.memory()[0]!.load!;
  assert.ok(kept.pins.length > 0 && kept.holds.length > 0);

  const b = restartB();
  assert.notDeepEqual(tableOf(b), moved, 'B without its state file: the table without the moves');
  await window(2);
  // A's window 2 carries what it kept when the window ended; B, keeping nothing, takes it before deciding.
  assert.deepEqual(xa.view(0, END0 / WINDOW + 2)?.memory, kept);
  assert.deepEqual(tableOf(b), moved, "B took A's pins: the same table");
  assert.deepEqual(b.cluster.memory()[0]!.load!.pins, kept.pins);
  assert.deepEqual(b.cluster.memory()[0]!.load!.holds, kept.holds);
  assert.ok(b.log.lines.some((l) => /taking them, to decide as it does/.test(l.msg ?? '')));
  assert.ok(
    b.events.some((e) => e.type === 'table' && e.reason === 'load-aware: holds and pins taken from peer 192.0.2.1'),
  );
  // The next skewed window: the same inputs on both, the same digest, the same moves.
  skew(60);
  await window(3);
  assert.equal(loadMoves(a).length, 2, JSON.stringify(a.log.lines.slice(-2)));
  assert.equal(loadMoves(b).length, 1);
  assert.equal(loadMoves(b)[0]!.reason, loadMoves(a)[1]!.reason, 'the same moves, for the same reason');
  assert.deepEqual(tableOf(b), tableOf(a));
  assert.deepEqual(b.cluster.memory()[0]!.load, a.cluster.memory()[0]!.load);
});

test("a peer's memory is read bounded: wrong types, buckets or counts out of range, too many entries", () => {
  const good = { holds: [[3, 1000]], spent: [[1000, 1]], offsets: [['192.0.2.11', -1]], pins: [[3, '192.0.2.12']] };
  assert.deepEqual(loadMemoryOf(good), good);
  for (const bad of [
    null,
    'x',
    { ...good, holds: [[256, 1000]] },
    { ...good, holds: [[3, Infinity]] },
    { ...good, pins: [[3, 7]] },
    { ...good, pins: [[3, 'x'.repeat(65)]] },
    { ...good, offsets: [['192.0.2.11', 1.5]] },
    { ...good, spent: Array.from({ length: 721 }, (_, i) => [i, 1]) },
    { ...good, pins: Array.from({ length: 257 }, () => [3, '192.0.2.12']) },
    { ...good, holds: [[3]] },
    { holds: [], spent: [], offsets: [] },
  ])
    assert.equal(loadMemoryOf(bad), undefined, JSON.stringify(bad).slice(0, 80));
  const view = { service: 0, epoch: 1, windowEnd: WINDOW, load: null, connections: 0, digest: null };
  assert.equal(
    loadEpochOf({ ...view, memory: { ...good, holds: [[-1, 0]] } }, 0, WINDOW),
    null,
    'a bad memory: no view',
  );
  assert.deepEqual(loadEpochOf({ ...view, memory: good }, 0, WINDOW)?.memory, good);
});

/** A 2 s window: each wait (the peers' loads, then their digests) lasts 500 ms. */
const SHORT = { ...settings, windowMs: 2000 };

const until = async (what: string, ok: () => boolean, withinMs: number) => {
  for (const stop = Date.now() + withinMs; !ok(); await new Promise((r) => setTimeout(r, 50)))
    assert.ok(Date.now() < stop, `${what} within ${withinMs} ms`);
};

test("a gateway whose digest wait ran out before it read its peer's makes the moves when it reads it late", async () => {
  const { a, b, hidden, window, skew } = pair(SHORT);
  await window(0);
  skew(60);
  // The race: A reads B's digest and moves; B's wait runs out before it reads A's (hidden from B meanwhile).
  hidden.add('192.0.2.1');
  await window(1);
  assert.equal(loadMoves(a).length, 1);
  assert.equal(loadMoves(b).length, 0, 'B has not read A in time: no moves yet');
  assert.notDeepEqual(tableOf(b), tableOf(a));
  // A's digest readable: B makes the same moves before the next window, and the pair's tables are the same again.
  hidden.clear();
  await until('B to make the moves late', () => loadMoves(b).length === 1, 1500);
  assert.equal(loadMoves(b)[0]!.reason, loadMoves(a)[0]!.reason);
  assert.deepEqual(tableOf(b), tableOf(a));
  assert.equal(b.cluster.service(0)!.changeNumber, a.cluster.service(0)!.changeNumber);
  assert.deepEqual(b.cluster.memory()[0]!.load, a.cluster.memory()[0]!.load, 'the same holds, budget and pins');
  const said = b.log.lines.map((l) => l.msg ?? '');
  assert.ok(said.some((m) => /no decision from peer 192\.0\.2\.1 in time/.test(m)));
  assert.ok(said.some((m) => /every peer agreed late/.test(m)));
});

test('a late watch ends before the next window, and makes nothing once the table changed meanwhile', async () => {
  // Never read: B watches until the next window is near, then gives up, saying so.
  const never = pair(SHORT);
  await never.window(0);
  never.skew(60);
  never.hidden.add('192.0.2.1');
  const started = Date.now();
  await never.window(1);
  await until(
    'B to give up',
    () => never.b.log.lines.some((l) => /still no decision from peer 192\.0\.2\.1/.test(l.msg ?? '')),
    SHORT.windowMs,
  );
  assert.ok(Date.now() - started < SHORT.windowMs, 'within the window');
  never.hidden.clear();
  await new Promise((r) => setTimeout(r, 600));
  assert.equal(loadMoves(never.b).length, 0);

  // B's table changes before A's digest is read (an engine drained): deciding again differs, nothing is made.
  const changed = pair(SHORT);
  await changed.window(0);
  changed.skew(60);
  changed.hidden.add('192.0.2.1');
  await changed.window(1);
  const moves = (s: Side) => loadMoves(s).length;
  assert.equal(moves(changed.a), 1);
  const drained = tableOf(changed.b);
  assert.ok(changed.b.cluster.drain(0, E[3]!).ok);
  assert.notDeepEqual(tableOf(changed.b), drained);
  changed.hidden.clear();
  await until(
    'B to refuse the late moves',
    () => changed.b.log.lines.some((l) => /the table changed since/.test(l.msg ?? '')),
    1500,
  );
  assert.equal(moves(changed.b), 0);
});

test("a peer's endless answer is cut off at 64 KiB and counts as no load: nothing decided, nothing buffered", async () => {
  const a = side('192.0.2.1');
  const service = { id: 0, mode: 'consistent', loadAware: settings } as unknown as ServiceConfig;
  let pulled = 0;
  const chunk = new TextEncoder().encode(`[${'1,'.repeat(8191)}1`); // 16 KiB of one JSON array that never closes
  const x = new LoadExchange({
    cluster: a.cluster,
    clock: { now: () => Date.now() },
    peers: () => [{ address: '192.0.2.2', api: 'http://192.0.2.2' }],
    services: () => [service],
    log: a.log,
    fetch: (async () =>
      new Response(
        new ReadableStream({
          pull(controller) {
            // Bounded: a reader that never stops would stop here (64 MiB).
            if (pulled >= 64 * 1024 * 1024) return controller.close();
            pulled += chunk.byteLength;
            controller.enqueue(chunk);
          },
        }),
        { status: 200 },
      )) as typeof fetch,
  });
  const end = END0 + WINDOW;
  const w = a.cluster.loadAware(0)!.loadRead(
    end,
    Array.from({ length: 256 }, () => ({ packets: 50, bytes: 0 })),
  );
  await x.decide(service, end, w);
  assert.ok(a.log.lines.some((l) => /no load from peer 192\.0\.2\.2/.test(l.msg ?? '')));
  // Each poll reads at most the cap and a chunk; the polls of one step (at most 1 s of the window / 4) are few.
  assert.ok(pulled < 64 * 1024 * 1024, `pulled ${pulled} bytes`);
});
