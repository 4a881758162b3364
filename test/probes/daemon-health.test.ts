// The running daemon with no `health` block: the HTTP probe is on by default. Three test engines register over WCCP
// and each runs a proxy stand-in in its own process on port 3128 that answers the probe as Debian's Squid does. A
// SIGSTOPped proxy (its kernel still accepts) turns suspect on silence while its HERE_I_AMs keep coming; after SIGCONT
// it
// is usable again only after `rise` passes, with the very buckets it held. A killed proxy (connection refused) turns
// suspect on hard evidence. The engines API shows the probe RTT of the healthy ones.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestEngine } from '../helpers/wccp-engine.js';
import {
  announcingEngines,
  bucketTable,
  engineRows,
  launchDaemon,
  waitFor,
  wccpctl,
  writeLoopbackConfig,
  type AnnouncingEngines,
  type RunningDaemon,
} from '../helpers/daemon.js';
import { SQUID_HTTP_PORT } from '../../src/vocabulary.js';

const A = '127.0.0.61';
const B = '127.0.0.62';
const C = '127.0.0.63';

// Squid 5.7's own answer to OPTIONS with Max-Forwards: 0 (measured), from a separate process that can be stopped.
const PROXY = `
const net = require('node:net');
const answer = 'HTTP/1.1 501 Not Implemented\\r\\nServer: squid/5.7\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n';
net.createServer((s) => { s.on('error', () => {}); s.once('data', () => s.end(answer)); })
  .listen(${SQUID_HTTP_PORT}, process.argv[1], () => console.log('listening'));
`;

async function startProxy(address: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', PROXY, address], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`proxy stand-in for ${address} exited ${code}`)));
  });
  return child;
}

interface EngineRow {
  address: string;
  state: string;
  buckets: number;
  reason: string;
  probeRttMs: number | null;
}

test('daemon defaults: a SIGSTOPped proxy loses its buckets on silence and gets them back after rise passes; a killed one on refusals', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-health-${process.pid}-`));
  const proxies = new Map<string, ChildProcess>();
  let daemon: RunningDaemon | undefined;
  let announcing: AnnouncingEngines | undefined;
  try {
    // The default HTTP probe, on.
    const config = await writeLoopbackConfig(dir, { health: [], lenientReceiveId: 2 });
    for (const a of [A, B, C]) proxies.set(a, await startProxy(a));
    daemon = await launchDaemon(dir, config);
    const { url, output } = daemon;
    const rows = () => engineRows<EngineRow>(url);
    const table = () => bucketTable(url);
    const row = (r: EngineRow[], a: string) => r.find((e) => e.address === a);
    // HERE_I_AMs keep coming whatever the probes say, as from a hung Squid whose WCCP timer still fires.
    announcing = await announcingEngines(config.udpPort, [A, B, C], 1000);
    const { engines } = announcing;
    const healthy = await waitFor('three engines usable with a probe RTT', async () => {
      const r = await rows();
      return r.length === 3 && r.every((e) => e.state === 'usable' && e.buckets > 0 && typeof e.probeRttMs === 'number')
        ? r
        : null;
    });
    for (const e of healthy)
      assert.ok((e.probeRttMs ?? -1) >= 0 && (e.probeRttMs ?? 1e9) < 400, `${e.address} RTT ${e.probeRttMs} ms`);
    const before = await table();

    // Hung: the kernel still completes the handshake, nothing answers.
    proxies.get(C)?.kill('SIGSTOP');
    const hung = await waitFor(
      `${C} suspect`,
      async () => {
        const r = await rows();
        return row(r, C)?.state === 'suspect' && row(r, C)?.buckets === 0 ? r : null;
      },
      15_000,
    );
    assert.equal(
      row(hung, C)?.reason,
      `http probe: 16 consecutive failures (no HTTP answer in 400 ms (connected; port ${SQUID_HTTP_PORT}))`,
    );
    const during = await table();
    for (let b = 0; b < 256; b++) {
      if (before[b] === C)
        assert.ok(during[b] === A || during[b] === B, `bucket ${b} of the hung engine went to a healthy one`);
      else assert.equal(during[b], before[b], `bucket ${b} of a healthy engine stayed`);
    }
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(row(await rows(), C)?.state, 'suspect', 'HERE_I_AMs that keep coming do not make it usable');

    proxies.get(C)?.kill('SIGCONT');
    const back = await waitFor(
      `${C} usable again`,
      async () => {
        const r = await rows();
        return row(r, C)?.state === 'usable' ? r : null;
      },
      15_000,
    );
    assert.equal(row(back, C)?.reason, 'probes pass again (http: 3 consecutive passes)');
    assert.deepEqual(await table(), before, 'the returning engine regains exactly its historical buckets');

    // Crashed: the kernel refuses connections.
    proxies.get(B)?.kill('SIGKILL');
    const crashed = await waitFor(
      `${B} suspect`,
      async () => {
        const r = await rows();
        return row(r, B)?.state === 'suspect' && row(r, B)?.buckets === 0 ? r : null;
      },
      15_000,
    );
    assert.equal(
      row(crashed, B)?.reason,
      `http probe: 2 consecutive hard failures (connection refused (port ${SQUID_HTTP_PORT}))`,
    );
    assert.equal(row(crashed, B)?.probeRttMs, null);
    assert.equal(typeof row(crashed, A)?.probeRttMs, 'number');
    assert.ok(
      await (engines[1] as TestEngine).hereIAm({ timeoutMs: 2000 }),
      'still a WCCP member: its HERE_I_AM is answered',
    );

    const status = await wccpctl(['--url', url, 'status']);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /Worst-case detection: +HERE_I_AM 30 s, http 1\.2 s\n/);
    assert.match(
      status.stdout,
      /Probe http, worst-case detection: +1\.2 s silent \(50 ms x 16 \+ 400 ms\), 150 ms refused\n/,
    );
    assert.match(status.stdout, /Probe http, false verdict chance: +1\.2e-28\/h at 5% loss, 2\.2e-8\/h at 20% loss\n/);
    for (const line of status.stdout.split('\n')) assert.ok(line.length <= 100, `fits 100 columns: ${line}`);

    const log = output.join('');
    assert.match(
      log,
      /worst-case detection: HERE_I_AM 30 s \(3 x HERE_I_AM_T\); http 1\.2 s \(50 ms x 16 \+ 400 ms\), hard evidence 150 ms/,
    );
    assert.match(log, /engine 127\.0\.0\.63 usable -> suspect: http probe: 16 consecutive failures/);
    assert.match(log, /engine 127\.0\.0\.63 suspect -> usable: probes pass again/);
  } finally {
    await announcing?.stop();
    for (const p of proxies.values()) {
      try {
        p.kill('SIGCONT');
        p.kill('SIGKILL');
      } catch {
        /* gone */
      }
    }
    await daemon?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
