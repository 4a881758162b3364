// The built wccpd in a Topology's gateway namespace (test/dataplane/topology.ts), with a strict test engine in an
// engine namespace: for tests of what the daemon does with the kernel there. Optionally under the shipped unit's
// identity (an unprivileged user with exactly its capabilities, via setpriv). Processes are stopped by PID.
import { after, before } from 'node:test';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../helpers/daemon.js';
import { haveCommand, isRoot, need } from '../helpers/require.js';
import { serviceSection } from '../systemd/unit-file.js';
import { Topology } from './topology.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));

/** The skip of a test that runs the built daemon in a topology's gateway (startGwDaemon). */
export function needGwDaemon(): string | false {
  return need(
    isRoot && ['nft', 'ip', 'curl'].every(haveCommand) && existsSync(join(REPO, 'dist/src/cli/wccpd.js')),
    'root with nft, ip, curl and a build (npm run build)',
  );
}
const UNIT = serviceSection(readFileSync(join(REPO, 'systemd/wccpd.service'), 'utf8'));
const one = (k: string): string => UNIT.get(k)?.at(-1) ?? '';
/** nobody, standing in for the unit's wccpd user. */
export const UNIT_UID = 65534;
export const UNIT_GID = 65534;

/** setpriv arguments for the unit's user, capabilities and NoNewPrivileges, as systemd would apply them. */
export function unitSetprivArgs(): string[] {
  const caps = (k: string) =>
    one(k)
      .split(/\s+/)
      .map((c) => `+${c.replace(/^CAP_/, '').toLowerCase()}`)
      .join(',');
  return [
    `--reuid=${UNIT_UID}`,
    `--regid=${UNIT_GID}`,
    '--clear-groups',
    `--inh-caps=-all,${caps('AmbientCapabilities')}`,
    `--ambient-caps=-all,${caps('AmbientCapabilities')}`,
    `--bounding-set=-all,${caps('CapabilityBoundingSet')}`,
    ...(one('NoNewPrivileges') === 'yes' ? ['--no-new-privs'] : []),
  ];
}

export interface GwDaemonOptions {
  readonly backend: 'nft' | 'ingress' | 'userland';
  readonly failMode?: 'open' | 'closed';
  /** Run as the unit's user with only its capabilities (setpriv). */
  readonly asUnitUser?: boolean;
  /** The checkout whose built daemon runs (its bin/wccpd.js); default this one. scripts/house-check runs two. */
  readonly repo?: string;
  /** The ingress backend's `dataplane.flows.idle` (default the config's). */
  readonly flowsIdle?: string;
  /** More lines of service 0's section, indented as its keys (bench/load-aware.ts: its `loadAware` block). */
  readonly serviceLines?: readonly string[];
}

export interface GwDaemon {
  readonly output: string[];
  readonly config: string;
  readonly stateDir: string;
  /** GET on the admin API inside the gateway; '' when it does not answer. */
  api(path: string): string;
  /** The daemon's own PID (under setpriv/sh it is exec'd, so the child's PID is the daemon's); start() changes it. */
  readonly pid: number;
  /** Resolves with the exit code or signal once the daemon (the one last started) has ended. */
  readonly exited: Promise<number | string | null>;
  /** Starts the daemon again on the same config and state directory (a restart's ExecStart); the last must be gone. */
  start(): void;
  /** Starts (again) test engine `index` (default the first); it stops by itself after `rounds` HERE_I_AMs. */
  startEngine(rounds?: number, index?: number): void;
  stopEngine(index?: number): Promise<void>;
  /** Kills what is left (daemon, engine) by PID and removes the directory. */
  close(): Promise<void>;
}

async function stop(p: ChildProcess | null, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (p === null || p.exitCode !== null || p.signalCode !== null || p.pid === undefined) return;
  const gone = new Promise((r) => p.once('exit', r));
  try {
    process.kill(p.pid, signal);
  } catch {
    return;
  }
  await gone;
}

/**
 * The daemon's config (one service on c0, the test engine's segment allowed, no HTTP probe) and state directory in
 * `dir`, as StateDirectory= and the operations doc set them up: under the unit's user the state is owned by it and
 * the config readable by its group.
 */
export function writeGwConfig(dir: string, o: GwDaemonOptions): { config: string; stateDir: string } {
  const stateDir = join(dir, 'state');
  mkdirSync(stateDir, { mode: 0o750 });
  const config = join(dir, 'wccpd.yaml');
  writeFileSync(
    config,
    [
      'router:',
      '  address: 192.0.2.1',
      'admin:',
      '  listen: 127.0.0.1:8080',
      '  token: t',
      `stateDir: ${stateDir}`,
      'dataplane:',
      `  backend: ${o.backend}`,
      ...(o.flowsIdle !== undefined ? ['  flows:', `    idle: ${o.flowsIdle}`] : []),
      'timers:',
      '  hereIAm: 1s',
      // The test engine runs no proxy for the default HTTP probe to ask.
      'health:',
      '  http:',
      '    enabled: false',
      'services:',
      '  - id: 0',
      '    clientInterfaces: [c0]',
      `    failMode: ${o.failMode ?? 'open'}`,
      '    engines:',
      '      allow: [192.0.2.0/25]',
      '      lenientReceiveId: 0',
      ...(o.serviceLines ?? []),
      '',
    ].join('\n'),
    { mode: 0o640 },
  );
  if (o.asUnitUser === true) {
    chownSync(stateDir, UNIT_UID, UNIT_GID);
    chownSync(config, 0, UNIT_GID);
  }
  return { config, stateDir };
}

