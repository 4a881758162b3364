// A state directory that cannot be written (a full or read-only disk, an admin's mistake) costs the saves, not the
// gateway: each failed save is logged and counted in status internalErrors and /metrics, the engine still joins and
// its table is served, and the next change after the directory is back writes the state.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { recordingLog } from '../../src/log.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { TOKEN, waitFor, writeLoopbackConfig } from '../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import type { StatusView } from '../../src/admin/api-types.js';

test('a state dir that cannot be written: saves counted and logged, the engine served, saved again once it is back', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-savefail-${process.pid}-`));
  const config = await writeLoopbackConfig(dir, { lenientReceiveId: 0 });
  const log = recordingLog();
  const redirector = new MemoryRedirector();
  const daemon = new Daemon({ config: await loadConfig(config.path), log, redirector });
  const engine = new TestEngine({ address: '127.0.0.71', router: { address: '127.0.0.1', port: config.udpPort } });
  const status = async () =>
    (await (await fetch(`http://127.0.0.1:${config.httpPort}/api/v1/status`)).json()) as StatusView;
  try {
    await daemon.start();
    assert.deepEqual((await status()).internalErrors, { 'cluster-tick': 0, 'state-save': 0 });
    // The state dir becomes a file: every write under it fails (ENOTDIR).
    rmSync(config.stateDir, { recursive: true, force: true });
    writeFileSync(config.stateDir, 'not a directory');
    await engine.start();
    await engine.hereIAm();
    await engine.hereIAm();
    assert.equal(daemon.cluster.service(0)?.buckets.filter((b) => b === '127.0.0.71').length, 256);
    const failed = await waitFor('a counted failed save', async () => {
      const n = (await status()).internalErrors?.['state-save'] ?? 0;
      return n >= 1 ? n : null;
    });
    assert.ok(log.lines.some((l) => l.level === 'error' && l.msg === 'cannot save state'));
    const metrics = parsePrometheusText(
      await (await fetch(`http://127.0.0.1:${config.httpPort}/metrics`)).text(),
    ).samples;
    assert.ok((sampleValue(metrics, 'wccpd_internal_errors_total', { where: 'state-save' }) ?? 0) >= failed);
    assert.ok(
      redirector.service(0)?.table.buckets.every((b) => b === '127.0.0.71'),
      'the table is served',
    );
    // The directory is back: the next change (an admin drain) saves.
    rmSync(config.stateDir, { force: true });
    mkdirSync(config.stateDir);
    const res = await fetch(`http://127.0.0.1:${config.httpPort}/api/v1/services/0/engines/127.0.0.71/drain`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.ok(res.status < 300, `drain answered ${res.status}`);
    await waitFor('the state saved again', async () => (existsSync(join(config.stateDir, 'state.json')) ? true : null));
  } finally {
    await engine.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
