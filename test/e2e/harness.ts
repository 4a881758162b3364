// End-to-end harness: the real daemon (src/cli/wccpd.ts) in the lab's gateway namespace, its HTTP API reached with
// curl inside that namespace, wccpctl run there too, captures of UDP 2048 on br-eng read by tshark, and strict test
// engines (test/e2e/engine-main.ts) in engine namespaces. Every process is spawned through the lab, so destroy()
// kills it by PID.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BucketsView, EnginesView, StatusView, WhichView } from '../../src/admin/api-types.js';
import { NFT_FAMILY, NFT_TABLE, TABLE_BASE } from '../../src/dataplane/kernel/names.js';
import { bucketMap } from '../../src/dataplane/kernel/rules.js';
import { haveCommand, isRoot, need } from '../helpers/require.js';
import { complaints, field, parseTsharkJson, type TsharkPacket } from '../helpers/tshark.js';
import { ROUTER_ADDRESS, type Lab, type LabProcess } from '../lab/lab.js';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const WCCPD = join(REPO, 'src/cli/wccpd.ts');
export const WCCPCTL = join(REPO, 'src/cli/wccpctl.ts');
export const ENGINE_MAIN = join(REPO, 'test/e2e/engine-main.ts');
export const CLEANUP = join(REPO, 'systemd/wccpd-cleanup');
// Absolute, so processes started in a namespace do not depend on the working directory.
const TSX = import.meta.resolve('tsx');
export const ADMIN_PORT = 8080;
export const API = `http://127.0.0.1:${ADMIN_PORT}`;
export const TOKEN = `e2e-${process.pid}`;

/** WCCPv2 message type codes as tshark prints them in `wccp.message`. */
export const MSG = { HERE_I_AM: 10, I_SEE_YOU: 11, REDIRECT_ASSIGN: 12, REMOVAL_QUERY: 13 } as const;

export const skipE2e = need(
  isRoot &&
    haveCommand('squid') &&
    haveCommand('nft') &&
    haveCommand('tshark') &&
    haveCommand('tcpdump') &&
    haveCommand('curl'),
  'root with squid, nft, tshark, tcpdump and curl (end-to-end lab)',
);

export interface DaemonConfig {
  hereIAm?: string;
  failMode?: 'open' | 'closed';
  lenientReceiveId?: number;
  /** Sub-directory of lab.dir for the persisted state (a new name = a fresh start). */
  stateName?: string;
  /** false: turn the default HTTP probe off (test engines run no proxy on port 3128). */
  probes?: boolean;
  /** admin.hosts: names the admin server answers besides 127.0.0.1:8080 (e.g. 127.0.0.1 on any port, through a relay).
   * */
  adminHosts?: readonly string[];
}

export interface LabConfig {
  /** Sub-directory of lab.dir for the persisted state (default `state`). */
  readonly stateName?: string;
  /** admin.hosts: names the admin server answers besides 127.0.0.1:8080. */
  readonly adminHosts?: readonly string[];
  /** Top-level lines after the data plane's (timers, health, warmup, ...). */
  readonly top?: readonly string[];
  /** The lines under `services:`. */
  readonly services: readonly string[];
}

/**
 * A wccpd config in the lab dir, `<name>.yaml`: the router on br-eng, the admin API on 127.0.0.1:8080 with TOKEN, the
 * state in lab.dir, the nft data plane, then the given top-level and service lines. Returns its path.
 */
export function writeLabConfig(lab: Lab, name: string, c: LabConfig): string {
  const stateDir = join(lab.dir, c.stateName ?? 'state');
  mkdirSync(stateDir, { recursive: true });
  const path = join(lab.dir, `${name}.yaml`);
  writeFileSync(
    path,
    [
      'router:',
      `  address: ${ROUTER_ADDRESS}`,
      'admin:',
      `  listen: 127.0.0.1:${ADMIN_PORT}`,
      `  token: ${TOKEN}`,
      ...(c.adminHosts ? [`  hosts: [${c.adminHosts.join(', ')}]`] : []),
      `stateDir: ${stateDir}`,
      'dataplane:',
      '  backend: nft',
      ...(c.top ?? []),
      'services:',
      ...c.services,
      '',
    ].join('\n'),
  );
  return path;
}