/** `ip` arguments that run `cmd` in namespace `ns` as the unit would: systemd's PATH for services (not this test's),
 * the unit's user, capabilities, NoNewPrivileges and UMask. */
export function asUnitArgs(ns: string, cmd: string): string[] {
  return [
    'netns',
    'exec',
    ns,
    'env',
    '-i',
    'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    'setpriv',
    ...unitSetprivArgs(),
    'sh',
    '-c',
    `umask ${one('UMask')} && exec ${cmd}`,
  ];
}

/** `ip` arguments that run the strict test engine in the topology's engine namespace `index` (default the first); it
 * stops by itself after `rounds` HERE_I_AMs, one a second. */
export function testEngineArgs(topo: Topology, rounds: number, index = 0): string[] {
  return [
    'netns',
    'exec',
    topo.engines[index]!,
    process.execPath,
    '--import',
    'tsx',
    join(REPO, 'test/e2e/engine-main.ts'),
    '--address',
    topo.engineAddress(index),
    '--router',
    '192.0.2.1',
    '--interval-ms',
    '1000',
    '--rounds',
    String(rounds),
  ];
}

export function startGwDaemon(topo: Topology, o: GwDaemonOptions): GwDaemon {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-gw-${process.pid}-`));
  chmodSync(dir, 0o755);
  const { config, stateDir } = writeGwConfig(dir, o);
  const wccpd = join(o.repo ?? REPO, 'bin/wccpd.js');
  const cmd = `${process.execPath} ${wccpd} --config ${config}`;
  const args =
    o.asUnitUser === true
      ? asUnitArgs(topo.gw, cmd)
      : ['netns', 'exec', topo.gw, process.execPath, wccpd, '--config', config];
  const output: string[] = [];
  let daemon: ChildProcess;
  let exited: Promise<number | string | null>;
  const start = (): void => {
    const child = spawn('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout?.on('data', (d: Buffer) => output.push(d.toString()));
    child.stderr?.on('data', (d: Buffer) => output.push(d.toString()));
    exited = new Promise((r) => child.once('exit', (code, sig) => r(code ?? sig)));
    daemon = child;
  };
  start();
  const engines = new Map<number, ChildProcess>();
  return {
    output,
    config,
    stateDir,
    get exited() {
      return exited;
    },
    // `ip netns exec` execs the command, and `sh -c 'exec ...'` too: the spawned PID is the daemon's.
    get pid() {
      return daemon.pid ?? 0;
    },
    start() {
      if (daemon.exitCode === null && daemon.signalCode === null) throw new Error('the daemon still runs');
      start();
    },
    api: (path) => {
      try {
        return topo.inGw(`curl -s --max-time 10 http://127.0.0.1:8080${path}`);
      } catch {
        return '';
      }
    },
    startEngine(rounds = 300, index = 0) {
      engines.set(index, spawn('ip', testEngineArgs(topo, rounds, index), { stdio: 'ignore' }));
    },
    stopEngine: async (index = 0) => {
      await stop(engines.get(index) ?? null);
      engines.delete(index);
    },
    close: async () => {
      for (const e of engines.values()) await stop(e, 'SIGKILL');
      await stop(daemon, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A describe block's gateway: its topology and the daemon a test started there (closed after the block). */
export interface GwSuite {
  readonly topo: Topology;
  daemon: GwDaemon | null;
}

/**
 * The gateway of the describe block it is called in: topology `name` with one engine namespace, up before the block's
 * tests; after them the daemon a test left in `daemon` is closed (by PID) and the topology taken down.
 */
export function gwSuite(name: string): GwSuite {
  const gw: GwSuite = { topo: new Topology(name, 1), daemon: null };
  before(async () => {
    await gw.topo.up();
  });
  after(async () => {
    try {
      await gw.daemon?.close();
    } finally {
      await gw.topo.down();
    }
  });
  return gw;
}

/**
 * Starts the daemon in the suite's gateway (it becomes `gw.daemon`) and its test engine for `rounds` HERE_I_AMs, and
 * waits until that engine holds every bucket of service 0 in the API's view; a failure quotes the daemon's output.
 */
export async function startWithEngine(gw: GwSuite, o: GwDaemonOptions, rounds = 60): Promise<GwDaemon> {
  const daemon = startGwDaemon(gw.topo, o);
  gw.daemon = daemon;
  daemon.startEngine(rounds);
  await waitFor(
    'the engine usable with every bucket',
    async () => {
      const v = JSON.parse(daemon.api('/api/v1/services/0/engines') || '{}') as { engines?: { buckets: number }[] };
      return v.engines?.[0]?.buckets === 256 ? true : null;
    },
    60_000,
  ).catch((e: Error) => {
    throw new Error(`${e.message}\n${daemon.output.join('')}`);
  });
  return daemon;
}
