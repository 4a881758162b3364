// A failed data-plane apply (a busy or broken nft, say) is logged with the reason and retried with a growing delay,
// so the data plane catches up with the cluster's table once the cause goes away; the daemon keeps running.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { MemoryRedirector } from '../../src/dataplane/index.js';
import type { ServiceRedirect } from '../../src/dataplane/index.js';
import { recordingLog } from '../../src/log.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { waitFor, writeLoopbackConfig } from '../helpers/daemon.js';

/** Fails every apply until `healthy` is set, as a data plane whose nft calls fail would. */
class FlakyRedirector extends MemoryRedirector {
  healthy = false;
  failures = 0;
  override async apply(service: ServiceRedirect): Promise<void> {
    if (!this.healthy) {
      this.failures++;
      throw new Error('nft: Could not process rule: Device or resource busy');
    }
    await super.apply(service);
  }
}

test("a failed apply is logged and retried until the data plane holds the cluster's table", async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-retry-${process.pid}-`));
  const { path: configPath, udpPort: udp } = await writeLoopbackConfig(dir, { lenientReceiveId: 0 });
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
