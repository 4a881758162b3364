// Two gateways with `mode: consistent` and `peers` move buckets by load together (decision 0004, point 7): two real
// wccpd (in process, each with the memory data plane fed new connections by the test) on routers 127.0.0.1 and
// 127.0.0.2, the same four engines registered with both. Each gateway sees a different part of the traffic (one skewed
// onto one engine's buckets, the other even); each publishes its window's per-bucket load, decides on the sum and
// makes the moves only when the other published the same decision: both publish the same table after the moves, with
// the same event, and the one fed even traffic planned them (`plan rebalance` sums the peer's load so far). Then, the
// peer gone, a window decides nothing (its load is not read). And the race a digest wait can lose: B reads A's digest
// only after its wait ran out (a proxy hides it meanwhile), while A read B's in time and moved: B moves late.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { explain } from '../../src/dataplane/explain.js';
import { recordingLog } from '../../src/log.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import { DESTINATIONS, pastNextWindowEnd, WINDOW } from './load-windows.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { freeTcpPort, freeUdpPort, TOKEN, waitFor } from '../helpers/daemon.js';
import type { BucketsView, EventView, LoadEpochView, PlanView } from '../../src/admin/api-types.js';

const ENGINES = ['127.0.0.61', '127.0.0.62', '127.0.0.63', '127.0.0.64'];

interface Gateway {
  readonly router: string;
  readonly udpPort: number;
  readonly httpPort: number;
  readonly url: string;
  readonly redirector: MemoryRedirector;
  readonly log: ReturnType<typeof recordingLog>;
  daemon: Daemon;
  readonly engines: TestEngine[];
}

async function gateway(dir: string, router: string, peer: { address: string; api: string }, httpPort: number) {
  const udpPort = await freeUdpPort();
  const path = join(dir, `${router}.yaml`);
  writeFileSync(
    path,
    [
      'router:',
      `  address: ${router}`,
      `  port: ${udpPort}`,
      'admin:',
      `  listen: 127.0.0.1:${httpPort}`,
      `  token: ${TOKEN}`,
      `stateDir: ${join(dir, `state-${router}`)}`,
      'dataplane:',
      '  backend: none',
      'timers:',
      '  settle: 0ms',
      'health:',
      '  http:',
      '    enabled: false',
      'services:',
      '  - id: 0',
      '    mode: consistent',
      '    loadAware:',
      '      window: 5s',
      '      minConnections: 500',
      '    engines:',
      '      allow: [127.0.0.0/24]',
      '      lenientReceiveId: 0',
      'peers:',
      `  - { address: ${peer.address}, api: "${peer.api}" }`,
      '',
    ].join('\n'),
  );
  const redirector = new MemoryRedirector();
  const log = recordingLog();
  const daemon = new Daemon({
    config: await loadConfig(path),
    log,
    redirector,
    checkBridgeNetfilter: async () => ({ loaded: false, callIptables: false, bridges: [], active: false }),
  });
  const engines = ENGINES.map((address) => new TestEngine({ address, router: { address: router, port: udpPort } }));
  const g: Gateway = {
    router,
    udpPort,
    httpPort,
    url: `http://127.0.0.1:${httpPort}`,
    redirector,
    log,
    daemon,
    engines,
  };
  return g;
}

const get = async <T>(g: Gateway, path: string): Promise<T> => (await (await fetch(`${g.url}${path}`)).json()) as T;
const table = (g: Gateway) => get<BucketsView>(g, '/api/v1/services/0/buckets');
const loadEvents = async (g: Gateway) =>
  (await get<{ events: EventView[] }>(g, '/api/v1/events')).events.filter(
    (e) => e.type === 'table' && String(e.reason).startsWith('load: '),
  );

/**
 * Gateways A (127.0.0.1) and B (127.0.0.2) serving the four engines with the same table, each reading the other's API
 * (B reads A through `bReadsA`, given A's port, where the test puts something between them); `run` gets them and the
 * table before, then everything is stopped and removed.
 */
