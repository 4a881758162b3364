/// <reference lib="dom" />
// The live web page in real headless Chromium (Debian's chromium driven by playwright-core): 256 cells whose colours
// match the API's table, and a drain through the API changes the grid without a reload. Saves a screenshot.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { startDaemonWithEngines, TOKEN, type DaemonWithEngines, type RunningDaemon } from '../helpers/daemon.js';
import { need } from '../helpers/require.js';
import { ENGINE_COLOURS, UNASSIGNED_COLOUR } from '../../src/admin/page.js';
import type { BucketsView, EnginesView } from '../../src/admin/api-types.js';

const CHROMIUM = '/usr/bin/chromium';
const skip = need(existsSync(CHROMIUM), `Debian's chromium at ${CHROMIUM} (apt-get install chromium)`);
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
  return page.$$eval('#grid .cell', (els) => els.map((el) => ({
    engine: (el as HTMLElement).dataset.engine ?? '', colour: getComputedStyle(el).backgroundColor,
  })));
}

before(async () => {
  if (skip) return;
  running = await startDaemonWithEngines(ENGINES);
  daemon = running.daemon;
  // playwright gives Chromium a new empty profile of its own. The flags keep Chromium off the network: this machine has none, and background fetches would only fail.
  browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  await running?.stop();
});

test('the page shows 256 cells coloured as the API assigns them, and follows a drain without a reload', { skip }, async (t) => {
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
  assert.match(await page.textContent('#mode') ?? '', /balance/);

  // Mark the document: a reload would lose the mark.
  await page.evaluate(() => { (window as unknown as { notReloaded: boolean }).notReloaded = true; });
  const drain = await fetch(`${daemon.url}/api/v1/services/0/engines/127.0.0.22/drain`, {
    method: 'POST', headers: { authorization: `Bearer ${TOKEN}` },
  });
  assert.equal(drain.status, 200);
  const drainedAt = Date.now();
  const after = await api<BucketsView>('services/0/buckets');
  await page.waitForFunction((n) => document.body.dataset.changeNumber === String(n), after.changeNumber, { timeout: 5000 });
  const shownAfterMs = Date.now() - drainedAt;
  t.diagnostic(`the page showed the drain ${shownAfterMs} ms after the API answered`);
  // No timing assertion (the machine may be loaded): the events timeline below is fed only by the event stream
  // once the page is loaded, so seeing the drain there without a reload proves the page was pushed the change.
  assert.equal(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded), true, 'no reload');
  shown = await cells(page);
  shown.forEach((c, i) => {
    assert.equal(c.engine, after.buckets[i] ?? '', `bucket ${i} engine after the drain`);
    assert.equal(c.colour, colourOf(after.buckets[i] ?? null), `bucket ${i} colour after the drain`);
  });
  assert.ok(!shown.some((c) => c.engine === '127.0.0.22'), 'the drained engine holds no cell');
  assert.match(await page.textContent('#engines tr[data-engine="127.0.0.22"]') ?? '', /draining/);
  await page.waitForFunction(() => /127\.0\.0\.22: usable -> draining/.test(document.getElementById('events')?.textContent ?? ''), undefined, { timeout: 5000 });
  const hover = await page.getAttribute('#grid .cell[data-bucket="7"]', 'title');
  assert.match(hover ?? '', new RegExp(`bucket 7 .*\\n?engine ${(after.buckets[7] ?? 'unassigned').replace(/\./g, '\\.')}`, 's'));

  mkdirSync('test/artifacts', { recursive: true });
  await page.screenshot({ path: 'test/artifacts/page.png', fullPage: true });
  assert.deepEqual(errors, [], 'no script errors');
  assert.ok(requests.every((u) => u.startsWith(daemon.url)), `no request leaves the daemon: ${requests.filter((u) => !u.startsWith(daemon.url)).join(' ')}`);
  await page.close();
});
