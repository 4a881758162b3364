// Runs the real `wccpd` (src/cli/wccpd.ts under tsx) on loopback with the `none` data plane, for tests of the control
// plane and the admin surfaces; and `wccpctl` against it. Free ports are picked per run; stop() is by PID.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { connect, createServer } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TestEngine } from './wccp-engine.js';

export const TOKEN = 'test-token';

/** A UDP port free on 127.0.0.1 right now. */
export async function freeUdpPort(): Promise<number> {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
  const port = s.address().port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A TCP port free on 127.0.0.1 right now. */
export async function freeTcpPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const a = srv.address();
  await new Promise<void>((r) => srv.close(() => r()));
  return typeof a === 'object' && a ? a.port : 0;
}

/** Writes `head` to the server at `url` as it is and resolves with everything it sent before it closed. */
export function rawExchange(url: string, head: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect({ host: hostname, port: Number(port) });
    let answer = '';
    s.on('data', (d: Buffer) => (answer += d.toString()));
    s.on('error', reject);
    s.on('close', () => resolve(answer));
    s.write(head);
  });
}

export interface RunningDaemon {
  readonly child: ChildProcess;
  readonly udpPort: number;
  readonly url: string;
  readonly dir: string;
  readonly output: string[];
  /** SIGTERM (SIGKILL after 10 s); returns the exit code. Keeps the state dir for restart(). */
  terminate(): Promise<number | null>;
  /** A new wccpd with the same config, ports and state dir (call terminate() first). */
  restart(): Promise<RunningDaemon>;
  /** terminate(), then removes the state dir. */
  stop(): Promise<number | null>;
}

/** The daemon's JSON log lines so far (its output's other lines, e.g. a stack trace, passed over). */
export function logLines<T = { level: number; key?: string; event?: string; msg: string }>(
  daemon: Pick<RunningDaemon, 'output'>,
): T[] {
  return daemon.output
    .join('')
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as T);
}