/** Writes a wccpd config with one service 0 on c0 into the lab dir and returns its path. */
export function writeConfig(lab: Lab, name: string, c: DaemonConfig = {}): string {
  return writeLabConfig(lab, name, {
    stateName: c.stateName,
    adminHosts: c.adminHosts,
    top: [
      'timers:',
      `  hereIAm: ${c.hereIAm ?? '10s'}`,
      ...(c.probes === false ? ['health:', '  http:', '    enabled: false'] : []),
    ],
    services: [
      '  - id: 0',
      `    failMode: ${c.failMode ?? 'open'}`,
      '    clientInterfaces: [c0]',
      '    engines:',
      '      allow: [192.0.2.0/24]',
      `      lenientReceiveId: ${c.lenientReceiveId ?? 2}`,
    ],
  });
}

export interface HttpAnswer {
  status: number;
  body: string;
}

/** One HTTP request to the admin API from inside the gateway namespace. */
export async function http(lab: Lab, method: 'GET' | 'POST', path: string, token?: string): Promise<HttpAnswer> {
  const args = ['-sS', '--noproxy', '*', '--max-time', '3', '-X', method, '-w', '\n%{http_code}'];
  if (token !== undefined) args.push('-H', `Authorization: Bearer ${token}`);
  if (method === 'POST') args.push('-H', 'Content-Type: application/json', '--data', '{}');
  args.push(`${API}/api/v1/${path}`);
  const r = await lab.exec(lab.ns.gw, 'curl', args, { allowFail: true, timeoutMs: 5000 });
  const cut = r.stdout.lastIndexOf('\n');
  const status = Number(r.stdout.slice(cut + 1));
  return { status: Number.isFinite(status) ? status : 0, body: r.stdout.slice(0, Math.max(cut, 0)) };
}

export async function getJson<T>(lab: Lab, path: string): Promise<T> {
  const r = await http(lab, 'GET', path);
  assert.equal(r.status, 200, `GET /api/v1/${path}: HTTP ${r.status} ${r.body.slice(0, 300)}`);
  return JSON.parse(r.body) as T;
}

export const getBuckets = (lab: Lab): Promise<BucketsView> => getJson<BucketsView>(lab, 'services/0/buckets');
export const getEngines = (lab: Lab): Promise<EnginesView> => getJson<EnginesView>(lab, 'services/0/engines');
export const getStatus = (lab: Lab): Promise<StatusView> => getJson<StatusView>(lab, 'status');

/** GET services/0/which for many addresses with one curl process (one JSON body per line; an error body as it came). */
export async function whichMany(lab: Lab, addresses: readonly string[]): Promise<WhichView[]> {
  const args = ['-sS', '--noproxy', '*', '--max-time', '3', '-w', '\n'];
  for (const a of addresses) args.push(`${API}/api/v1/services/0/which?ip=${a}`);
  const r = await lab.exec(lab.ns.gw, 'curl', args, { timeoutMs: 30_000 });
  const views = r.stdout
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as WhichView);
  assert.equal(views.length, addresses.length, `which: ${views.length} answers for ${addresses.length} addresses`);
  return views;
}

/** `wccpctl --json which IP`, run in the gateway namespace, as an admin would. */
export async function wccpctlWhich(lab: Lab, address: string): Promise<WhichView> {
  const r = await lab.exec(
    lab.ns.gw,
    process.execPath,
    ['--import', TSX, WCCPCTL, '--url', API, '--json', 'which', address],
    { timeoutMs: 15_000, allowFail: true },
  );
  if (r.code !== 0) throw new Error(`wccpctl which ${address}: exit ${r.code}: ${r.stderr.trim()}`);
  return JSON.parse(r.stdout) as WhichView;
}

