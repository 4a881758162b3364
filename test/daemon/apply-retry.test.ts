// A failed data-plane apply (a busy or broken nft, say) is logged with the reason and retried with a growing delay,
// so the data plane catches up with the cluster's table once the cause goes away; the daemon keeps running. Meanwhile
// the API, wccpctl and /metrics say which change number is in force (the last one applied without error).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { FlakyRedirector } from '../helpers/flaky-redirector.js';
import { recordingLog } from '../../src/log.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { TOKEN, waitFor, wccpctl, writeLoopbackConfig } from '../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import type { BucketsView, StatusView } from '../../src/admin/api-types.js';

test("a failed apply is logged and retried until the data plane holds the cluster's table", async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-retry-${process.pid}-`));
  const { path: configPath, udpPort: udp, httpPort } = await writeLoopbackConfig(dir, { lenientReceiveId: 0 });
  const redirector = new FlakyRedirector();
  const log = recordingLog();
  const daemon = new Daemon({ config: await loadConfig(configPath), log, redirector });
  const engine = new TestEngine({ address: '127.0.0.71', router: { address: '127.0.0.1', port: udp } });
  try {
    await daemon.start();
    await engine.start();
    await engine.hereIAm();
    await engine.hereIAm();
    assert.equal(daemon.cluster.service(0)?.buckets.filter((b) => b === '127.0.0.71').length, 256);
    await waitFor('a logged apply failure', async () =>
      log.lines.some((l) => l.level === 'error' && /retrying in/.test(l.msg ?? '')) ? true : null,
    );
    assert.ok(
      log.lines.some((l) => /Device or resource busy/.test(l.msg ?? '')),
      'the log says why',
    );
    const status = (await (await fetch(`http://127.0.0.1:${httpPort}/api/v1/status`)).json()) as StatusView;
    assert.equal(status.services[0]?.inForce, null, 'no table is in force before the first apply succeeds');
    redirector.healthy = true;
    const applied = await waitFor(
      'the retried apply',
      async () => {
        const s = redirector.service(0);
        return s && s.table.buckets.every((b) => b === '127.0.0.71') ? s : null;
      },
      5000,
    );
    assert.equal(applied.table.changeNumber, daemon.cluster.service(0)?.changeNumber);
    assert.ok(redirector.failures >= 1);
    assert.ok(log.lines.some((l) => /succeeded after earlier failures/.test(l.msg ?? '')));
  } finally {
    await engine.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a failed apply leaves the older change number in force, and the API, wccpctl and /metrics say so', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-inforce-${process.pid}-`));
  const config = await writeLoopbackConfig(dir, { lenientReceiveId: 0, settle: '0ms' });
  const url = `http://127.0.0.1:${config.httpPort}`;
  const redirector = new FlakyRedirector();
  redirector.healthy = true;
  const log = recordingLog();
  const daemon = new Daemon({ config: await loadConfig(config.path), log, redirector });
  const a = new TestEngine({ address: '127.0.0.71', router: { address: '127.0.0.1', port: config.udpPort } });
  const b = new TestEngine({ address: '127.0.0.72', router: { address: '127.0.0.1', port: config.udpPort } });
  const get = async <T>(path: string): Promise<T> => (await (await fetch(`${url}/api/v1/${path}`)).json()) as T;
  const metric = async (name: string) =>
    sampleValue(parsePrometheusText(await (await fetch(`${url}/metrics`)).text()).samples, name, { service: '0' });
  try {
    await daemon.start();
    for (const e of [a, b]) await e.start();
    for (let round = 0; round < 2; round++) for (const e of [a, b]) await e.hereIAm();
    // Both engines hold buckets and that table is in force.
    const old = await waitFor('a two-engine table in force', async () => {
      const t = await get<BucketsView>('services/0/buckets');
      return t.buckets.includes('127.0.0.71') &&
        t.buckets.includes('127.0.0.72') &&
        t.inForce?.changeNumber === t.changeNumber
        ? t.changeNumber
        : null;
    });
    assert.equal(redirector.service(0)?.table.changeNumber, old);

    redirector.healthy = false;
    const drained = await fetch(`${url}/api/v1/services/0/engines/127.0.0.71/drain`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(drained.status, 200);
    await waitFor('a logged apply failure', async () =>
      log.lines.some((l) => l.level === 'error' && /retrying in/.test(l.msg ?? '')) ? true : null,
    );
    // The table says engine B only; the data plane still holds the table with A.
    const table = await get<BucketsView>('services/0/buckets');
    assert.ok(table.buckets.every((e) => e === '127.0.0.72'));
    assert.ok(table.changeNumber > old);
    assert.equal(table.inForce?.changeNumber, old, 'the failed apply left the older table in force');
    const svc = (await get<StatusView>('status')).services[0]!;
    assert.equal(svc.changeNumber, table.changeNumber);
    assert.equal(svc.inForce?.changeNumber, old);
    assert.equal(await metric('wccpd_change_number'), table.changeNumber);
    assert.equal(await metric('wccpd_change_number_in_force'), old);
    const behind = `behind (decided ${table.changeNumber}, in force ${old})`;
    const ctlStatus = await wccpctl(['--url', url, 'status']);
    assert.equal(ctlStatus.code, 0, ctlStatus.stderr);
    assert.match(ctlStatus.stdout, new RegExp(`Change number in force: +${behind.replace(/[()]/g, '\\$&')}$`, 'm'));
    const ctlBuckets = await wccpctl(['--url', url, 'buckets']);
    assert.equal(ctlBuckets.code, 0, ctlBuckets.stderr);
    assert.ok(ctlBuckets.stdout.includes(`\nin force: ${behind}\n`), ctlBuckets.stdout);

    redirector.healthy = true;
    const caughtUp = await waitFor(
      'the retried apply in force',
      async () => {
        const t = await get<BucketsView>('services/0/buckets');
        return t.inForce?.changeNumber === t.changeNumber ? t : null;
      },
      20_000,
    );
    assert.equal(redirector.service(0)?.table.changeNumber, caughtUp.changeNumber);
    assert.equal(await metric('wccpd_change_number_in_force'), caughtUp.changeNumber);
    const ctlAfter = await wccpctl(['--url', url, 'buckets']);
    assert.match(ctlAfter.stdout, new RegExp(`^in force: ${caughtUp.changeNumber} \\(applied [^)]+\\)$`, 'm'));
  } finally {
    await a.stop();
    await b.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
