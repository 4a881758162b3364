/// <reference lib="dom" />
// The live web page in real headless Chromium (Debian's chromium driven by playwright-core): 256 cells whose colours
// match the API's table, and a drain through the API changes the grid without a reload. Saves a screenshot. Then, with
// the nft data plane in a namespace lab and real client connections: the chart's per-engine series count exactly the
// connections the API counted per bucket, the cells' shades follow those counters, and a drain shows without a reload.
// Buckets in a move (ingress) are marked in the grid, with the engine before and the end in their tooltips. A
// hot-inserted engine is shown warming (peer hits, time left, its gained buckets striped, an event), then warm.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startDaemonWithEngines, TOKEN, type DaemonWithEngines, type RunningDaemon } from '../helpers/daemon.js';
import { haveCommand, isRoot, need } from '../helpers/require.js';
import { ENGINE_COLOURS, shadeOpacity, UNASSIGNED_COLOUR } from '../../src/admin/page.js';
import { createLab, originAddressForBucket, type Lab } from '../lab/lab.js';
import { relayToHost, type HostRelay } from '../lab/host-relay.js';
import {
  shares,
  startDaemon as startLabDaemon,
  startTestEngine,
  TOKEN as LAB_TOKEN,
  waitUntil,
  writeConfig,
} from '../e2e/harness.js';
import type { BucketsView, EnginesView } from '../../src/admin/api-types.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { recordingLog } from '../../src/log.js';
import { FlakyRedirector } from '../helpers/flaky-redirector.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import type { MovedBucket } from '../../src/dataplane/index.js';
import { keepTalking, TestEngine } from '../helpers/wccp-engine.js';
import { freeTcpPort, freeUdpPort, startDaemon, waitFor, writeLoopbackConfig } from '../helpers/daemon.js';
import { icpQuery, Sibling } from '../warmup/sibling.js';
import { bucketOf } from '../lab/addresses.js';

const CHROMIUM = '/usr/bin/chromium';
const skip = need(existsSync(CHROMIUM), `Debian's chromium at ${CHROMIUM} (apt-get install chromium)`);
const skipLab =
  skip ||
  need(
    isRoot && haveCommand('nft') && haveCommand('curl'),
    'root with nft and curl (the page over the nft data plane in a lab)',
  );
const ENGINES = ['127.0.0.21', '127.0.0.22', '127.0.0.23'];
let running: DaemonWithEngines | undefined;
let daemon: RunningDaemon;
let browser: Browser;

function rgb(hex: string): string {
  const n = parseInt(hex.slice(1), 16);
  return `rgb(${n >> 16}, ${(n >> 8) & 255}, ${n & 255})`;
}

async function api<T>(path: string): Promise<T> {
  return (await (await fetch(`${daemon.url}/api/v1/${path}`)).json()) as T;
}

/** What the page shows: per cell, its engine attribute and computed background colour. */
async function cells(page: import('playwright-core').Page): Promise<{ engine: string; colour: string }[]> {
  return page.$$eval('#grid .cell', (els) =>
    els.map((el) => ({
      engine: (el as HTMLElement).dataset.engine ?? '',
      colour: getComputedStyle(el).backgroundColor,
    })),
  );
}

before(async () => {
  if (skip && skipLab) return;
  if (!skip) {
    running = await startDaemonWithEngines(ENGINES);
    daemon = running.daemon;
  }
  // playwright gives Chromium a new empty profile of its own. The flags keep Chromium off the network: this machine has
  // none, and background fetches would only fail.
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await running?.stop();
});

const launchBrowser = () =>
  chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });

test(
  'the page shows 256 cells coloured as the API assigns them, and follows a drain without a reload',
  { skip },
  async (t) => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    const requests: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    await page.goto(daemon.url + '/');
    await page.waitForFunction(() => document.body.dataset.changeNumber !== undefined);

    const table = await api<BucketsView>('services/0/buckets');
    const list = await api<EnginesView>('services/0/engines');
    const colourOf = (ip: string | null) => {
      const i = ip === null ? -1 : list.engines.findIndex((e) => e.address === ip);
      return rgb(i < 0 ? UNASSIGNED_COLOUR : ENGINE_COLOURS[i % ENGINE_COLOURS.length]!);
    };
    let shown = await cells(page);
    assert.equal(shown.length, 256);
    shown.forEach((c, i) => {
      assert.equal(c.engine, table.buckets[i] ?? '', `bucket ${i} engine`);
      assert.equal(c.colour, colourOf(table.buckets[i] ?? null), `bucket ${i} colour`);
    });
    assert.equal(new Set(shown.map((c) => c.colour)).size, 3, 'three engines, three colours');
    const rows = await page.$$eval('#engines tr', (trs) => trs.map((tr) => (tr as HTMLElement).dataset.engine));
    assert.deepEqual(rows, ENGINES);
    assert.match((await page.textContent('#mode')) ?? '', /balance/);

    // Mark the document: a reload would lose the mark.
    await page.evaluate(() => {
      (window as unknown as { notReloaded: boolean }).notReloaded = true;
    });
    const drain = await fetch(`${daemon.url}/api/v1/services/0/engines/127.0.0.22/drain`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(drain.status, 200);
    const drainedAt = Date.now();
    const after = await api<BucketsView>('services/0/buckets');
    await page.waitForFunction((n) => document.body.dataset.changeNumber === String(n), after.changeNumber, {
      timeout: 5000,
    });
    const shownAfterMs = Date.now() - drainedAt;
    t.diagnostic(`the page showed the drain ${shownAfterMs} ms after the API answered`);
    // No timing assertion (the machine may be loaded): the events timeline below is fed only by the event stream
    // once the page is loaded, so seeing the drain there without a reload proves the page was pushed the change.
    assert.equal(
      await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded),
      true,
      'no reload',
    );
    shown = await cells(page);
    shown.forEach((c, i) => {
      assert.equal(c.engine, after.buckets[i] ?? '', `bucket ${i} engine after the drain`);
      assert.equal(c.colour, colourOf(after.buckets[i] ?? null), `bucket ${i} colour after the drain`);
    });
    assert.ok(!shown.some((c) => c.engine === '127.0.0.22'), 'the drained engine holds no cell');
    // dataplane.backend none applies nothing: no change number is ever in force, and the page says so.
    assert.equal(after.inForce, null);
    assert.equal(await page.textContent('#inforce'), 'none');
    assert.match((await page.textContent('#engines tr[data-engine="127.0.0.22"]')) ?? '', /draining/);
    await page.waitForFunction(
      () => /127\.0\.0\.22: usable -> draining/.test(document.getElementById('events')?.textContent ?? ''),
      undefined,
      { timeout: 5000 },
    );
    const hover = await page.getAttribute('#grid .cell[data-bucket="7"]', 'title');
    assert.match(
      hover ?? '',
      new RegExp(`bucket 7 .*\\n?engine ${(after.buckets[7] ?? 'unassigned').replace(/\./g, '\\.')}`, 's'),
    );

    mkdirSync('test/artifacts', { recursive: true });
    await page.screenshot({ path: 'test/artifacts/page.png', fullPage: true });
    assert.deepEqual(errors, [], 'no script errors');
    assert.ok(
      requests.every((u) => u.startsWith(daemon.url)),
      `no request leaves the daemon: ${requests.filter((u) => !u.startsWith(daemon.url)).join(' ')}`,
    );
    await page.close();
  },
);