/** An engine's flag words from /engines (EngineView.flagsText), asserting the contract's shape. */
export function flagsText(e: { address: string; flagsText?: readonly string[] }): readonly string[] {
  assert.ok(
    Array.isArray(e.flagsText),
    `engine ${e.address} in /engines has no flagsText list (EngineView in ` +
      `src/admin/api-types.ts): ${JSON.stringify(e).slice(0, 400)}`,
  );
  return e.flagsText;
}

/** Number of buckets per engine address (null = unassigned / bypass). */
export function shares(buckets: ReadonlyArray<string | null>): Map<string | null, number> {
  const m = new Map<string | null, number>();
  for (const b of buckets) m.set(b, (m.get(b) ?? 0) + 1);
  return m;
}

export function describeShares(buckets: ReadonlyArray<string | null>): string {
  return [...shares(buckets)].map(([k, v]) => `${k ?? 'none'}=${v}`).join(' ');
}

/** A table change as wccpd logged it: its own time for it (the API, polled through curl, lags on a busy machine). */
export interface LoggedTableChange {
  readonly time: number;
  readonly moved: number;
  readonly reason: string;
}

/** The table changes that moved buckets, from the daemon's JSON log lines, oldest first. */
export function loggedTableChanges(daemon: Daemon): LoggedTableChange[] {
  const out: LoggedTableChange[] = [];
  for (const line of daemon.proc.lines()) {
    let j: { event?: string; moved?: number; time?: number; reason?: string };
    try {
      j = JSON.parse(line) as typeof j;
    } catch {
      continue;
    }
    if (j.event === 'table' && (j.moved ?? 0) > 0 && j.time !== undefined)
      out.push({ time: j.time, moved: j.moved ?? 0, reason: j.reason ?? '' });
  }
  return out;
}

/** How long each startDaemon waited for the API (ms), for reports. */
export const startMs: number[] = [];

export interface Daemon {
  readonly proc: LabProcess;
  /** SIGTERM, bounded wait; resolves with the exit code (null after a signal). */
  terminate(): Promise<number | null>;
  /** SIGKILL (a crash), resolves once it is gone. */
  kill(): Promise<void>;
}

/** Starts wccpd in the gateway namespace and waits until its API answers (bounded). */
export async function startDaemon(lab: Lab, configPath: string): Promise<Daemon> {
  const proc = lab.spawn(lab.ns.gw, process.execPath, ['--import', TSX, WCCPD, '--config', configPath]);
  const t0 = Date.now();
  try {
    await waitUntil(
      async () => {
        if (!proc.running()) throw new Error(`wccpd exited at start (code ${String(await proc.exited)})`);
        return (await http(lab, 'GET', 'status')).status === 200;
      },
      (ok) => ok,
      { timeoutMs: 30_000, intervalMs: 100, what: `wccpd API on ${API} in ${lab.ns.gw}` },
    );
  } catch (e) {
    throw new Error(`${(e as Error).message}; wccpd output:\n${proc.output().slice(-3000)}`);
  }
  startMs.push(Date.now() - t0);
  const waitExit = async (ms: number): Promise<number | null> => {
    const timeout = new Promise<'timeout'>((r) => {
      const t = setTimeout(() => r('timeout'), ms);
      t.unref();
    });
    const code = await Promise.race([proc.exited, timeout]);
    if (code === 'timeout')
      throw new Error(
        `wccpd (pid ${proc.pid}) still runs ${ms} ms after the signal; output:\n${proc.output().slice(-2000)}`,
      );
    return code;
  };
  return {
    proc,
    async terminate() {
      process.kill(proc.pid, 'SIGTERM');
      return waitExit(10_000);
    },
    async kill() {
      process.kill(proc.pid, 'SIGKILL');
      await waitExit(5_000);
    },
  };
}

