// Drain and undrain under load: the client keeps opening new connections (keep-alive off) to all 256 buckets while
// the API drains and undrains the two Squid engines 100 times. Every request succeeds (both engines stay healthy;
// live connections stick to their engine). Changes need the bearer token.
//
// The HTTP probe is off here: under this load (~750 new connections/s through two Squids on 2 cores) a Squid now and
// then leaves a connection unanswered for longer than the probe's silence budget (1.2 s by default; bench/busy-engine
// measures it, docs/health.md "A busy engine"), and an engine turned suspect while the other is drained leaves no
// usable engine, so traffic goes direct, as it should. Detection has its own tests (test/e2e/failover, test/cluster);
// this one is about drains: engines leave only by missing HERE_I_AMs.
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
    daemon = await startDaemon(lab, writeConfig(lab, 'wccpd', { probes: false }));
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
    const directAt: { url: string; from: number; to: number; round: number; seen?: string }[] = [];
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
          else directAt.push({ url: r.url, from, to, round, ...(r.originRemote ? { seen: r.originRemote } : {}) });
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
    if (directAt.length > 0) console.log(directReport(daemon, directAt));
    assert.deepEqual(failures.slice(0, 10), []);
    assert.ok(total >= 256, `the load ran alongside the drains (${total} requests)`);
    assert.equal(redirected, total, 'every request was served by an engine (none went direct)');
  });
});

/**
 * Requests answered without an engine: per round, how many and who the origin saw, the table changes and what wccpd
 * logged at warn or above during those rounds. For the next reader of a failure, not asserted on.
 */
function directReport(
  daemon: Daemon,
  direct: readonly { url: string; from: number; to: number; round: number; seen?: string }[],
): string {
  const out: string[] = ['requests answered without an engine (by round):'];
  const rounds = new Map<number, typeof direct>();
  for (const d of direct) rounds.set(d.round, [...(rounds.get(d.round) ?? []), d]);
  const lines = daemon.proc.lines();
  for (const [round, ds] of rounds) {
    const { from, to } = ds[0] ?? { from: 0, to: 0 };
    const seen = [...new Set(ds.map((d) => d.seen ?? '?'))].join(', ');
    out.push(
      `round ${round} ${new Date(from).toISOString()}..${new Date(to).toISOString()}: ${ds.length} direct ` +
        `(origin saw ${seen}), e.g. ${ds
          .slice(0, 3)
          .map((d) => d.url)
          .join(' ')}`,
    );
    for (const line of lines) {
      let j: { time?: number; level?: number; event?: string };
      try {
        j = JSON.parse(line) as typeof j;
      } catch {
        continue;
      }
      if (j.time === undefined || j.time < from - 1000 || j.time > to + 1000) continue;
      if ((j.level ?? 0) >= 40 || j.event === 'table') out.push(`  ${line.slice(0, 400)}`);
    }
  }
  return out.join('\n');
}

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
