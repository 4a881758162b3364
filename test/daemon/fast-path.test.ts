// The software fast path as an admin meets it: one log line at start, and a status field in the API and in
// `wccpctl status`, taken from the data plane (here a memory data plane that reports the kernel lacks flowtables,
// as this project's test machine does; test/dataplane/nft/flowtable.kernel.test.ts checks the real kernel's answer).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import type { FastPathStatus } from '../../src/dataplane/index.js';
import { renderStatus } from '../../src/admin/render.js';
import type { StatusView } from '../../src/admin/api-types.js';
import { recordingLog } from '../../src/log.js';
import { writeLoopbackConfig } from '../helpers/daemon.js';

const UNAVAILABLE: FastPathStatus = {
  flowtable: false,
  used: false,
  detail:
    'software fast path unavailable: this kernel has no nftables flowtable support (nf_flow_table); ' +
    'established flows take the normal forward path',
};

test('a data plane without a software fast path says so in the log, the status API and wccpctl status', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-fastpath-${process.pid}-`));
  const { path: configPath, httpPort: admin } = await writeLoopbackConfig(dir, { hereIAm: '1s' });
  const memory = new MemoryRedirector();
  let started = false;
  const redirector = Object.assign(Object.create(memory) as MemoryRedirector, {
    start: async () => {
      await memory.start();
      started = true;
    },
    fastPath: () => (started ? UNAVAILABLE : null),
  });
  const log = recordingLog();
  const daemon = new Daemon({ config: await loadConfig(configPath), log, redirector });
  try {
    await daemon.start();
    const line = log.lines.find((l) => l.msg === UNAVAILABLE.detail);
    assert.ok(line, 'one log line with the reason');
    assert.deepEqual(line.obj, { dataplane: 'memory', flowtable: false, fastPath: false });
    const status = (await (await fetch(`http://127.0.0.1:${admin}/api/v1/status`)).json()) as StatusView;
    assert.deepEqual(status.dataplane.fastPath, UNAVAILABLE);
    assert.match(
      renderStatus(status),
      /Software fast path:\s+software fast path unavailable: this kernel has no nftables flowtable/,
    );
  } finally {
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