test(
  'while the data plane has not applied the decided table, the page says it is behind, and catches up without a reload',
  { skip },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), `wccpd-page-behind-${process.pid}-`));
    const config = await writeLoopbackConfig(dir, { lenientReceiveId: 0, settle: '0ms' });
    const url = `http://127.0.0.1:${config.httpPort}`;
    const redirector = new FlakyRedirector();
    redirector.healthy = true;
    const d = new Daemon({ config: await loadConfig(config.path), log: recordingLog(), redirector });
    const addresses = ['127.0.0.81', '127.0.0.82'];
    const engines = new Map(
      addresses.map((a) => [a, new TestEngine({ address: a, router: { address: '127.0.0.1', port: config.udpPort } })]),
    );
    let talking: { stop(): Promise<void> } | undefined;
    const get = async <T>(path: string): Promise<T> => (await (await fetch(`${url}/api/v1/${path}`)).json()) as T;
    const page = await browser.newPage();
    try {
      await d.start();
      for (const e of engines.values()) await e.start();
      talking = keepTalking(engines, new Set(addresses));
      const current = await waitFor('a two-engine table in force', async () => {
        const t = await get<BucketsView>('services/0/buckets');
        return t.buckets.includes(addresses[0]!) &&
          t.buckets.includes(addresses[1]!) &&
          t.inForce?.changeNumber === t.changeNumber
          ? t.changeNumber
          : null;
      });
      await page.goto(url + '/');
      await page.waitForFunction((n) => document.body.dataset.inForce === String(n), current, { timeout: 10_000 });
      assert.equal(await page.textContent('#inforce'), String(current));
      assert.equal(await page.getAttribute('#inforce', 'class'), '');

      // The data plane fails from now on: a drain changes the decided table, the kernel keeps the older one.
      redirector.healthy = false;
      const drain = await fetch(`${url}/api/v1/services/0/engines/${addresses[0]}/drain`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      assert.equal(drain.status, 200);
      const decided = (await get<BucketsView>('services/0/buckets')).changeNumber;
      assert.ok(decided > current);
      await page.waitForFunction((n) => document.body.dataset.changeNumber === String(n), decided, { timeout: 10_000 });
      assert.equal((await get<BucketsView>('services/0/buckets')).inForce?.changeNumber, current);
      assert.equal(await page.textContent('#inforce'), `${current} (behind)`);
      assert.equal(await page.getAttribute('#inforce', 'class'), 'behind');
      assert.equal(await page.$eval('#inforce', (el) => getComputedStyle(el).color), 'rgb(204, 0, 0)', 'shown in red');

      // The data plane recovers: the retried apply puts the decided table in force, and the page follows.
      redirector.healthy = true;
      await page.waitForFunction((n) => document.body.dataset.inForce === String(n), decided, { timeout: 40_000 });
      assert.equal(await page.textContent('#inforce'), String(decided));
      assert.equal(await page.getAttribute('#inforce', 'class'), '');
    } finally {
      await page.close();
      await talking?.stop();
      for (const e of engines.values()) await e.stop();
      await d.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

/** A data plane that reports buckets in a move, as ingress does: bucket 3 from an engine, 4 from one gone since. */
class MovingRedirector extends MemoryRedirector {
  private readonly end = performance.now() + 300_000;
  bucketMoves(): ReadonlyMap<number, readonly MovedBucket[]> {
    const endsInMs = this.end - performance.now();
    return new Map([
      [
        0,
        [
          { bucket: 3, before: 'engine', engineBefore: '127.0.0.91', endsInMs },
          { bucket: 4, before: 'gone', engineBefore: null, endsInMs },
        ],
      ],
    ]);
  }
}

test(
  'buckets in a move are marked in the grid, with the engine before and the end in the tooltip and a note',
  { skip },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), `wccpd-page-moved-${process.pid}-`));
    const config = await writeLoopbackConfig(dir, { lenientReceiveId: 0, settle: '0ms' });
    const url = `http://127.0.0.1:${config.httpPort}`;
    const d = new Daemon({
      config: await loadConfig(config.path),
      log: recordingLog(),
      redirector: new MovingRedirector(),
    });
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    try {
      await d.start();
      const table = (await (await fetch(`${url}/api/v1/services/0/buckets`)).json()) as BucketsView;
      assert.deepEqual(
        table.moved?.map((m) => [m.bucket, m.before, m.engineBefore]),
        [
          [3, 'engine', '127.0.0.91'],
          [4, 'gone', null],
        ],
        'the daemon serves what its data plane reports',
      );
      const until = table.moved?.[0]?.until ?? '';
      assert.match(until, /^\d{4}-\d\d-\d\dT/);
      await page.goto(url + '/');
      await page.waitForFunction(() => document.querySelectorAll('#grid .cell.moved').length === 2, undefined, {
        timeout: 10_000,
      });
      const marked = await page.$$eval('#grid .cell.moved', (els) =>
        els.map((el) => ({
          bucket: (el as HTMLElement).dataset.bucket,
          text: el.textContent,
          before: (el as HTMLElement).dataset.movedBefore,
          outline: getComputedStyle(el).outlineStyle,
          title: el.getAttribute('title') ?? '',
        })),
      );
      assert.deepEqual(
        marked.map(({ bucket, text, before, outline }) => ({ bucket, text, before, outline })),
        [
          { bucket: '3', text: '03*', before: '127.0.0.91', outline: 'dashed' },
          { bucket: '4', text: '04*', before: 'gone', outline: 'dashed' },
        ],
      );
      // The end the API gave (the page read it again a moment later: the same end, to the rounding).
      const shown = /in a move until (\S+): connections older than the move still go to engine 127\.0\.0\.91$/m.exec(
        marked[0]?.title ?? '',
      );
      assert.ok(shown, marked[0]?.title);
      assert.ok(Math.abs(Date.parse(shown[1] ?? '') - Date.parse(until)) <= 1000, `${shown[1]} against ${until}`);
      assert.match(marked[1]?.title ?? '', /still go to an engine that has left \(they are reset\)/);
      assert.equal(
        await page.getAttribute('#grid .cell[data-bucket="5"]', 'class'),
        'cell',
        'an unmoved cell unmarked',
      );
      assert.match((await page.textContent('#moved-note')) ?? '', /^\* dashed: 2 buckets in a move: /);
      assert.ok(await page.isVisible('#moved-note'));
      // The note wraps under the grid: it does not widen the grid's column (and squeeze the chart beside it).
      const noteBox = await page.locator('#moved-note').boundingBox();
      const lastCell = await page.locator('#grid .cell[data-bucket="15"]').boundingBox();
      const cellsWidth = lastCell && noteBox ? lastCell.x + lastCell.width - noteBox.x : 0;
      assert.ok(noteBox && noteBox.width <= cellsWidth + 1, `note ${noteBox?.width} px, the cells ${cellsWidth} px`);
      mkdirSync('test/artifacts', { recursive: true });
      await page.screenshot({ path: 'test/artifacts/page-moved.png', fullPage: true });
      assert.deepEqual(errors, [], 'no script errors');
    } finally {
      await page.close();
      await d.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

test(
  'a hot-inserted engine is shown warming (its peer hits, time left, striped buckets, an event), then warm',
  { skip },
  async () => {
    const [A, B, C] = ['127.0.0.31', '127.0.0.32', '127.0.0.33'];
    const siblings = [new Sibling(A), new Sibling(B)];
    const sourceIcp = await freeUdpPort();
    const sourceHttp = await freeTcpPort();
    const icpPort = await freeUdpPort();
    for (const s of siblings) await s.start(sourceIcp, sourceHttp);
    // A and B start together (B gains nothing from A: minSourceHold), C comes once they held their buckets that long.
    // A short warm-up, so the page shows it end.
    const d = await startDaemon(['warmup: { duration: 12s, peerTimeout: 2s, minSourceHold: 4s }'], {
      top: ['warmup:', '  listen: 127.0.0.1', `  icpPort: ${icpPort}`, `  httpPort: ${await freeTcpPort()}`],
      health: [`icp: { port: ${sourceIcp} }`, `http: { enabled: false, port: ${sourceHttp} }`],
    });
    const engines: TestEngine[] = [];
    const keepAlive = setInterval(() => {
      for (const e of engines) void e.hereIAm().catch(() => undefined);
    }, 3000);
    const get = async <T>(path: string): Promise<T> => (await (await fetch(`${d.url}/api/v1/${path}`)).json()) as T;
    const join = async (address: string): Promise<(string | null)[]> => {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: d.udpPort } });
      await e.start();
      engines.push(e);
      await e.hereIAm();
      await e.hereIAm();
      return waitFor(`${address} holding buckets`, async () => {
        const t = await get<BucketsView>('services/0/buckets');
        return t.buckets.includes(address) ? [...t.buckets] : null;
      });
    };
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    try {
      await join(A);
      const old = await join(B);
      const heldFrom = Date.now();
      await page.goto(d.url + '/');
      await page.waitForFunction(() => document.body.dataset.changeNumber !== undefined);
      assert.deepEqual((await get<BucketsView>('services/0/buckets')).warming, [], 'engines that start together');
      await new Promise((r) => setTimeout(r, heldFrom + 4500 - Date.now()));
      const now = await join(C);
      const gained = now.flatMap((o, i) => (o === C && old[i] !== C ? [i] : []));
      assert.ok(gained.length > 0);
      // C's Squid asks about a miss in a bucket it gained from A: A holds it, so the broker answers HIT.
      const fromA = gained.find((i) => old[i] === A);
      assert.notEqual(fromA, undefined, 'C gained buckets from A');
      const url = `http://${originAddressForBucket(fromA!)}/warm`;
      assert.equal(bucketOf(originAddressForBucket(fromA!)), fromA);
      siblings[0]!.store.set(url, { body: Buffer.from('warm') });
      assert.equal(await icpQuery(C, icpPort, url), 'HIT');

      // The API lists the gained buckets as being warmed, each with its previous owner.
      const table = await get<BucketsView>('services/0/buckets');
      assert.deepEqual(
        table.warming?.map((w) => [w.bucket, w.engine, w.previousOwner]),
        gained.map((i) => [i, C, old[i]]),
      );
      const row = `#engines tr[data-engine="${C}"]`;
      await page.waitForFunction(
        (sel) => /warming: 1\/1 peer hits \(100%\), \d+ s left/.test(document.querySelector(sel)?.textContent ?? ''),
        row,
        { timeout: 10_000 },
      );
      const cell = await page.textContent(`${row} td.warmup`);
      const left = Number(/(\d+) s left$/.exec(cell ?? '')?.[1]);
      assert.ok(left > 0 && left <= 12, `time left: ${cell}`);
      assert.doesNotMatch((await page.textContent(`${row} td:nth-child(6)`)) ?? '', /warm/, 'not twice (flags)');
      assert.equal(await page.getAttribute(row, 'data-warming'), 'true');
      assert.doesNotMatch((await page.textContent(`#engines tr[data-engine="${A}"] td.warmup`)) ?? '', /warm/);
      const striped = await page.$$eval('#grid .cell.warming', (els) =>
        els.map((el) => ({
          bucket: Number((el as HTMLElement).dataset.bucket),
          from: (el as HTMLElement).dataset.warmingFrom,
          image: getComputedStyle(el).backgroundImage,
          title: el.getAttribute('title') ?? '',
        })),
      );
      assert.deepEqual(
        striped.map((c) => [c.bucket, c.from]),
        gained.map((i) => [i, old[i]]),
      );
      assert.ok(
        striped.every((c) => c.image.includes('repeating-linear-gradient')),
        'striped',
      );
      assert.match(striped[0]!.title, /being warmed: the broker asks 127\.0\.0\.3[12] \(its previous owner\)/);
      assert.match(
        (await page.textContent('#warming-note')) ?? '',
        new RegExp(`^striped: ${gained.length} buckets being warmed: ${C.replace(/\./g, '\\.')} gained them`),
      );
      await page.waitForFunction(
        (c) =>
          new RegExp(`engine ${c.replace(/\./g, '\\.')}: warming \\(`).test(
            document.getElementById('events')?.textContent ?? '',
          ),
        C,
        { timeout: 10_000 },
      );
      mkdirSync('test/artifacts', { recursive: true });
      await page.screenshot({ path: 'test/artifacts/page-warming.png', fullPage: true });

      // The duration ends the warm-up: the page says so without a reload, and no bucket is striped any more.
      await page.waitForFunction(
        (sel) =>
          /warmed: 1\/1 peer hits \(100%\), ended by duration/.test(document.querySelector(sel)?.textContent ?? ''),
        row,
        { timeout: 30_000 },
      );
      assert.equal(await page.getAttribute(row, 'data-warming'), 'false');
      await page.waitForFunction(() => document.querySelectorAll('#grid .cell.warming').length === 0, undefined, {
        timeout: 10_000,
      });
      assert.equal(await page.textContent('#warming-note'), '');
      assert.deepEqual((await get<BucketsView>('services/0/buckets')).warming, []);
      assert.match(
        (await page.textContent('#events')) ?? '',
        new RegExp(
          `engine ${C.replace(/\./g, '\\.')}: warm-up ended, 1/1 peer hits \\(warm-up duration 12 s reached\\)`,
        ),
      );
      assert.deepEqual(errors, [], 'no script errors');
    } finally {
      await page.close();
      clearInterval(keepAlive);
      for (const e of engines) await e.stop();
      await d.stop();
      for (const s of siblings) await s.stop();
    }
  },
);