export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | null | undefined>,
  timeoutMs = 10_000,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown = null;
  while (Date.now() < end) {
    try {
      const v = await probe();
      if (v !== null && v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

export interface DaemonOptions {
  /** engines.allow of service 0 (default [127.0.0.0/24]). */
  readonly allow?: string;
  /** Lines added to the admin section, e.g. `hosts: [wccpd.example]`. */
  readonly admin?: readonly string[];
  /** router.address (default 127.0.0.1): another 127.0.0.x for a second gateway on loopback. */
  readonly routerAddress?: string;
  /** The admin API port, when a peer must know it before the start (default: a free one). */
  readonly httpPort?: number;
  /** Lines appended at the top level, e.g. a `peers:` list. */
  readonly top?: readonly string[];
  /** Lines of the health section (default: the HTTP probe off). */
  readonly health?: readonly string[];
  /** timers.hereIAm (default 10s). */
  readonly hereIAm?: string;
  /** Service 0's assignment (default hash). */
  readonly assignment?: 'hash' | 'mask';
}

export interface LoopbackConfig {
  /** dataplane.backend (default none). */
  readonly backend?: 'none' | 'userland';
  /** timers.hereIAm; absent: wccpd's default. */
  readonly hereIAm?: string;
  /** timers.settle; absent: wccpd's default. */
  readonly settle?: string;
  /** Lines of the health section (default: the HTTP probe off, the test engines have no proxy); [] leaves it out. */
  readonly health?: readonly string[];
  /** Lines added to service 0 before its engines, e.g. `forwarding: gre`. */
  readonly service?: readonly string[];
  /** engines.lenientReceiveId of service 0; absent: wccpd's default. */
  readonly lenientReceiveId?: number;
  /** Lines of more services after service 0, each at the level of `- id: 0` (e.g. `- id: 90`, `  protocol: tcp`). */
  readonly moreServices?: readonly string[];
}

/**
 * A config for a wccpd a test runs itself, on loopback: the router on 127.0.0.1 and a free UDP port, the admin API on a
 * free TCP port with TOKEN, the state in `dir`/state, one service 0 allowing 127.0.0.0/24. Written to `dir`/wccpd.yaml.
 */
export async function writeLoopbackConfig(
  dir: string,
  o: LoopbackConfig = {},
): Promise<{ path: string; udpPort: number; httpPort: number; stateDir: string }> {
  const udpPort = await freeUdpPort();
  const httpPort = await freeTcpPort();
  const stateDir = join(dir, 'state');
  const path = join(dir, 'wccpd.yaml');
  const health = o.health ?? ['http:', '  enabled: false'];
  writeFileSync(
    path,
    [
      'router:',
      '  address: 127.0.0.1',
      `  port: ${udpPort}`,
      'admin:',
      `  listen: 127.0.0.1:${httpPort}`,
      `  token: ${TOKEN}`,
      `stateDir: ${stateDir}`,
      'dataplane:',
      `  backend: ${o.backend ?? 'none'}`,
      ...(o.hereIAm !== undefined || o.settle !== undefined ? ['timers:'] : []),
      ...(o.hereIAm !== undefined ? [`  hereIAm: ${o.hereIAm}`] : []),
      ...(o.settle !== undefined ? [`  settle: ${o.settle}`] : []),
      ...(health.length > 0 ? ['health:', ...health.map((l) => `  ${l}`)] : []),
      'services:',
      '  - id: 0',
      ...(o.service ?? []).map((l) => `    ${l}`),
      '    engines:',
      '      allow: [127.0.0.0/24]',
      ...(o.lenientReceiveId !== undefined ? [`      lenientReceiveId: ${o.lenientReceiveId}`] : []),
      ...(o.moreServices ?? []).map((l) => `  ${l}`),
      '',
    ].join('\n'),
  );
  return { path, udpPort, httpPort, stateDir };
}

/** Starts wccpd with one standard service 0 (hash, balance) allowing 127.0.0.0/24; `extra` lines go into the service.
 * */
export async function startDaemon(extra: readonly string[] = [], options: DaemonOptions = {}): Promise<RunningDaemon> {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-test-${process.pid}-`));
  const udpPort = await freeUdpPort();
  const httpPort = options.httpPort ?? (await freeTcpPort());
  const config = join(dir, 'wccpd.yaml');
  writeFileSync(
    config,
    [
      'router:',
      `  address: ${options.routerAddress ?? '127.0.0.1'}`,
      `  port: ${udpPort}`,
      'admin:',
      `  listen: 127.0.0.1:${httpPort}`,
      `  token: ${TOKEN}`,
      ...(options.admin ?? []).map((l) => `  ${l}`),
      `stateDir: ${join(dir, 'state')}`,
      'dataplane:',
      '  backend: none',
      'timers:',
      `  hereIAm: ${options.hereIAm ?? '10s'}`,
      // The test engines have no proxy to probe (the HTTP probe is on by default).
      'health:',
      ...(options.health ?? ['http:', '  enabled: false']).map((l) => `  ${l}`),
      'services:',
      '  - id: 0',
      '    forwarding: l2',
      '    return: l2',
      `    assignment: ${options.assignment ?? 'hash'}`,
      ...extra.map((l) => `    ${l}`),
      '    engines:',
      `      allow: ${options.allow ?? '[127.0.0.0/24]'}`,
      '      lenientReceiveId: 2',
      ...(options.top ?? []),
      '',
    ].join('\n'),
  );
  return launch(dir, config, udpPort, `http://127.0.0.1:${httpPort}`);
}

/** Runs wccpd on a config writeLoopbackConfig wrote in `dir` (its stop() removes `dir`). */
export function launchDaemon(
  dir: string,
  config: { readonly path: string; readonly udpPort: number; readonly httpPort: number },
): Promise<RunningDaemon> {
  return launch(dir, config.path, config.udpPort, `http://127.0.0.1:${config.httpPort}`);
}

async function launch(dir: string, config: string, udpPort: number, url: string): Promise<RunningDaemon> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/wccpd.ts', '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  child.stdout?.on('data', (d: Buffer) => output.push(d.toString()));
  child.stderr?.on('data', (d: Buffer) => output.push(d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const terminate = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const code = await Promise.race([exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000))]);
      if (code === 'timeout') child.kill('SIGKILL');
    }
    return child.exitCode;
  };
  const stop = async () => {
    const code = await terminate();
    rmSync(dir, { recursive: true, force: true });
    return code;
  };
  try {
    await waitFor('the admin API', async () => ((await fetch(`${url}/api/v1/status`)).ok ? true : null), 20_000);
  } catch (e) {
    await stop();
    throw new Error(`${(e as Error).message}\n${output.join('')}`);
  }
  return { child, udpPort, url, dir, output, terminate, stop, restart: () => launch(dir, config, udpPort, url) };
}

