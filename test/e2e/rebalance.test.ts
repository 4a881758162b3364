// Drain and undrain under load: the client keeps opening new connections (keep-alive off) to all 256 buckets while
// the API drains and undrains the two Squid engines 100 times. Every request succeeds (both engines stay healthy;
// live connections stick to their engine). Changes need the bearer token.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createLab, originAddresses, type Lab } from '../lab/lab.js';
import {
  describeShares,
  getBuckets,
  http,
  loggedTableChanges,
  shares,
  skipE2e,
  startDaemon,
  TOKEN,
  waitUntil,
  writeConfig,
  type Daemon,
} from './harness.js';

const CYCLES = 100;

describe('e2e: drain and undrain under load', { skip: skipE2e }, () => {
  let lab: Lab;
  let daemon: Daemon;
  before(async () => {
    lab = await createLab({ engines: 2, name: 'rebal' });
    await lab.startOrigin();
    daemon = await startDaemon(lab, writeConfig(lab, 'wccpd'));
    await Promise.all([lab.startSquid(1), lab.startSquid(2)]);
  });
  after(async () => {
    await lab?.destroy();
  });

  it('refuses a drain without the token (401) and with a wrong one', async () => {
    const ready = await waitUntil(
      () => getBuckets(lab),
      (v) => shares(v.buckets).get(lab.engineAddress(1)) === 128,
      { timeoutMs: 25_000, intervalMs: 200, what: 'both Squids registered' },
    );
    const none = await http(lab, 'POST', `services/0/engines/${lab.engineAddress(1)}/drain`);
    assert.equal(none.status, 401, none.body);
    const wrong = await http(lab, 'POST', `services/0/engines/${lab.engineAddress(1)}/drain`, `${TOKEN}-wrong`);
    assert.equal(wrong.status, 401, wrong.body);
    const table = await getBuckets(lab);
    assert.deepEqual(table.buckets, ready.value.buckets, 'a refused drain changed the table');
  });

  it(`loses no request to a healthy engine over ${CYCLES} drain/undrain cycles`, async () => {
    const addrs = [lab.engineAddress(1), lab.engineAddress(2)];
    await waitUntil(
      () => getBuckets(lab),
      (v) => addrs.every((a) => shares(v.buckets).get(a) === 128),
      { timeoutMs: 25_000, intervalMs: 200, what: 'both Squids registered' },
    );
    const urls = originAddresses().map((a) => `http://${a}/nocache/rebalance/${process.pid}/${a}`);
    let stop = false;
    let total = 0;
    let redirected = 0;
    const failures: string[] = [];
    const failedAt: { url: string; from: number; to: number }[] = [];
    // Bounded load: rounds of 256 new connections, until the drains are done (at most 400 rounds).
    const load = (async () => {
      for (let round = 0; round < 400 && !stop; round++) {
        const from = Date.now();
        const results = await lab.curlMany(urls, { timeoutMs: 5000 });
        const to = Date.now();
        total += results.length;
        for (const r of results) {
          if (r.status !== 200) {
            failures.push(
              `${r.url}: HTTP ${r.status} ${r.error ?? ''}${r.squidError ? ` (${r.squidError})` : ''}` +
                `${r.engine ? ` from ${r.engine}` : ''}, round ${round}`,
            );
            failedAt.push({ url: r.url, from, to });
          } else if (r.engine !== undefined) redirected++;
        }
      }
    })();

    const t0 = Date.now();
    let moves = 0;
    try {
      for (let c = 0; c < CYCLES; c++) {
        const target = addrs[c % 2] ?? '';
        const other = addrs[(c + 1) % 2] ?? '';
        const d = await http(lab, 'POST', `services/0/engines/${target}/drain`, TOKEN);
        assert.equal(d.status, 200, `drain ${target}: HTTP ${d.status} ${d.body}`);
        await waitUntil(
          () => getBuckets(lab),
          (v) => shares(v.buckets).get(other) === 256,
          { timeoutMs: 3000, intervalMs: 20, what: `all buckets on ${other} after draining ${target}` },
        );
        const u = await http(lab, 'POST', `services/0/engines/${target}/undrain`, TOKEN);
        assert.equal(u.status, 200, `undrain ${target}: HTTP ${u.status} ${u.body}`);
        const back = await waitUntil(
          () => getBuckets(lab),
          (v) => (shares(v.buckets).get(target) ?? 0) > 0,
          { timeoutMs: 3000, intervalMs: 20, what: `${target} serving again after undrain` },
        );
        if (c === 0) console.log(`after the first undrain: ${describeShares(back.value.buckets)}`);
        moves += 2;
      }
    } finally {
      stop = true;
      await load;
    }
    const seconds = (Date.now() - t0) / 1000;
    console.log(
      `${moves} table changes (${CYCLES} drain + ${CYCLES} undrain) in ${seconds.toFixed(1)} s under load: ` +
        `${total} requests, ${redirected} served by an engine, ${failures.length} failed`,
    );
    if (failures.length > 0) console.log(failureReport(lab, daemon, failedAt));
    assert.deepEqual(failures.slice(0, 10), []);
    assert.ok(total >= 256, `the load ran alongside the drains (${total} requests)`);
    assert.equal(redirected, total, 'every request was served by an engine (none went direct)');
  });
});

/**
 * What the engines and the daemon logged around failed requests: each engine's access.log lines for the failed URLs
 * (Squid's result code, hierarchy and elapsed time), the end of its cache.log, and the table changes within the
 * failed requests' rounds. For the next reader of a failure, not asserted on.
 */
function failureReport(lab: Lab, daemon: Daemon, failed: readonly { url: string; from: number; to: number }[]): string {
  const out: string[] = ['failed requests, what the engines and wccpd logged:'];
  for (const i of [1, 2]) {
    const dir = lab.squidDir(i);
    const access = join(dir, 'access.log');
    const lines = existsSync(access) ? readFileSync(access, 'utf8').split('\n') : [];
    // Each URL names its own origin address, so its earlier lines say when this engine last used its connection there.
    const mine = lines.filter((l) => failed.some((f) => l.includes(f.url)));
    const bad = mine.flatMap((l, k) => (/\/200 /.test(l) ? [] : [...mine.slice(Math.max(0, k - 2), k), l]));
    out.push(`engine${i} access.log (${lines.length} lines), failed URLs not 200 (each after its 2 lines before):`);
    out.push(...bad.slice(-20));
    const cache = join(dir, 'cache.log');
    if (existsSync(cache))
      out.push(`engine${i} cache.log (end):`, ...readFileSync(cache, 'utf8').split('\n').slice(-30));
  }
  const changes = loggedTableChanges(daemon);
  for (const f of failed) {
    const near = changes.filter((c) => c.time >= f.from - 1000 && c.time <= f.to + 1000);
    out.push(
      `${f.url}: its round ran ${new Date(f.from).toISOString()}..${new Date(f.to).toISOString()}; table changes then: ` +
        near.map((c) => `${new Date(c.time).toISOString()} moved ${c.moved} (${c.reason})`).join(', '),
    );
  }
  return out.join('\n');
}