async function withPair(
  run: (a: Gateway, b: Gateway, before: BucketsView) => Promise<void>,
  bReadsA: (portA: number) => string = (portA) => `http://127.0.0.1:${portA}`,
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-load-peers-${process.pid}-`));
  const [portA, portB] = [await freeTcpPort(), await freeTcpPort()];
  const a = await gateway(dir, '127.0.0.1', { address: '127.0.0.2', api: `http://127.0.0.1:${portB}` }, portA);
  const b = await gateway(dir, '127.0.0.2', { address: '127.0.0.1', api: bReadsA(portA) }, portB);
  let keepAlive: ReturnType<typeof setInterval> | undefined;
  try {
    for (const g of [a, b]) {
      await g.daemon.start();
      for (const e of g.engines) await e.start();
    }
    for (let round = 0; round < 2; round++) for (const e of [...a.engines, ...b.engines]) await e.hereIAm();
    keepAlive = setInterval(() => {
      for (const e of [...a.engines, ...b.engines]) void e.hereIAm().catch(() => undefined);
    }, 2000);
    const before = await waitFor('both gateways to serve the four engines, the same table', async () => {
      const [ta, tb] = await Promise.all([table(a), table(b)]);
      const full = (t: BucketsView) =>
        ENGINES.every((x) => t.buckets.includes(x)) && t.inForce?.changeNumber === t.changeNumber;
      return full(ta) && full(tb) && JSON.stringify(ta.buckets) === JSON.stringify(tb.buckets) ? ta : null;
    });
    await run(a, b, before);
  } finally {
    if (keepAlive !== undefined) clearInterval(keepAlive);
    for (const e of [...a.engines, ...b.engines]) await e.stop().catch(() => undefined);
    await a.daemon.stop();
    await b.daemon.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Just past a window's end (the first reads each gateway's baseline): A sees traffic skewed onto three of the first
 * engine's buckets, B even traffic, for the window now running. Returns the hot destinations.
 */
async function skewedWindow(a: Gateway, b: Gateway): Promise<string[]> {
  await pastNextWindowEnd(400);
  const service = a.redirector.service(0)!;
  const hot = DESTINATIONS.filter((d) => explain(service, d).engine === ENGINES[0]).slice(0, 3);
  for (const d of DESTINATIONS) for (let i = 0; i < 2; i++) a.redirector.classify(0, d);
  for (const d of DESTINATIONS) for (let i = 0; i < 2; i++) b.redirector.classify(0, d);
  for (const d of hot) for (let i = 0; i < 150; i++) a.redirector.classify(0, d);
  return hot;
}

test('two gateways decide load moves on the sum of their loads and publish the same table', () =>
  withPair(async (a, b, before) => {
    const hot = await skewedWindow(a, b);
    // B's own traffic is even; its plan sums A's load so far with its own, as the window's end will.
    const planB = await get<PlanView>(b, '/api/v1/plan?change=rebalance&service=0');
    const plannedB = planB.services[0]!;
    assert.ok(plannedB.moves.length > 0, plannedB.notes.join('; '));
    assert.ok(plannedB.notes.some((n) => /this gateway and peer 127\.0\.0\.1 summed/.test(n)));

    const [movedA, movedB] = await waitFor(
      'both gateways to make the load moves',
      async () => {
        const [ea, eb] = await Promise.all([loadEvents(a), loadEvents(b)]);
        return ea.length > 0 && eb.length > 0 ? [ea, eb] : null;
      },
      15_000,
    );
    assert.equal(movedA.length, 1);
    assert.equal(movedB.length, 1);
    assert.equal(movedA[0]!.reason, movedB[0]!.reason, 'the same moves, for the same reason');
    assert.match(String(movedA[0]!.reason), /^load: 127\.0\.0\.61 at \d\.\d\dx its share/);
    const [ta, tb] = await Promise.all([table(a), table(b)]);
    assert.deepEqual(tb.buckets, ta.buckets, 'the two gateways publish the same table after the moves');
    assert.deepEqual(tb.buckets, plannedB.after, "B's plan was the table the window's end made");
    assert.notDeepEqual(ta.buckets, before.buckets);
    assert.equal(ta.changeNumber, tb.changeNumber);

    // What each published for that window: its own load (A's skewed, B's even) and the same digest.
    const end = Number(movedA[0]!.load && (movedA[0]!.load as { windowEnd: number }).windowEnd);
    const epoch = end / WINDOW;
    const [pa, pb] = await Promise.all([
      get<LoadEpochView>(a, `/api/v1/services/0/load?epoch=${epoch}`),
      get<LoadEpochView>(b, `/api/v1/services/0/load?epoch=${epoch}`),
    ]);
    assert.equal(pa.windowEnd, end);
    assert.ok(pa.digest !== null && pa.digest === pb.digest);
    assert.equal(pa.connections, 2 * DESTINATIONS.length + 450);
    assert.equal(pb.connections, 2 * DESTINATIONS.length);
    const r = await fetch(`${a.url}/api/v1/services/0/load?epoch=1`);
    assert.equal(r.status, 404);

    // B stops: A cannot read B's load for the next window and decides nothing, saying why.
    for (const e of b.engines) await e.stop();
    await b.daemon.stop();
    for (const d of hot) for (let i = 0; i < 600; i++) a.redirector.classify(0, d);
    await pastNextWindowEnd(2500);
    await waitFor('A to say it read no load from B', async () =>
      a.log.lines.some((l) => /no load from peer 127\.0\.0\.2/.test(JSON.stringify(l))) ? true : null,
    );
    assert.equal((await loadEvents(a)).length, 1, 'no more moves without the peer');
  }));

test("a gateway that reads its peer's digest only after its wait ran out makes the moves then: the same table", async () => {
  // B reads A through a proxy that, while `hide` is set, answers A's published windows without their digest.
  let hide = false;
  let portA = 0;
  const proxy = createServer((req, res) => {
    void (async () => {
      try {
        const r = await fetch(`http://127.0.0.1:${portA}${req.url ?? '/'}`, { signal: AbortSignal.timeout(1000) });
        let body = await r.text();
        if (hide && r.ok && (req.url ?? '').includes('/load?epoch='))
          body = JSON.stringify({ ...JSON.parse(body), digest: null });
        res.writeHead(r.status, { 'content-type': 'application/json' }).end(body);
      } catch {
        res.writeHead(502).end();
      }
    })();
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const proxyPort = (proxy.address() as AddressInfo).port;
  try {
    await withPair(
      async (a, b) => {
        await skewedWindow(a, b);
        hide = true;
        // The race: A reads B's digest and moves; B's wait runs out before it reads A's.
        await waitFor(
          "B's digest wait to run out",
          async () =>
            b.log.lines.some((l) => /no decision from peer 127\.0\.0\.1 in time/.test(l.msg ?? '')) ? true : null,
          15_000,
        );
        const movedA = await loadEvents(a);
        assert.equal(movedA.length, 1, 'A read B in time and moved');
        assert.equal((await loadEvents(b)).length, 0, 'B has not moved yet');
        hide = false;
        const movedB = await waitFor('B to make the moves late', async () => {
          const e = await loadEvents(b);
          return e.length > 0 ? e : null;
        });
        assert.equal(movedB[0]!.reason, movedA[0]!.reason);
        const [ta, tb] = await Promise.all([table(a), table(b)]);
        assert.deepEqual(tb.buckets, ta.buckets, 'the pair publishes the same table again');
        assert.ok(b.log.lines.some((l) => /every peer agreed late/.test(l.msg ?? '')));
      },
      (port) => {
        portA = port;
        return `http://127.0.0.1:${proxyPort}`;
      },
    );
  } finally {
    proxy.closeAllConnections();
    await new Promise((r) => proxy.close(r));
  }
});
