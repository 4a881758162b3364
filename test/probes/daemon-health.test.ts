// The running daemon with TCP health probes on: two test engines register over WCCP and each listens on its TCP
// probe port (3128); when one engine's port stops answering, its buckets move to the other after fall x interval,
// while its HERE_I_AMs keep it a member. The engines API shows the probe RTT of the healthy one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import type { Server } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TestEngine } from '../helpers/wccp-engine.js';
import { freeTcpPort, freeUdpPort, waitFor } from '../helpers/daemon.js';
import { DEFAULT_TCP_PROBE_PORT } from '../../src/control/probes/index.js';

const A = '127.0.0.61';
const B = '127.0.0.62';

async function listen(address: string): Promise<Server> {
  const srv = createServer((s) => s.destroy());
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(DEFAULT_TCP_PROBE_PORT, address, () => resolve());
  });
  return srv;
}

interface EngineRow { address: string; state: string; buckets: number; reason: string; probeRttMs: number | null }

test('daemon: an engine whose TCP port stops answering loses its buckets after fall x interval; healthy engines show probeRttMs', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-health-${process.pid}-`));
  const udp = await freeUdpPort();
  const http = await freeTcpPort();
  const config = join(dir, 'wccpd.yaml');
  writeFileSync(config, [
    'router:', '  address: 127.0.0.1', `  port: ${udp}`,
    'admin:', `  listen: 127.0.0.1:${http}`, '  token: test-token',
    `stateDir: ${join(dir, 'state')}`,
    'dataplane:', '  backend: none',
    'timers:', '  hereIAm: 10s',
    'health:', '  tcp:', '    enabled: true', '    interval: 200ms', '    timeout: 100ms', '    rise: 2', '    fall: 2',
    'services:', '  - id: 0', '    engines:', '      allow: [127.0.0.0/24]', '      lenientReceiveId: 2', '',
  ].join('\n'));
  const api = `http://127.0.0.1:${http}/api/v1`;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/wccpd.ts', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  const output: string[] = [];
  child.stdout.on('data', (d: Buffer) => output.push(d.toString()));
  child.stderr.on('data', (d: Buffer) => output.push(d.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const listeners: Server[] = [];
  const engines: TestEngine[] = [];
  const rows = async (): Promise<EngineRow[]> => ((await (await fetch(`${api}/services/0/engines`)).json()) as { engines: EngineRow[] }).engines;
  try {
    listeners.push(await listen(A), await listen(B));
    await waitFor('the admin API', async () => ((await fetch(`${api}/status`)).ok ? true : null), 20_000);
    for (const address of [A, B]) {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udp }, behaviour: 'strict' });
      await e.start();
      engines.push(e);
      await e.hereIAm({ timeoutMs: 2000 });
      await e.hereIAm({ timeoutMs: 2000 });
    }
    const healthy = await waitFor('both engines usable with a probe RTT', async () => {
      const r = await rows();
      return r.length === 2 && r.every((e) => e.state === 'usable' && e.buckets === 128 && typeof e.probeRttMs === 'number') ? r : null;
    });
    for (const e of healthy) assert.ok((e.probeRttMs ?? -1) >= 0 && (e.probeRttMs ?? 1e9) < 100, `${e.address} RTT ${e.probeRttMs} ms`);

    await new Promise<void>((r) => (listeners[1] as Server).close(() => r()));
    const after = await waitFor(`${B} suspect, all buckets on ${A}`, async () => {
      const r = await rows();
      return r.find((e) => e.address === B)?.state === 'suspect' && r.find((e) => e.address === A)?.buckets === 256 ? r : null;
    }, 5000);
    const b = after.find((e) => e.address === B);
    assert.deepEqual(b && [b.buckets, b.reason, b.probeRttMs],
      [0, `tcp probe: 2 consecutive failures (connection refused (port ${DEFAULT_TCP_PROBE_PORT}))`, null]);
    assert.equal(typeof after.find((e) => e.address === A)?.probeRttMs, 'number');
    // Still a WCCP member: its HERE_I_AM is answered and it is not removed.
    assert.ok(await (engines[1] as TestEngine).hereIAm({ timeoutMs: 2000 }), 'I_SEE_YOU to the suspect engine');
    assert.equal((await rows()).length, 2);

    const log = output.join('');
    assert.match(log, /worst-case detection: HERE_I_AM 30s \(3 x HERE_I_AM_T\); tcp 0\.5s \(0\.2s x 2 \+ 0\.1s\)/);
    assert.match(log, /engine 127\.0\.0\.62 usable -> suspect: tcp probe: 2 consecutive failures/);
  } finally {
    for (const e of engines) await e.stop();
    for (const l of listeners) if (l.listening) await new Promise<void>((r) => l.close(() => r()));
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  }
});