/** What the page shows per cell: its bucket's recent new connections (data-connections) and its opacity. */
async function shading(page: Page): Promise<{ connections: number; opacity: number }[]> {
  return page.$$eval('#grid .cell', (els) =>
    els.map((el) => ({
      connections: Number((el as HTMLElement).dataset.connections ?? NaN),
      opacity: Number(getComputedStyle(el).opacity),
    })),
  );
}

/** The chart's series: engine (or 'direct'), connections it counted over the window, latest rate. */
async function series(page: Page): Promise<{ engine: string; total: number; last: number; points: string }[]> {
  return page.$$eval('#chart polyline', (els) =>
    els.map((el) => ({
      engine: (el as SVGElement).dataset.engine ?? '',
      total: Number((el as SVGElement).dataset.total),
      last: Number((el as SVGElement).dataset.last),
      points: el.getAttribute('points') ?? '',
    })),
  );
}

test(
  "over the nft data plane: the chart counts each engine's connections, the shades follow the per-bucket counters, a drain shows live",
  { skip: skipLab },
  async (t) => {
    let lab: Lab | undefined;
    let relay: HostRelay | undefined;
    try {
      lab = await createLab({ engines: 2, name: 'page' });
      await lab.startOrigin();
      // The browser reaches 127.0.0.1:<relay port>; the daemon listens on 8080 in the namespace: a reverse proxy's
      // case.
      await startLabDaemon(lab, writeConfig(lab, 'wccpd', { hereIAm: '1s', adminHosts: ['127.0.0.1'], probes: false }));
      startTestEngine(lab, 1, 1000);
      startTestEngine(lab, 2, 1000);
      const [e1, e2] = [lab.engineAddress(1), lab.engineAddress(2)];
      relay = await relayToHost(lab, lab.ns.gw, { nsPort: 8080, hostPort: 0 });
      const url = relay.url;
      const get = async <T>(path: string): Promise<T> => (await (await fetch(`${url}/api/v1/${path}`)).json()) as T;
      await waitUntil(
        () => get<BucketsView>('services/0/buckets').catch(() => null),
        (v) => v !== null && shares(v.buckets).get(e1) === 128 && shares(v.buckets).get(e2) === 128,
        { timeoutMs: 20_000, intervalMs: 100, what: '128 buckets for each test engine' },
      );

      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(url + '/');
      await page.waitForFunction(() => Number(document.getElementById('chart')?.dataset.samples) >= 1);
      await page.evaluate(() => {
        (window as unknown as { notReloaded: boolean }).notReloaded = true;
      });
      const before = await get<BucketsView>('services/0/buckets');
      assert.ok(before.counters, 'the nft data plane counts new connections per bucket');
      assert.deepEqual(
        before.counters.map((c) => c.connections),
        new Array(256).fill(0),
        'no client connection yet',
      );

      // Bucket b gets b % 4 new connections (the engines' namespaces run no proxy, so each is refused there: counted
      // all
      // the same).
      const urls = Array.from({ length: 256 }, (_, b) =>
        Array.from({ length: b % 4 }, (_, k) => `http://${originAddressForBucket(b)}/page/${k}`),
      ).flat();
      const t0 = Date.now();
      const results = await lab.curlMany(urls, { timeoutMs: 2000 });
      assert.equal(
        results.filter((r) => r.status !== 0).length,
        0,
        'every connection went to an engine namespace (refused there)',
      );
      // The API reads the kernel's counters at most once a second (the page's own polling may just have read them).
      const total = urls.length;
      const newSince = (v: BucketsView) => v.counters!.map((c, b) => c.connections - before.counters![b]!.connections);
      const counted = await waitUntil(
        () => get<BucketsView>('services/0/buckets'),
        (v) => v.counters !== null && newSince(v).reduce((a, n) => a + n, 0) >= total,
        { timeoutMs: 10_000, intervalMs: 250, what: `the API counting all ${total} new connections` },
      ).then(
        (r) => r.value,
        () => get<BucketsView>('services/0/buckets'),
      );
      const expected = newSince(counted);
      assert.deepEqual(
        expected,
        Array.from({ length: 256 }, (_, b) => b % 4),
        'the API counted each connection in its bucket',
      );

      // Shades: each cell shows its bucket's connections, and its opacity follows them (the busiest fully opaque).
      await page.waitForFunction(
        (want) => {
          const cells = Array.from(document.querySelectorAll('#grid .cell')) as HTMLElement[];
          return cells.length === 256 && cells.every((c, i) => Number(c.dataset.connections) === want[i]);
        },
        expected,
        { timeout: 30_000 },
      );
      t.diagnostic(`the page showed the counters ${Date.now() - t0} ms after the first connection`);
      const shown = await shading(page);
      const max = Math.max(...expected);
      shown.forEach((c, b) => {
        assert.equal(c.connections, expected[b], `bucket ${b} connections`);
        assert.ok(
          Math.abs(c.opacity - shadeOpacity(expected[b]!, max)) < 0.01,
          `bucket ${b}: opacity ${c.opacity}, want ${shadeOpacity(expected[b]!, max)}`,
        );
      });
      assert.ok(
        shown[3]!.opacity > shown[1]!.opacity && shown[1]!.opacity > shown[0]!.opacity,
        'busier buckets are darker',
      );

      // The chart: per engine, the connections of the buckets it holds, exactly; and it moved.
      const want = (ip: string) => expected.reduce((sum, n, b) => sum + (counted.buckets[b] === ip ? n : 0), 0);
      await page.waitForFunction(
        (w) => {
          const by = new Map(
            Array.from(document.querySelectorAll('#chart polyline')).map((p) => [
              (p as SVGElement).dataset.engine,
              Number((p as SVGElement).dataset.total),
            ]),
          );
          return by.get(w[0]) === w[1] && by.get(w[2]) === w[3];
        },
        [e1, want(e1), e2, want(e2)] as const,
        { timeout: 30_000 },
      );
      const chart = await series(page);
      t.diagnostic(`chart: ${chart.map((c) => `${c.engine} total ${c.total} last ${c.last}/s`).join(', ')}`);
      for (const ip of [e1, e2]) {
        const s = chart.find((c) => c.engine === ip);
        assert.ok(s, `a series for ${ip}`);
        assert.equal(s.total, want(ip), `${ip}'s connections in the chart`);
        assert.ok(
          s.points.split(' ').some((p) => Number(p.split(',')[1]) < 180),
          `${ip}'s line rose above the axis: ${s.points}`,
        );
      }
      assert.ok(!chart.some((c) => c.engine === 'direct' && c.total > 0), 'nothing went direct');

      // A drain shows without a reload, and the next connections all count for the other engine.
      const drain = await fetch(`${url}/api/v1/services/0/engines/${e2}/drain`, {
        method: 'POST',
        headers: { authorization: `Bearer ${LAB_TOKEN}` },
      });
      assert.equal(drain.status, 200);
      const drained = await get<BucketsView>('services/0/buckets');
      await page.waitForFunction((n) => document.body.dataset.changeNumber === String(n), drained.changeNumber, {
        timeout: 30_000,
      });
      assert.match((await page.textContent(`#engines tr[data-engine="${e2}"]`)) ?? '', /draining/);
      assert.ok(!(await cells(page)).some((c) => c.engine === e2), 'the drained engine holds no cell');
      // Once the kernel holds the drained table, the page shows that change number in force (not behind).
      await waitUntil(
        () => get<BucketsView>('services/0/buckets'),
        (v) => v.inForce?.changeNumber === drained.changeNumber,
        { timeoutMs: 10_000, intervalMs: 100, what: `change ${drained.changeNumber} in force` },
      );
      await page.waitForFunction((n) => document.body.dataset.inForce === String(n), drained.changeNumber, {
        timeout: 30_000,
      });
      assert.equal(await page.textContent('#inforce'), String(drained.changeNumber));
      assert.equal(await page.getAttribute('#inforce', 'class'), '', 'not shown as behind');
      const more = await lab.curlMany(
        Array.from({ length: 64 }, (_, b) => `http://${originAddressForBucket(b * 4)}/page/drained`),
        { timeoutMs: 2000 },
      );
      assert.equal(more.length, 64);
      await page.waitForFunction(
        (w) => {
          const by = new Map(
            Array.from(document.querySelectorAll('#chart polyline')).map((p) => [
              (p as SVGElement).dataset.engine,
              Number((p as SVGElement).dataset.total),
            ]),
          );
          return by.get(w[0]) === w[1] + 64 && by.get(w[2]) === w[3];
        },
        [e1, want(e1), e2, want(e2)] as const,
        { timeout: 30_000 },
      );
      assert.equal(
        await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded),
        true,
        'no reload',
      );
      assert.match(
        (await page.textContent('#redirected')) ?? '',
        /^\d/,
        'the service counters show redirected packets',
      );
      assert.equal(await page.textContent('#denied'), '0');
      mkdirSync('test/artifacts', { recursive: true });
      await page.screenshot({ path: 'test/artifacts/page-traffic.png', fullPage: true });
      assert.deepEqual(errors, [], 'no script errors');
      await page.close();
    } finally {
      await relay?.close();
      await lab?.destroy();
    }
  },
);