export interface CtlResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `wccpctl ARGS` (src/cli/wccpctl.ts under tsx). Asynchronous on purpose: a blocking spawn would stall this
 * process's event loop, and its pooled HTTP connections would go stale under the server's keep-alive timeout.
 */
export function wccpctl(args: readonly string[], env: Record<string, string> = {}): Promise<CtlResult> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/wccpctl.ts', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env, NO_COLOR: '1' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

/** GET /api/v1/services/0/engines of the daemon at `url`: its engine rows (as the fields a test reads, T). */
export async function engineRows<T>(url: string): Promise<T[]> {
  return ((await (await fetch(`${url}/api/v1/services/0/engines`)).json()) as { engines: T[] }).engines;
}

/** GET /api/v1/services/0/buckets of the daemon at `url`: the table, bucket by bucket (an engine address, or null). */
export async function bucketTable(url: string): Promise<(string | null)[]> {
  return ((await (await fetch(`${url}/api/v1/services/0/buckets`)).json()) as { buckets: (string | null)[] }).buckets;
}

export interface AnnouncingEngines {
  readonly engines: readonly TestEngine[];
  /** Ends the announcements, then stops the engines. */
  stop(): Promise<void>;
}

/**
 * Strict test engines at `addresses`, registered with the router on 127.0.0.1:`udpPort` one after the other (two
 * HERE_I_AMs each, the second echoing the first I_SEE_YOU's Receive ID), then each sending a HERE_I_AM every
 * `everyMs` whatever else happens (a hung Squid's WCCP timer still fires); each waits up to 2 s for its I_SEE_YOU.
 * The test checks what came of it (the engines API). What was started is stopped if an engine cannot start.
 */
export async function announcingEngines(
  udpPort: number,
  addresses: readonly string[],
  everyMs: number,
): Promise<AnnouncingEngines> {
  const engines: TestEngine[] = [];
  try {
    for (const address of addresses) {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udpPort }, behaviour: 'strict' });
      await e.start();
      engines.push(e);
      await e.hereIAm({ timeoutMs: 2000 });
      await e.hereIAm({ timeoutMs: 2000 });
    }
  } catch (e) {
    for (const started of engines) await started.stop();
    throw e;
  }
  const announcing = setInterval(() => {
    for (const e of engines) void e.hereIAm({ timeoutMs: 2000 }).catch(() => undefined);
  }, everyMs);
  const stop = async () => {
    clearInterval(announcing);
    for (const e of engines) await e.stop();
  };
  return { engines, stop };
}

export interface DaemonWithEngines {
  readonly daemon: RunningDaemon;
  readonly engines: readonly TestEngine[];
  /** Stops the engines, then the daemon. */
  stop(): Promise<void>;
}

/**
 * wccpd plus strict test engines at `addresses`, each usable (the second HERE_I_AM echoes the first I_SEE_YOU's
 * Receive ID) and holding buckets; they keep announcing themselves every 3 s, as real engines do.
 */
export async function startDaemonWithEngines(addresses: readonly string[]): Promise<DaemonWithEngines> {
  const daemon = await startDaemon();
  const engines: TestEngine[] = [];
  let keepAlive: ReturnType<typeof setInterval> | undefined;
  const stop = async () => {
    clearInterval(keepAlive);
    for (const e of engines) await e.stop();
    await daemon.stop();
  };
  try {
    for (const address of addresses) {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: daemon.udpPort } });
      await e.start();
      engines.push(e);
    }
    for (let round = 0; round < 2; round++) for (const e of engines) await e.hereIAm();
    await waitFor(`${addresses.length} engines holding buckets`, async () => {
      const t = await bucketTable(daemon.url);
      return addresses.every((a) => t.includes(a)) ? true : null;
    });
    keepAlive = setInterval(() => {
      for (const e of engines) void e.hereIAm().catch(() => undefined);
    }, 3000);
  } catch (e) {
    await stop();
    throw e;
  }
  return { daemon, engines, stop };
}
