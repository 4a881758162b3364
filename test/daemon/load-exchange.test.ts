// src/daemon/load-peers.ts without sockets: two gateways' clusters (mode consistent, the same engines), each with its
// LoadExchange, reading each other's published window through a fetch that answers from the other's view(): both
// decide on the sum of their loads and make the same moves; a peer that publishes nothing means no decision.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, DEFAULT_LOAD_AWARE } from '../../src/cluster/index.js';
import type { ClusterEvent, TableEvent } from '../../src/cluster/index.js';
import { LoadExchange } from '../../src/daemon/load-peers.js';
import type { ServiceConfig } from '../../src/config/index.js';
import { recordingLog } from '../../src/log.js';
import { echoingEngines, fakeClock, serviceConfig } from '../cluster/helpers.js';

const E = ['192.0.2.11', '192.0.2.12', '192.0.2.13', '192.0.2.14'];
const WINDOW = 20_000;
const END0 = 90_000 * WINDOW;
const settings = { ...DEFAULT_LOAD_AWARE, enabled: true, windowMs: WINDOW, minConnections: 100 };

function side(router: string) {
  const clock = fakeClock();
  const cluster = new Cluster({
    clock,
    routerAddress: router,
    hereIAmMs: 10_000,
    services: [serviceConfig({ lenientReceiveId: 0, mode: 'consistent', loadAware: settings })],
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

test('two gateways decide on the sum of their loads and make the same moves; without the peer, none', async () => {
  const a = side('192.0.2.1');
  const b = side('192.0.2.2');
  const service = { id: 0, mode: 'consistent', loadAware: settings } as unknown as ServiceConfig;
  const peersUp = { b: true };
  const exchanges = new Map<string, LoadExchange>();
  const make = (s: typeof a, peer: string) =>
    new LoadExchange({
      cluster: s.cluster,
      clock: { now: () => Date.now() },
      peers: () => [{ address: peer, api: `http://${peer}` }],
      services: () => [service],
      log: s.log,
      fetch: (async (url: string) => {
        const u = new URL(url);
        const v =
          u.host === '192.0.2.2' && !peersUp.b
            ? null
            : exchanges.get(u.host)!.view(0, Number(u.searchParams.get('epoch')));
        return new Response(JSON.stringify(v ?? { error: 'not-found' }), { status: v === null ? 404 : 200 });
      }) as typeof fetch,
    });
  exchanges.set('192.0.2.1', make(a, '192.0.2.2'));
  exchanges.set('192.0.2.2', make(b, '192.0.2.1'));
  const xa = exchanges.get('192.0.2.1')!;
  const xb = exchanges.get('192.0.2.2')!;
  assert.ok(xa.shared(service));
  const table = a.cluster.service(0)!.buckets;
  assert.deepEqual(b.cluster.service(0)!.buckets, table);
  const zero = () => Array.from({ length: 256 }, () => ({ packets: 0, bytes: 0 }));
  const ca = zero();
  const cb = zero();
  const window = async (k: number) => {
    const end = END0 + k * WINDOW;
    const wa = a.cluster.loadAware(0)!.loadRead(end, ca);
    const wb = b.cluster.loadAware(0)!.loadRead(end, cb);
    await Promise.all([xa.decide(service, end, wa), ...(peersUp.b ? [xb.decide(service, end, wb)] : [])]);
  };
  await window(0);
  // A sees traffic skewed onto three buckets of the first engine, B even traffic: only the sum is skewed enough.
  const hot = table.flatMap((e, i) => (e === E[0] ? [i] : [])).slice(0, 3);
  ca.forEach((c, i) => (c.packets += 5 + (hot.includes(i) ? 60 : 0)));
  cb.forEach((c) => (c.packets += 5));
  await window(1);
  const moves = (s: typeof a) => s.events.filter((e): e is TableEvent => e.type === 'table' && e.load !== undefined);
  assert.equal(moves(a).length, 1, JSON.stringify(a.log.lines.slice(-3)));
  assert.equal(moves(b).length, 1);
  assert.equal(moves(a)[0]!.reason, moves(b)[0]!.reason);
  assert.deepEqual(b.cluster.service(0)!.buckets, a.cluster.service(0)!.buckets);
  assert.notDeepEqual(a.cluster.service(0)!.buckets, table);
  assert.deepEqual(a.cluster.memory()[0]!.load, b.cluster.memory()[0]!.load, 'the same holds, budget and pins');

  // B gone: A reads no load for the window and decides nothing, however skewed its own traffic.
  peersUp.b = false;
  ca.forEach((c, i) => (c.packets += 5 + (hot.includes(i) ? 600 : 0)));
  await window(2);
  assert.equal(moves(a).length, 1);
  assert.ok(a.log.lines.some((l) => /no load from peer 192\.0\.2\.2/.test(l.msg ?? '')));
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
