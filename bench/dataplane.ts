// The data path measured side by side in one run: direct forwarding, a static policy-route redirect (the ceiling for
// L2 redirection), wccpd's ingress, nft and userland backends, in the network-namespace lab, with nginx as the
// server on both the origin and the engine so that neither is the bottleneck. Prints one table with medians over
// the rounds and the ratios to the static redirect and to direct; the same for IPv6 connections (direct6, static6,
// static6-ct, nft6, ingress6) in dual-stack labs. See docs/performance.md.
// Run as root: npx tsx bench/dataplane.ts [--quick] [--rounds N] [--seconds S] [--paths
// direct,static,static-ct,ingress,nft,nft-untracked,userland,direct6,...] [--steps rps,cps,...] [--perf DIR]
import { execFileSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { cpus, release } from 'node:os';
import { join } from 'node:path';
import { createLab, urlHost, type Lab, type LabProcess } from '../test/lab/lab.js';
import { checkArgs, cleanUpOnClosedOutput } from './cli.js';
import type { Cli } from './cli.js';
import { BenchError, PERF_PERIOD_NS, intFlag, runIperf, runLatency, runWrk, type NsExec } from './dataplane-measure.js';
import {
  directPath,
  IPV6_PATHS,
  nftPath,
  ingressPath,
  staticConntrackPath,
  staticPath,
  userlandPath,
  type DataPath,
  type PathKey,
} from './dataplane-paths.js';
import { median, renderTable, type Cell, type Measure } from './dataplane-report.js';
import { nginxCommand } from './servers/nginx.js';

const CLI: Cli = {
  name: 'bench/dataplane',
  usage: `usage (root): npx tsx bench/dataplane.ts [--quick] [--rounds N] [--seconds S] [--paths P,...] [--steps M,...]
  [--perf DIR] [--state]
Paths: direct, static, static-ct, ingress, nft, nft-untracked, userland, and the same for IPv6 connections: direct6,
static6, static6-ct, nft6, ingress6 (all by default; the labs are dual-stack when one is chosen), and two A/A checks of the
lab arrangement, only when named: direct-twin (direct again, in a lab of its own) and static-twin (the static route
in a lab of its own); their ratios to direct and static are printed under "## A/A" and should be 1.00 within noise.
--steps runs chosen measures (all by default; an unknown one is refused with the list). --quick: 1 round of 3 s;
otherwise --rounds 1..50 (3) of --seconds 1..60 (5). --perf DIR: a system-wide perf profile of each measurement in
DIR. --state: before each measurement, what earlier ones left in the path's lab (TIME_WAIT sockets in the origin
and the engine, conntrack entries in the gateway and the engine) to stderr. A figure measured while processes outside
the bench used more than a tenth of its time is marked on stderr, and the tables give the medians without those
pairs beside the medians of all (docs/performance.md).`,
  values: ['--rounds', '--seconds', '--paths', '--steps', '--perf'],
  switches: ['--quick', '--state'],
};
const TARGET = '198.51.100.80'; // one origin address; every bucket goes to engine 1 anyway
const TARGET6 = '2001:db8:5100::80'; // the IPv6 paths' (the dual-stack lab's origin prefix)
const IPERF_PORT = 5201;
// Unrelated traffic: ports no service redirects, served by the origin on every path.
const UNRELATED_PORT = 8080;
const UNRELATED_IPERF = 5202;
/**
 * The paths unrelated traffic is measured on: without wccpd, with policy rules alone (the static redirect's), with
 * conntrack alone, and with wccpd's nft rules.
 */
const UNRELATED_PATHS: readonly PathKey[] = [
  'direct',
  'static',
  'static-ct',
  'nft',
  'nft-untracked',
  'ingress',
  'direct-twin',
  'static-twin',
  'direct6',
  'static6',
  'static6-ct',
  'nft6',
  'ingress6',
];
/** The pause between a path's install (and its check) and its measurement. */
const SETTLE_MS = 500;
const LOAD_CPU = 0; // wrk, iperf3 client, curl
const SERVER_CPU = 1; // nginx and iperf3 servers

interface Settings {
  readonly rounds: number;
  readonly seconds: number;
  readonly connections: number;
  readonly latencySamples: number;
  readonly paths: readonly PathKey[];
  readonly quick: boolean;
  /** The steps to run (STEPS' names); all by default. */
  readonly steps: readonly string[];
  /** Where each measurement's system-wide perf profile goes (none: no profiling). */
  readonly perfDir?: string;
  /** Print what earlier measurements left in the path's lab before each measurement. */
  readonly state: boolean;
}

/**
 * The comma list after `flag`, each one of `all` (in `all`'s order), or `byDefault` (all) when the flag is absent.
 */
function listFlag<T extends string>(
  argv: readonly string[],
  flag: string,
  all: readonly T[],
  byDefault: readonly T[] = all,
): readonly T[] {
  const at = argv.indexOf(flag);
  if (at < 0) return byDefault;
  const want = (argv[at + 1] ?? '').split(',').filter(Boolean);
  if (want.length === 0 || want.some((x) => !all.includes(x as T)))
    throw new BenchError(`${flag} takes a comma list of ${all.join(', ')}; got "${argv[at + 1] ?? ''}"`);
  return all.filter((x) => want.includes(x));
}

function parseArgs(argv: readonly string[]): Settings {
  checkArgs(CLI, argv);
  const quick = argv.includes('--quick');
  const usual: PathKey[] = [
    'direct',
    'static',
    'static-ct',
    'nft',
    'nft-untracked',
    'userland',
    'ingress',
    ...IPV6_PATHS,
  ];
  const paths = listFlag(argv, '--paths', [...usual, 'direct-twin', 'static-twin'], usual);
  const steps = listFlag(
    argv,
    '--steps',
    STEPS.map((x) => x.name),
  );
  // checkArgs has refused a --perf without its value.
  const k = argv.indexOf('--perf');
  const perfDir = k >= 0 ? argv[k + 1] : undefined;
  const state = argv.includes('--state');
  const base = quick
    ? { rounds: 1, seconds: 3, connections: 32, latencySamples: 300, paths, quick, steps, perfDir, state }
    : { rounds: 3, seconds: 5, connections: 32, latencySamples: 1000, paths, quick, steps, perfDir, state };
  // More, shorter rounds give steadier medians on a machine that other work shares.
  return {
    ...base,
    rounds: intFlag(argv, '--rounds', 1, 50) ?? base.rounds,
    seconds: intFlag(argv, '--seconds', 1, 60) ?? base.seconds,
  };
}

const MEASURES: readonly Measure[] = [
  { key: 'rps', label: 'requests/s, keep-alive', unit: 'req/s', digits: 0, higherIsBetter: true },
  { key: 'cps', label: 'new connections/s, Connection: close', unit: 'conn/s', digits: 0, higherIsBetter: true },
  { key: 'gbps', label: 'throughput, 1 TCP flow (iperf3)', unit: 'Gbit/s', digits: 2, higherIsBetter: true },
  { key: 'latMed', label: 'latency, new connection + request, median', unit: 'ms', digits: 3, higherIsBetter: false },
  { key: 'latP99', label: 'latency, new connection + request, p99', unit: 'ms', digits: 3, higherIsBetter: false },
  {
    key: 'urps',
    label: `unrelated (port ${UNRELATED_PORT}) requests/s`,
    unit: 'req/s',
    digits: 0,
    higherIsBetter: true,
  },
  {
    key: 'ucps',
    label: `unrelated (port ${UNRELATED_PORT}) new connections/s`,
    unit: 'conn/s',
    digits: 0,
    higherIsBetter: true,
  },
  {
    key: 'ugbps',
    label: `unrelated 1 TCP flow (iperf3 ${UNRELATED_IPERF})`,
    unit: 'Gbit/s',
    digits: 2,
    higherIsBetter: true,
  },
];

/** One paired ratio: `path / against` per round, with the issue's target where it sets one. */
interface Comparison {
  readonly measure: string;
  readonly path: PathKey;
  readonly against: PathKey;
  readonly atLeast?: number;
}

/**
 * Issue 15's targets, checked on the ratio of each round's two figures (the two paths run one after the other in the
 * same step, so a pair shares the machine's state; the median of the pairs drifts less than the ratio of two medians).
 */
const TARGETS: readonly Comparison[] = [
  ...['rps', 'cps', 'gbps'].flatMap((measure) => [
    { measure, path: 'ingress' as const, against: 'static-ct' as const, atLeast: 0.99 },
    { measure, path: 'ingress' as const, against: 'static' as const, atLeast: 0.97 },
    { measure, path: 'nft' as const, against: 'static-ct' as const, atLeast: 0.99 },
    { measure, path: 'nft' as const, against: 'static' as const, atLeast: 0.97 },
  ]),
  // IPv6 (issue 36): the same ratios against the IPv6 static route.
  ...['rps', 'cps', 'gbps'].flatMap((measure) => [
    { measure, path: 'ingress6' as const, against: 'static6-ct' as const, atLeast: 0.99 },
    { measure, path: 'ingress6' as const, against: 'static6' as const, atLeast: 0.97 },
    { measure, path: 'nft6' as const, against: 'static6-ct' as const, atLeast: 0.99 },
    { measure, path: 'nft6' as const, against: 'static6' as const, atLeast: 0.97 },
  ]),
  // Unrelated traffic: wccpd adds nothing to a gateway without it (ingress: no conntrack, no ip rule); the nft
  // backend adds nothing to what conntrack costs, and with `dataplane.conntrack: services` nothing.
  ...['urps', 'ucps', 'ugbps'].flatMap((measure) => [
    { measure, path: 'ingress' as const, against: 'direct' as const, atLeast: 0.99 },
    { measure, path: 'nft' as const, against: 'static-ct' as const, atLeast: 0.99 },
    { measure, path: 'nft-untracked' as const, against: 'direct' as const, atLeast: 0.99 },
    { measure, path: 'ingress6' as const, against: 'direct6' as const, atLeast: 0.99 },
    { measure, path: 'nft6' as const, against: 'static6-ct' as const, atLeast: 0.99 },
  ]),
];

/**
 * What the two things any redirect of this kind needs cost before wccpd adds anything, measured the same way:
 * conntrack (stickiness) on redirected traffic, and policy rules (the redirect's next hop) on unrelated traffic,
 * which every forwarded packet meets once any `ip rule` exists. And wccpd with `conntrack: services` beside the
 * static redirect's rules alone.
 */
const FLOORS: readonly Comparison[] = [
  ...['rps', 'cps', 'gbps'].flatMap((measure) => [
    { measure, path: 'static-ct' as const, against: 'static' as const },
    { measure, path: 'nft' as const, against: 'ingress' as const },
    { measure, path: 'static6-ct' as const, against: 'static6' as const },
    { measure, path: 'static6' as const, against: 'static' as const },
  ]),
  ...['urps', 'ucps', 'ugbps'].flatMap((measure) => [
    { measure, path: 'static' as const, against: 'direct' as const },
    { measure, path: 'static-ct' as const, against: 'direct' as const },
    { measure, path: 'nft-untracked' as const, against: 'static' as const },
  ]),
];

/**
 * A/A: the same path in two labs, paired as the bench pairs paths; a ratio away from 1.00 is the lab arrangement's
 * (which lab, what ran in it before), not the path's. And ingress against the twins, each in a lab of its own.
 */
const AA: readonly Comparison[] = [
  ...['rps', 'cps', 'gbps', 'urps', 'ucps', 'ugbps'].map((measure) => ({
    measure,
    path: 'static-twin' as const,
    against: 'static' as const,
  })),
  ...['urps', 'ucps', 'ugbps'].map((measure) => ({
    measure,
    path: 'direct-twin' as const,
    against: 'direct' as const,
  })),
  ...['rps', 'cps', 'gbps'].map((measure) => ({ measure, path: 'ingress' as const, against: 'static-twin' as const })),
  ...['urps', 'ucps', 'ugbps'].map((measure) => ({
    measure,
    path: 'ingress' as const,
    against: 'direct-twin' as const,
  })),
];

function missingTools(): string[] {
  const tools = ['wrk', 'iperf3', 'curl', 'taskset', 'nft', 'ip', 'nginx'];
  return tools.filter((t) => {
    try {
      execFileSync('sh', ['-c', `command -v ${t}`], { stdio: 'ignore' });
      return false;
    } catch {
      return true;
    }
  });
}

async function waitListening(lab: Lab, ns: string, ports: readonly number[], who: LabProcess[]): Promise<void> {
  for (let i = 0; i < 100; i++) {
    for (const p of who)
      if (!p.running()) throw new BenchError(`${p.command} exited at start:\n${p.output().slice(-1000)}`);
    const ss = await lab.exec(ns, 'ss', ['-Htln'], { allowFail: true, timeoutMs: 2000 });
    if (ports.every((port) => new RegExp(`:${port}\\b`).test(ss.stdout))) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new BenchError(`servers in ${ns} did not listen on ${ports.join(', ')} within 5 s`);
}

interface Servers {
  readonly iperf: Record<string, LabProcess>;
  /** The origin's iperf3 server on UNRELATED_IPERF. */
  readonly unrelatedIperf: LabProcess;
}

/**
 * nginx + iperf3 server in the origin (port 80) and in engine 1 (3129, where the lab's engine rule sends port 80); in a
 * dual-stack lab on both families (iperf3 -s takes both anyway).
 */
async function startServers(lab: Lab): Promise<Servers> {
  const pin = ['-c', String(SERVER_CPU)];
  const iperfArgs = [...pin, 'iperf3', '-s', '-p', String(IPERF_PORT), '--forceflush'];
  const ipv6 = lab.ipv6;
  const o = nginxCommand({ name: 'origin', port: 80, dir: join(lab.dir, 'nginx-origin'), ipv6 });
  const u = nginxCommand({ name: 'origin', port: UNRELATED_PORT, dir: join(lab.dir, 'nginx-origin-unrelated'), ipv6 });
  const e = nginxCommand({ name: 'engine1', port: 3129, dir: join(lab.dir, 'nginx-engine1'), ipv6 });
  const originProcs = [
    lab.spawn(lab.ns.origin, 'taskset', [...pin, o.cmd, ...o.args]),
    lab.spawn(lab.ns.origin, 'taskset', iperfArgs),
    lab.spawn(lab.ns.origin, 'taskset', [...pin, u.cmd, ...u.args]),
    lab.spawn(lab.ns.origin, 'taskset', [...pin, 'iperf3', '-s', '-p', String(UNRELATED_IPERF), '--forceflush']),
  ];
  const engineNs = lab.engineNs(1);
  const engineProcs = [
    lab.spawn(engineNs, 'taskset', [...pin, e.cmd, ...e.args]),
    lab.spawn(engineNs, 'taskset', iperfArgs),
  ];
  // Intercepted iperf3 (destination unchanged, L2-forwarded here) goes to the engine's own iperf3 server.
  await lab.exec(engineNs, 'nft', ['-f', '-'], {
    input:
      'table ip wccpbench {\n chain prerouting {\n  type nat hook prerouting priority dstnat; policy accept;\n' +
      `  iifname "eth0" ip saddr != 192.0.2.0/24 tcp dport ${IPERF_PORT} redirect to :${IPERF_PORT}\n }\n}\n` +
      (ipv6
        ? 'table ip6 wccpbench {\n chain prerouting {\n  type nat hook prerouting priority dstnat; policy accept;\n' +
          `  iifname "eth0" ip6 saddr != 2001:db8:e::/64 tcp dport ${IPERF_PORT} redirect to :${IPERF_PORT}\n }\n}\n`
        : ''),
  });
  await waitListening(lab, lab.ns.origin, [80, IPERF_PORT, UNRELATED_PORT, UNRELATED_IPERF], originProcs);
  await waitListening(lab, engineNs, [3129, IPERF_PORT], engineProcs);
  return {
    iperf: { origin: originProcs[1] as LabProcess, engine1: engineProcs[1] as LabProcess },
    unrelatedIperf: originProcs[3] as LabProcess,
  };
}

const accepted = (p: LabProcess | undefined): number =>
  p === undefined ? 0 : p.lines().filter((l) => l.includes('Accepted connection')).length;

function cellOf(cells: Map<string, Map<string, Cell>>, measure: string, path: string): Cell {
  let byPath = cells.get(measure);
  if (byPath === undefined) cells.set(measure, (byPath = new Map()));
  let c = byPath.get(path);
  if (c === undefined) byPath.set(path, (c = { values: [], errors: 0 }));
  return c;
}

/** Per measure, per path: round -> value, for the paired ratios of the targets. */
type ByRound = Map<string, Map<string, Map<number, number>>>;

function recordRound(byRound: ByRound, measure: string, path: string, round: number, value: number): void {
  let byPath = byRound.get(measure);
  if (byPath === undefined) byRound.set(measure, (byPath = new Map()));
  let rounds = byPath.get(path);
  if (rounds === undefined) byPath.set(path, (rounds = new Map()));
  rounds.set(round, value);
}

/** A lab with its servers running. */
interface LabUp {
  readonly lab: Lab;
  readonly exec: NsExec;
  readonly servers: Servers;
}

interface Run {
  /** The lab a path runs in: its own gateway for direct, the shared one for the others. */
  readonly on: (path: DataPath) => LabUp;
  /** The network namespaces of this run's labs (`net:[inode]`): whatever runs in them is the bench's. */
  readonly ours: ReadonlySet<string>;
  readonly s: Settings;
  readonly cells: Map<string, Map<string, Cell>>;
  readonly byRound: ByRound;
  readonly retransmits: Map<string, number>;
}

/** One measurement of one path: what it records, and how. Unrelated steps run on UNRELATED_PATHS only. */
interface Step {
  readonly name: string;
  readonly keys: readonly string[];
  readonly unrelated: boolean;
  run(ctx: StepContext): Promise<void>;
}

interface StepContext {
  readonly run: Run;
  readonly path: DataPath;
  readonly put: (measure: string, value: number, errors?: number) => void;
}

/** The origin address a path's connections go to: IPv4 or IPv6 by the path's family. */
const targetOf = (path: DataPath): string => (path.family === 6 ? TARGET6 : TARGET);
const redirectedUrl = (path: DataPath): string => `http://${urlHost(targetOf(path))}/`;
const unrelatedUrl = (path: DataPath): string => `http://${urlHost(targetOf(path))}:${UNRELATED_PORT}/`;

const wrkStep = (
  name: string,
  key: string,
  url: (path: DataPath) => string,
  close: boolean,
  unrelated: boolean,
): Step => ({
  name,
  keys: [key],
  unrelated,
  async run({ run, path, put }) {
    const { lab, exec } = run.on(path);
    const w = await runWrk(exec, {
      ns: lab.ns.client,
      cpu: LOAD_CPU,
      url: url(path),
      seconds: run.s.seconds,
      connections: run.s.connections,
      close,
    });
    put(key, w.requestsPerSecond, w.errors);
  },
});

/**
 * Sets RPS on the gateway's client-facing veth (c0) to `mask` (hex CPU mask, 0 = off): with it, every packet the
 * client sends is processed in that CPU's backlog, in the order it was sent.
 */
async function steerClientPackets(lab: Lab, mask: number): Promise<void> {
  await lab.exec(lab.ns.gw, 'sh', [
    '-c',
    `for q in /sys/class/net/c0/queues/rx-*/rps_cpus; do echo ${mask.toString(16)} > "$q"; done`,
  ]);
}

const iperfStep = (name: string, key: string, port: number, unrelated: boolean): Step => ({
  name,
  keys: [key],
  unrelated,
  async run({ run, path, put }) {
    const { s, retransmits } = run;
    const { lab, exec, servers } = run.on(path);
    const server = unrelated ? servers.unrelatedIperf : servers.iperf[path.servedBy];
    const before = accepted(server);
    // One flow must reach the gateway in order, as from a NIC (one receive queue per flow). A veth has no queue:
    // a packet waits in the backlog of the CPU that sent it, and the client sends this flow from CPU 1 too (on the
    // ACKs processed there), so its segments overtook each other between two CPUs' backlogs: ~17k spurious fast
    // retransmits per 2 s run (reordering, DSACKed; no packet lost). RPS on c0 queues them all on LOAD_CPU, in
    // order, on every path alike, only while iperf3 runs (docs/performance.md, "Method").
    await steerClientPackets(lab, 1 << LOAD_CPU);
    const r = await runIperf(exec, {
      ns: lab.ns.client,
      cpu: LOAD_CPU,
      host: targetOf(path),
      port,
      seconds: s.seconds,
    }).finally(() => steerClientPackets(lab, 0));
    if (accepted(server) === before)
      throw new BenchError(`iperf3 did not reach the ${unrelated ? 'origin' : path.servedBy} server`);
    put(key, r.gbitPerSecond);
    if (!unrelated) retransmits.set(path.label, (retransmits.get(path.label) ?? 0) + r.retransmits);
  },
});

/**
 * The steps of a round, in order. Every path runs one step before the next step starts (measure-major), so the two
 * figures of a pair are seconds apart, not minutes: this machine's speed drifts in episodes of tens of seconds.
 */
const STEPS: readonly Step[] = [
  wrkStep('rps', 'rps', redirectedUrl, false, false),
  wrkStep('cps', 'cps', redirectedUrl, true, false),
  iperfStep('gbps', 'gbps', IPERF_PORT, false),
  {
    name: 'latency',
    keys: ['latMed', 'latP99'],
    unrelated: false,
    async run({ run, path, put }) {
      const { lab, exec } = run.on(path);
      const l = await runLatency(exec, {
        ns: lab.ns.client,
        cpu: LOAD_CPU,
        url: redirectedUrl(path),
        count: run.s.latencySamples,
      });
      put('latMed', l.medianMs, l.failed);
      put('latP99', l.p99Ms, l.failed);
    },
  },
  wrkStep('urps', 'urps', unrelatedUrl, false, true),
  wrkStep('ucps', 'ucps', unrelatedUrl, true, true),
  iperfStep('ugbps', 'ugbps', UNRELATED_IPERF, true),
];

/** Installs the path, proves it (the right server answers), runs one step, removes the path. */
async function measureStep(run: Run, path: DataPath, round: number, step: Step): Promise<number | undefined> {
  const { cells } = run;
  const { lab } = run.on(path);
  const fail = (why: string): void => {
    for (const k of step.keys) cellOf(cells, k, path.key).failure = why;
  };
  const put = (measure: string, value: number, errors = 0): void => {
    const c = cellOf(cells, measure, path.key);
    c.values.push(value);
    c.errors += errors;
    recordRound(run.byRound, measure, path.key, round, value);
  };
  try {
    await path.install();
  } catch (e) {
    fail((e as Error).message.split('\n')[0] ?? 'install failed');
    return undefined;
  }
  try {
    // Redirected traffic must reach the path's server; unrelated traffic the origin, whatever the path.
    const r = await lab.curl(step.unrelated ? unrelatedUrl(path) : redirectedUrl(path), { timeoutMs: 3000 });
    const want = step.unrelated ? 'origin' : path.servedBy;
    const by = r.headers['x-served-by'];
    if (r.status !== 200 || by !== want) {
      fail(`check failed: expected X-Served-By ${want}, got status ${r.status} ${by ?? r.error ?? ''}`);
      return undefined;
    }
    if (run.s.state) await printState(run.on(path).lab, `r${round + 1} ${step.name} ${path.key}`);
    // Whatever installing the path, or removing the one before, left to finish (a process starting, the kernel
    // freeing a deleted table) finishes before the clock starts, on every path alike.
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const stopProfile = await startProfile(run.s.perfDir, `r${round + 1}-${step.name}-${path.key}`);
    const before = foreignCpu(run.ours);
    try {
      await step.run({ run, path, put });
    } finally {
      await stopProfile();
    }
    return foreignSince(before, foreignCpu(run.ours));
  } catch (e) {
    fail((e as Error).message.split('\n')[0] ?? 'failed');
    return undefined;
  } finally {
    await path.remove();
  }
}

/** USER_HZ: the unit of utime and stime in /proc/PID/stat (100 on every Linux architecture this runs on). */
const CLOCK_TICKS = 100;
const PF_KTHREAD = 0x00200000;

/**
 * CPU time so far (ticks) of each process that is not the bench's: user processes outside this run's labs' network
 * namespaces, other than this process and its children (perf). Other work on these two CPUs (another engineer's
 * lint or type check: a CPU for tens of seconds) halves the figure of whichever path it meets; counting it per
 * measurement says which pairs it hit. A process that starts and ends within one measurement is missed.
 */
function foreignCpu(ours: ReadonlySet<string>): Map<number, number> {
  const ticks = new Map<number, number>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const pid = Number(d);
    try {
      if (ours.has(readlinkSync(`/proc/${d}/ns/net`))) continue;
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      // Fields after the command (in parentheses, may hold spaces): state ppid pgrp session tty tpgid flags ...
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if ((Number(f[6]) & PF_KTHREAD) !== 0 || pid === process.pid || Number(f[1]) === process.pid) continue;
      ticks.set(pid, Number(f[11]) + Number(f[12]));
    } catch {
      /* gone, or a kernel thread without a namespace link */
    }
  }
  return ticks;
}

/** Seconds of CPU the foreign processes used between two readings. */
function foreignSince(before: Map<number, number>, after: Map<number, number>): number {
  let t = 0;
  for (const [pid, v] of after) t += v - (before.get(pid) ?? 0);
  return t / CLOCK_TICKS;
}

/**
 * What earlier measurements left in a lab, to stderr: TIME_WAIT sockets (the servers close first) in the origin and
 * the engine, conntrack entries in the gateway and the engine, and each namespace's TIME_WAIT overflows so far.
 */
async function printState(lab: Lab, what: string): Promise<void> {
  const read = async (ns: string): Promise<{ tw: number; ct: number; overflow: number }> => {
    const r = await lab.exec(
      ns,
      'sh',
      [
        '-c',
        'cat /proc/net/sockstat; cat /proc/sys/net/netfilter/nf_conntrack_count 2>/dev/null; cat /proc/net/netstat',
      ],
      { allowFail: true, timeoutMs: 3000 },
    );
    const tw = /^TCP: .* tw (\d+)/m.exec(r.stdout)?.[1];
    const ct = /^(\d+)$/m.exec(r.stdout)?.[1];
    // TcpExt: a header line of names, then one of values.
    const ext = r.stdout.split('\n').filter((l) => l.startsWith('TcpExt:'));
    const names = ext[0]?.split(/\s+/) ?? [];
    const values = ext[1]?.split(/\s+/) ?? [];
    const overflow = values[names.indexOf('TCPTimeWaitOverflow')];
    return { tw: Number(tw ?? NaN), ct: Number(ct ?? 0), overflow: Number(overflow ?? NaN) };
  };
  const [gw, origin, engine] = await Promise.all([lab.ns.gw, lab.ns.origin, lab.engineNs(1)].map(read));
  console.error(
    `state ${what} (${lab.id}): time-wait origin ${origin?.tw} engine ${engine?.tw}; conntrack gw ${gw?.ct} ` +
      `engine ${engine?.ct}; tw overflow origin ${origin?.overflow} engine ${engine?.overflow}`,
  );
}

/** The perf recorders running now: a bench that stops early stops them too (perf record -a would run on). */
const profiles = new Set<ChildProcess>();
const stopProfiles = (): void => {
  for (const p of profiles) p.kill('SIGINT');
};

/**
 * With --perf, a system-wide perf profile (cpu-clock, call graphs) of one measurement, to DIR/NAME.data; returns
 * what stops it. perf's own cost is paid by every path alike.
 */
async function startProfile(dir: string | undefined, name: string): Promise<() => Promise<void>> {
  if (dir === undefined) return async () => undefined;
  mkdirSync(dir, { recursive: true });
  const out = join(dir, `${name}.data`);
  const perf = spawn('perf', ['record', '-q', '-a', '-g', '-e', 'cpu-clock', '-c', String(PERF_PERIOD_NS), '-o', out], {
    stdio: 'ignore',
  });
  profiles.add(perf);
  const exited = new Promise<void>((resolve) => perf.once('exit', () => resolve()));
  void exited.then(() => profiles.delete(perf));
  // perf writes its file's header once it records: wait for it (at most 3 s).
  for (let i = 0; i < 60 && !existsSync(out) && perf.exitCode === null; i++)
    await new Promise((r) => setTimeout(r, 50));
  if (perf.exitCode !== null)
    throw new BenchError(`perf record exited at start (${perf.exitCode}): is perf installed?`);
  return async () => {
    perf.kill('SIGINT');
    await exited;
  };
}

/**
 * The order of the paths in a step: the compared pairs next to each other (ingress between direct and the static
 * route, nft beside static + conntrack, nft with `conntrack: services` beside direct; each A/A twin beside its path),
 * reversed every other step and every other round so that neither of a pair always runs first.
 */
const PAIR_ORDER: readonly PathKey[] = [
  'nft-untracked',
  'direct-twin',
  'direct',
  'ingress',
  'static',
  'static-twin',
  'static-ct',
  'nft',
  'direct6',
  'ingress6',
  'static6',
  'static6-ct',
  'nft6',
  'userland',
];

/**
 * Paired ratios as a table: per comparison, the median of the per-round ratios path / against (the rounds where
 * both were measured), their spread, and, where a target is set, whether the median reaches it.
 */
function renderComparisons(
  heading: string,
  comparisons: readonly Comparison[],
  byRound: ByRound,
  paths: readonly DataPath[],
  quiet: (measure: string, path: PathKey, round: number) => boolean,
): string {
  const label = (k: PathKey): string => paths.find((p) => p.key === k)?.label ?? k;
  const withTargets = comparisons.some((c) => c.atLeast !== undefined);
  const rows: string[] = [];
  for (const t of comparisons) {
    const mine = byRound.get(t.measure)?.get(t.path);
    const theirs = byRound.get(t.measure)?.get(t.against);
    if (mine === undefined || theirs === undefined) continue;
    const ratios = [...mine]
      .filter(([round]) => theirs.has(round))
      .map(([round, v]) => v / (theirs.get(round) as number))
      .filter(Number.isFinite);
    if (ratios.length === 0) continue;
    const m = median(ratios);
    // The same without the rounds where either figure shared the CPUs with work outside the bench.
    const alone = [...mine]
      .filter(([round]) => theirs.has(round) && quiet(t.measure, t.path, round) && quiet(t.measure, t.against, round))
      .map(([round, v]) => v / (theirs.get(round) as number))
      .filter(Number.isFinite);
    const measure = MEASURES.find((x) => x.key === t.measure)?.label ?? t.measure;
    const cells = [
      measure,
      `${label(t.path)} / ${label(t.against)}`,
      m.toFixed(3),
      `${Math.min(...ratios).toFixed(3)}..${Math.max(...ratios).toFixed(3)}`,
      String(ratios.length),
      alone.length === 0 ? '-' : `${median(alone).toFixed(3)} (${alone.length})`,
    ];
    if (withTargets && t.atLeast !== undefined)
      cells.push(`>= ${t.atLeast.toFixed(2)}`, m >= t.atLeast ? 'met' : 'NOT met');
    rows.push(`| ${cells.join(' | ')} |`);
  }
  if (rows.length === 0) return '';
  const head = [
    'measure',
    'ratio',
    'median',
    'min..max',
    'rounds',
    'median without foreign CPU (rounds)',
    ...(withTargets ? ['target', ''] : []),
  ];
  return [heading, '', `| ${head.join(' | ')} |`, `|${head.map(() => '---|').join('')}`, ...rows].join('\n');
}

/** The 1-minute load average: other processes on these two CPUs skew every figure, so the report says how busy. */
function loadAverage(): number {
  return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
}

function machine(): string {
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  return `${cpus().length} CPUs (${cpu}), Linux ${release()}, Node ${process.version}`;
}

async function main(): Promise<void> {
  const s = parseArgs(process.argv.slice(2));
  if (process.getuid?.() !== 0)
    throw new BenchError('bench/dataplane needs root (network namespaces, nft, policy routes)');
  const missing = missingTools();
  if (missing.length > 0) throw new BenchError(`missing tools: ${missing.join(', ')} (run scripts/install-deps)`);
  if (cpus().length < 2)
    throw new BenchError('bench/dataplane pins the load tool and the servers to different CPUs: needs 2');

  const t0 = Date.now();
  // Dual-stack labs when an IPv6 path runs (IPv4 paths are measured in them too, side by side).
  const ipv6 = s.paths.some((k) => IPV6_PATHS.includes(k));
  const lab = await createLab({ engines: 1, name: 'bench', ipv6 });
  // Direct gets a gateway of its own, the same topology, that never has a policy rule: the kernel keeps walking the
  // rules (and the local and main tables apart) once any ip rule was ever added to a namespace, even after the last
  // one is deleted, so the shared gateway is no longer a gateway without wccpd after the first redirect ran there.
  const pristine =
    s.paths.includes('direct') || s.paths.includes('direct6')
      ? await createLab({ engines: 1, name: 'direct', ipv6 })
      : null;
  // The ingress backend adds no ip rule either, so a gateway that runs it is such a gateway too: a lab of its own.
  const inlab =
    s.paths.includes('ingress') || s.paths.includes('ingress6')
      ? await createLab({ engines: 1, name: 'ingress', ipv6 })
      : null;
  // The A/A twins, each in a lab of its own.
  const dtwin = s.paths.includes('direct-twin') ? await createLab({ engines: 1, name: 'dtwin', ipv6 }) : null;
  const stwin = s.paths.includes('static-twin') ? await createLab({ engines: 1, name: 'stwin', ipv6 }) : null;
  const labs = [lab, ...[pristine, inlab, dtwin, stwin].filter((l): l is Lab => l !== null)];
  let interrupted = false;
  const onSignal = (): void => {
    if (interrupted) return;
    interrupted = true;
    console.error('interrupted: cleaning up');
    stopProfiles();
    void Promise.allSettled(labs.map((l) => l.destroy())).finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // The labs' exit handlers remove them (process.exit runs them).
  cleanUpOnClosedOutput(CLI, stopProfiles);
  const cells = new Map<string, Map<string, Cell>>();
  const byRound: ByRound = new Map();
  const notes: string[] = [];
  const retransmits = new Map<string, number>();
  const loads: number[] = [loadAverage()];
  const foreignBy = new Map<PathKey, number[]>();
  /** Per measure, path and round: the seconds of CPU processes outside the bench used during that measurement. */
  const foreignAt: ByRound = new Map();
  const all: Record<PathKey, DataPath> = {
    direct: directPath(pristine ?? lab),
    static: staticPath(lab, [80, IPERF_PORT]),
    'static-ct': staticConntrackPath(lab, [80, IPERF_PORT]),
    nft: nftPath(lab),
    'nft-untracked': nftPath(lab, true),
    userland: userlandPath(lab),
    ingress: ingressPath(inlab ?? lab),
    'direct-twin': directPath(dtwin ?? lab, true),
    'static-twin': staticPath(stwin ?? lab, [80, IPERF_PORT], true),
    direct6: directPath(pristine ?? lab, false, true),
    static6: staticPath(lab, [80, IPERF_PORT], false, true),
    'static6-ct': staticConntrackPath(lab, [80, IPERF_PORT], true),
    nft6: nftPath(lab, false, true),
    ingress6: ingressPath(inlab ?? lab, true),
  };
  const paths = s.paths.map((k) => all[k]);
  try {
    const up = new Map<Lab, LabUp>();
    for (const l of labs) {
      // A wide port range: tens of thousands of new connections per run from one client address to one destination.
      await l.exec(l.ns.client, 'sysctl', ['-q', '-w', 'net.ipv4.ip_local_port_range=1024 65000']);
      const exec: NsExec = (ns, cmd, args, opts) => l.exec(ns, cmd, args, opts);
      up.set(l, { lab: l, exec, servers: await startServers(l) });
    }
    const on = (p: DataPath): LabUp => up.get(p.lab) as LabUp;
    const ours = new Set(
      labs.flatMap((l) =>
        [l.ns.client, l.ns.gw, l.ns.origin, l.engineNs(1)].map((n) => `net:[${statSync(`/run/netns/${n}`).ino}]`),
      ),
    );
    const ordered = PAIR_ORDER.flatMap((k) => paths.filter((p) => p.key === k));
    const chosen = STEPS.filter((x) => s.steps.includes(x.name));
    for (let round = 0; round < s.rounds && !interrupted; round++) {
      for (const [i, step] of chosen.entries()) {
        // Reversed every other step and every other round: each step alternates its order over the rounds whatever
        // the number of steps (counting steps alone, an even number of them, as in --steps cps,urps, gave every step
        // the same order in every round).
        const order = ((round + i) % 2 === 0 ? ordered : [...ordered].reverse()).filter(
          (p) => !step.unrelated || UNRELATED_PATHS.includes(p.key),
        );
        if (order.length === 0) continue;
        const t = Date.now();
        const figures: string[] = [];
        for (const p of order) {
          if (interrupted) break;
          const foreign = await measureStep({ on, ours, s, cells, byRound, retransmits }, p, round, step);
          loads.push(loadAverage());
          if (foreign !== undefined) {
            foreignBy.set(p.key, [...(foreignBy.get(p.key) ?? []), foreign]);
            for (const k of step.keys) recordRound(foreignAt, k, p.key, round, foreign);
          }
          const m = MEASURES.find((x) => x.key === step.keys[0]);
          const v = byRound
            .get(step.keys[0] ?? '')
            ?.get(p.key)
            ?.get(round);
          // Foreign CPU over a tenth of the measurement's time: the figure is not this path's alone.
          const shared =
            foreign !== undefined && foreign > s.seconds / 10 ? ` (${foreign.toFixed(1)} s foreign CPU)` : '';
          figures.push(`${p.key} ${v === undefined ? '-' : v.toFixed(m?.digits ?? 2)}${shared}`);
        }
        // Each step's figures as they come, in the order they ran: pairs, spread and drift can be read here.
        console.error(
          `round ${round + 1}/${s.rounds} ${step.name} (${((Date.now() - t) / 1000).toFixed(1)} s): ${figures.join(', ')}`,
        );
      }
    }
    for (const p of paths) notes.push(...p.notes().map((n) => `${p.label}: ${n}`));
    for (const [label, n] of retransmits) notes.push(`${label}: iperf3 sender retransmits, all rounds: ${n}`);
    const all = [...foreignBy.values()].flat();
    const hit = all.filter((x) => x > s.seconds / 10).length;
    notes.push(
      `CPU used by processes outside the bench during the measurements: ${all.reduce((a, b) => a + b, 0).toFixed(1)} s ` +
        `in all; ${hit} of ${all.length} measurements had more than a tenth of their time` +
        (hit > 0
          ? ` (${[...foreignBy].map(([k, v]) => `${k} ${v.filter((x) => x > s.seconds / 10).length}`).join(', ')}): ` +
            'their figures are marked on stderr; a pair with one of them is not a like-for-like pair'
          : ''),
    );
  } finally {
    for (const p of paths) await p.remove().catch(() => undefined);
    for (const l of labs) {
      const d = await l.destroy();
      if (d.strays.length > 0) notes.push(`lab.destroy killed stray processes ${d.strays.join(', ')}`);
    }
  }
  if (interrupted) return;

  const baseline = paths.some((p) => p.key === 'static') ? 'static' : (paths[0]?.key ?? 'static');
  console.log(`bench/dataplane ${s.quick ? '--quick' : '(full)'} ${new Date().toISOString()}`);
  console.log(`machine: ${machine()}`);
  console.log(
    `rounds: ${s.rounds} (each measure runs on every path in turn, pairs side by side, order reversed every other measure and round); wrk -t1 -c${s.connections} -d${s.seconds}s; ` +
      `iperf3 -t ${s.seconds}; latency: ${s.latencySamples} sequential curl requests, each on a new connection; ` +
      `load tools on CPU ${LOAD_CPU}, nginx + iperf3 servers on CPU ${SERVER_CPU}; redirect target: engine 1 ` +
      '(192.0.2.11) for all 256 buckets; the userland forwarder is not pinned; direct and ingress each run in an ' +
      'identical lab of their own whose gateway never had a policy rule' +
      (ipv6
        ? `; dual-stack labs: the IPv6 paths (…6) connect to ${TARGET6}, redirected to engine 1's 2001:db8:e::11 ` +
          '(ip -6 rule for the static route, a service of both families for wccpd)'
        : ''),
  );
  console.log('');
  const unrelated = (m: Measure): boolean => m.key.startsWith('u');
  console.log(
    renderTable({ measures: MEASURES.filter((m) => !unrelated(m)), paths, cells, baseline, direct: 'direct' }),
  );
  const quiet = paths.filter((p) => UNRELATED_PATHS.includes(p.key));
  if (quiet.some((p) => p.key.startsWith('nft') || p.key === 'ingress')) {
    console.log('');
    console.log(
      `Unrelated traffic (${TARGET}:${UNRELATED_PORT}, [${TARGET6}]:${UNRELATED_PORT} on the IPv6 paths, and iperf3 on ` +
        `${UNRELATED_IPERF}; no service takes these ports), ` +
        'served by the origin on every path:',
    );
    console.log('');
    console.log(
      renderTable({
        measures: MEASURES.filter(unrelated),
        paths: quiet,
        cells,
        baseline: 'static-ct',
        baselineHeader: 'vs ct on',
        direct: 'direct',
      }),
    );
  }
  console.log('');
  console.log('ratios = path / static redirect and path / direct (medians); for latency, above 1 means slower.');
  // A measurement ran alone when processes outside the bench used at most a tenth of its time.
  const alone = (measure: string, path: PathKey, round: number): boolean =>
    (foreignAt.get(measure)?.get(path)?.get(round) ?? 0) <= s.seconds / 10;
  const targets = renderComparisons(
    '## targets (issue 15; IPv6: issue 36): the median of the per-round ratios (the two paths measured one after the other)',
    TARGETS,
    byRound,
    paths,
    alone,
  );
  if (targets !== '') console.log(`\n${targets}\n`);
  const floors = renderComparisons(
    '## floors: what conntrack and policy rules cost on their own, paired the same way',
    FLOORS,
    byRound,
    paths,
    alone,
  );
  if (floors !== '') console.log(`${floors}\n`);
  const aa = renderComparisons(
    '## A/A: the same path in two labs, and ingress against the twins (each in a lab of its own), paired the same way',
    AA,
    byRound,
    paths,
    alone,
  );
  if (aa !== '') console.log(`${aa}\n`);
  for (const n of notes) console.log(`note: ${n}`);
  // One reading per measurement: the range and the median, not hundreds of figures.
  const busiest = Math.max(...loads);
  console.log(
    `note: 1-min load average during the run: ${Math.min(...loads).toFixed(1)}..${busiest.toFixed(1)}, median ` +
      `${median(loads).toFixed(1)} over ${loads.length} readings (${cpus().length} CPUs)` +
      (busiest > 1
        ? ': other work shared the CPUs, so single figures are noisy; trust medians and ratios over rounds'
        : ''),
  );
  console.log(`total ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

main().catch((e: unknown) => {
  console.error(e instanceof BenchError ? `bench/dataplane: ${e.message}` : e);
  process.exit(1);
});