/** Starts a strict WCCP test engine in engine i's namespace, sending HERE_I_AM every intervalMs. */
export function startTestEngine(lab: Lab, i: number, intervalMs: number): LabProcess {
  return lab.spawn(lab.engineNs(i), process.execPath, [
    '--import',
    TSX,
    ENGINE_MAIN,
    '--address',
    lab.engineAddress(i),
    '--router',
    ROUTER_ADDRESS,
    '--interval-ms',
    String(intervalMs),
  ]);
}

/** Polls fn until pred holds; resolves with the value and the wall-clock time it was seen. Bounded by timeoutMs. */
export async function waitUntil<T>(
  fn: () => Promise<T>,
  pred: (v: T) => boolean,
  o: { timeoutMs: number; intervalMs?: number; what: string },
): Promise<{ value: T; at: number }> {
  const deadline = Date.now() + o.timeoutMs;
  let last: T | undefined;
  let failed: unknown = null;
  for (;;) {
    // A read that fails (the API answering slowly on a loaded machine) is one more "not yet", not the verdict.
    try {
      last = await fn();
      failed = null;
    } catch (e) {
      failed = e;
    }
    const at = Date.now();
    if (failed === null && pred(last as T)) return { value: last as T, at };
    if (at > deadline) {
      const seen =
        failed !== null
          ? `last read failed: ${failed instanceof Error ? failed.message : String(failed)}`
          : `last: ${JSON.stringify(last)?.slice(0, 600)}`;
      throw new Error(`timed out after ${o.timeoutMs} ms waiting for ${o.what}; ${seen}`);
    }
    await new Promise((r) => setTimeout(r, o.intervalMs ?? 100));
  }
}

export interface Capture {
  readonly file: string;
  /** Stops tcpdump (by PID) and returns what tshark reads in the file. */
  stop(): Promise<CapturedPacket[]>;
}

export interface CapturedPacket {
  /** Wall-clock milliseconds. */
  readonly at: number;
  readonly src: string;
  readonly dst: string;
  /** wccp.message (10 HERE_I_AM, 11 I_SEE_YOU, 12 REDIRECT_ASSIGN, 13 REMOVAL_QUERY), or 0 if tshark saw no WCCP. */
  readonly message: number;
  readonly packet: TsharkPacket;
}

/**
 * tcpdump on br-eng in the gateway, UDP 2048 only, bounded by packet count. Immediate mode and packet-buffered output:
 * otherwise the last second of packets can sit in the kernel's capture block when tcpdump is stopped.
 */
export async function startCapture(lab: Lab, name: string): Promise<Capture> {
  const file = join(lab.dir, `${name}.pcap`);
  const p = lab.spawn(lab.ns.gw, 'tcpdump', [
    '-i',
    'br-eng',
    '--immediate-mode',
    '-U',
    '-Z',
    'root',
    '-c',
    '20000',
    '-w',
    file,
    'udp port 2048',
  ]);
  await waitUntil(
    async () => p.output(),
    (o) => o.includes('listening on') || !p.running(),
    { timeoutMs: 5000, intervalMs: 20, what: 'tcpdump to listen' },
  );
  assert.ok(p.running(), `tcpdump did not start: ${p.output()}`);
  return {
    file,
    async stop() {
      await p.stop(2000);
      return readCapture(file).map((packet) => ({
        at: Number(field(packet, 'frame.time_epoch') ?? 0) * 1000,
        src: field(packet, 'ip.src') ?? '',
        dst: field(packet, 'ip.dst') ?? '',
        message: Number(field(packet, 'wccp.message') ?? 0),
        packet,
      }));
    },
  };
}

/**
 * tshark over a capture taken on the sending host. The daemon's datagrams leave through the kernel with checksum
 * offload (veth/bridge): the UDP checksum is not filled in yet where tcpdump sees them, so tshark would flag every one.
 * The kernel owns that checksum, not wccpd, so it is not checked here; the IP header checksum and every WCCP field are.
 */
