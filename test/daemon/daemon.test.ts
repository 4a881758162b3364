// The daemon end to end: spawn `wccpd --config` (dataplane none), register two test engines over UDP, read the
// bucket table from the HTTP API; restart with the same engines and get the identical table back from state.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TestEngine } from '../helpers/wccp-engine.js';

async function freeUdpPort(): Promise<number> {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
  const port = s.address().port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

async function freeTcpPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const a = srv.address();
  await new Promise<void>((r) => srv.close(() => r()));
  return typeof a === 'object' && a ? a.port : 0;
}

interface Running {
  child: ChildProcess;
  stdout: string[];
  exited: Promise<number | null>;
}

function startDaemon(configPath: string): Running {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/wccpd.ts', '--config', configPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout: string[] = [];
  child.stdout?.on('data', (d: Buffer) => stdout.push(d.toString()));
  child.stderr?.on('data', (d: Buffer) => stdout.push(d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, stdout, exited };
}

async function waitFor<T>(what: string, probe: () => Promise<T | null>, tries = 100): Promise<T> {
  for (let i = 0; i < tries; i++) {
    const v = await probe().catch(() => null);
    if (v !== null) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function stopDaemon(r: Running): Promise<number | null> {
  if (r.child.exitCode !== null) return r.child.exitCode;
  r.child.kill('SIGTERM');
  const code = await Promise.race([r.exited, new Promise<'timeout'>((res) => setTimeout(() => res('timeout'), 10_000))]);
  if (code === 'timeout') {
    r.child.kill('SIGKILL');
    return null;
  }
  return code;
}

test('wccpd: two engines register, the API shows 128 buckets each; a restart with the same engines gives the identical table', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-daemon-${process.pid}-`));
  const udp = await freeUdpPort();
  const http = await freeTcpPort();
  const configPath = join(dir, 'wccpd.yaml');
  writeFileSync(configPath, [
    'router:', '  address: 127.0.0.1', `  port: ${udp}`,
    'admin:', `  listen: 127.0.0.1:${http}`, '  token: test-token',
    `stateDir: ${join(dir, 'state')}`,
    'dataplane:', '  backend: none',
    'timers:', '  hereIAm: 10s',
    'services:', '  - id: 0', '    forwarding: l2', '    return: l2', '    assignment: hash', '    engines:', '      allow: [127.0.0.0/24]',
    '      lenientReceiveId: 2', '',
  ].join('\n'));
  const api = `http://127.0.0.1:${http}/api/v1`;
  const buckets = async (): Promise<{ service: number; changeNumber: number; buckets: (string | null)[] }> => (await fetch(`${api}/services/0/buckets`)).json() as never;
  let running: Running | null = null;
  const engines: TestEngine[] = [];
  try {
    const register = async (order: string[], behaviour: 'strict' | 'squid-5.7') => {
      for (const address of order) {
        const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udp }, behaviour });
        await e.start();
        engines.push(e);
        await e.hereIAm({ timeoutMs: 2000 });
      }
      for (const e of engines.slice(-order.length)) assert.ok(await e.hereIAm({ timeoutMs: 2000 }), 'I_SEE_YOU');
    };

    running = startDaemon(configPath);
    const r1 = running;
    await waitFor('the admin API', async () => ((await fetch(`${api}/status`)).ok ? true : null));
    await register(['127.0.0.11', '127.0.0.12'], 'strict');
    const first = await waitFor('two engines in the table', async () => {
      const b = await buckets();
      return b.buckets.filter((x) => x === '127.0.0.11').length === 128 && b.buckets.filter((x) => x === '127.0.0.12').length === 128 ? b : null;
    });
    assert.equal(first.service, 0);
    assert.equal(first.buckets.length, 256);

    const engineList = await (await fetch(`${api}/services/0/engines`)).json() as { engines: { address: string; state: string; buckets: number }[] };
    assert.deepEqual(engineList.engines.map((e) => [e.address, e.state, e.buckets]), [['127.0.0.11', 'usable', 128], ['127.0.0.12', 'usable', 128]]);
    const denied = await fetch(`${api}/services/0/engines/127.0.0.12/drain`, { method: 'POST' });
    assert.equal(denied.status, 401);
    const wrong = await fetch(`${api}/services/0/engines/127.0.0.12/drain`, { method: 'POST', headers: { authorization: 'Bearer nope' } });
    assert.equal(wrong.status, 401);
    assert.deepEqual((await buckets()).buckets, first.buckets, 'a refused drain changed nothing');

    assert.equal(await stopDaemon(r1), 0, 'SIGTERM exits 0');
    const logLines = r1.stdout.join('').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { msg?: string; event?: string });
    assert.ok(logLines.some((l) => l.event === 'engine-state' && /127\.0\.0\.11 joining -> usable/.test(l.msg ?? '')), 'state change logged as one JSON line');
    for (const e of engines.splice(0)) await e.stop();

    // Restart: the same engines, in the other order, Squid-5.7-like this time (never echo).
    running = startDaemon(configPath);
    await waitFor('the admin API again', async () => ((await fetch(`${api}/status`)).ok ? true : null));
    await register(['127.0.0.12', '127.0.0.11'], 'squid-5.7');
    const second = await waitFor('both engines back', async () => {
      const b = await buckets();
      return b.buckets.filter((x) => x === '127.0.0.11').length === 128 && b.buckets.filter((x) => x === '127.0.0.12').length === 128 ? b : null;
    });
    assert.deepEqual(second.buckets, first.buckets, 'identical table after restart');
    const flagged = await (await fetch(`${api}/services/0/engines`)).json() as { engines: { flags: { noReceiveIdEcho: boolean } }[] };
    assert.ok(flagged.engines.every((e) => e.flags.noReceiveIdEcho));

    const drained = await fetch(`${api}/services/0/engines/127.0.0.12/drain`, { method: 'POST', headers: { authorization: 'Bearer test-token' } });
    assert.equal(drained.status, 200);
    const afterDrain = await buckets();
    assert.equal(afterDrain.buckets.filter((x) => x === '127.0.0.11').length, 256);
    t.diagnostic(`change numbers: first ${first.changeNumber}, after restart ${second.changeNumber}, after drain ${afterDrain.changeNumber}`);
  } finally {
    for (const e of engines) await e.stop();
    if (running) await stopDaemon(running);
    rmSync(dir, { recursive: true, force: true });
  }
});