function readCapture(file: string): TsharkPacket[] {
  const out = execFileSync(
    'tshark',
    ['-r', file, '-T', 'json', '--no-duplicate-keys', '-o', 'ip.check_checksum:TRUE', '-o', 'udp.check_checksum:FALSE'],
    { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return parseTsharkJson(out);
}

/** Asserts tshark found nothing wrong in each packet (no malformed packet, no expert warning or error). */
export function assertClean(packets: readonly CapturedPacket[], what: string): void {
  const bad = packets.filter((p) => p.packet.malformed || p.packet.experts.length > 0);
  assert.equal(
    bad.length,
    0,
    `${bad.length} of ${packets.length} ${what} have tshark complaints: ` +
      bad
        .slice(0, 3)
        .map((p) => `#${p.packet.number} ${p.src}->${p.dst}: ${complaints(p.packet)}`)
        .join(' | '),
  );
}

/**
 * The gateway's kernel state that belongs to wccpd (src/dataplane/kernel/names.ts): its nft tables, ip rules at
 * priority 2048 with mask 0xfff80000, routes in tables 2048000001-2048008191.
 */
export async function ourKernelState(lab: Lab): Promise<{ tables: string[]; rules: string[]; routes: string[] }> {
  const nft = await lab.exec(lab.ns.gw, 'nft', ['list', 'tables']);
  const rules = await lab.exec(lab.ns.gw, 'ip', ['-4', 'rule', 'show']);
  const routes = await lab.exec(lab.ns.gw, 'ip', ['-4', 'route', 'show', 'table', 'all']);
  return {
    tables: nft.stdout.split('\n').filter((l) => /\bwccpd/.test(l)),
    rules: rules.stdout.split('\n').filter((l) => /^2048:.*\/0xfff80000 lookup 2048\d{6}\b/.test(l)),
    routes: routes.stdout.split('\n').filter((l) => {
      const t = /\btable (\d+)\b/.exec(l);
      return t !== null && Number(t[1]) > 2_048_000_000 && Number(t[1]) <= 2_048_008_191;
    }),
  };
}

/**
 * The bucket -> engine table the gateway's kernel applies for a hash service (nft backend): each bucket's verdict in
 * the service's bucket map, and for an engine slot's claim chain the engine that slot's routing table sends to; null
 * for a bucket forwarded normally or refused. The API shows a table as soon as wccpd decides it; the kernel has it once
 * the data plane applied it.
 */
export async function kernelBuckets(lab: Lab, service: number): Promise<(string | null)[]> {
  const r = await lab.exec(lab.ns.gw, 'nft', ['-j', 'list', 'map', NFT_FAMILY, NFT_TABLE, bucketMap(service)]);
  type Verdict = Record<string, { target?: string }>;
  const parsed = JSON.parse(r.stdout) as { nftables: { map?: { elem?: [string, Verdict][] } }[] };
  const elements = parsed.nftables.find((o) => o.map !== undefined)?.map?.elem ?? [];
  const engineOfSlot = new Map<number, string | null>();
  const buckets: (string | null)[] = Array.from({ length: 256 }, () => null);
  for (const [key, verdict] of elements) {
    // The key is a meta priority: `none` is 0, otherwise `0:<hex>`.
    const bucket = key === 'none' ? 0 : parseInt(key.split(':')[1] ?? '', 16);
    const slot = /^claim_(\d+)$/.exec(Object.values(verdict)[0]?.target ?? '');
    if (slot === null || !(bucket >= 0 && bucket < 256)) continue;
    const s = Number(slot[1]);
    if (!engineOfSlot.has(s)) {
      const route = await lab.exec(lab.ns.gw, 'ip', ['-j', '-4', 'route', 'show', 'table', String(TABLE_BASE + s)]);
      const routes = JSON.parse(route.stdout || '[]') as { dst?: string; gateway?: string }[];
      engineOfSlot.set(s, routes.find((x) => x.dst === 'default')?.gateway ?? null);
    }
    buckets[bucket] = engineOfSlot.get(s) ?? null;
  }
  return buckets;
}
