// What the warm-up broker's relay costs, side by side in one run on loopback: a large object from a member engine's
// proxy port (a source process that holds it in memory) fetched directly and through the real wccpd's broker, in
// alternating rounds; the daemon's CPU-seconds per GB relayed (its process and any process it started, from
// /proc/PID/stat: every thread of each); the admin API's answer time and the health probes' round trip while nothing
// runs and while N relays run at once. Ratios printed; the raw runs go to bench/results/ with --write.
// Run: node --import tsx bench/warmup-relay.ts [--mb 200] [--rounds 5] [--parallel 4] [--checkout DIR] [--write]
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';
import { freeTcpPort, freeUdpPort, TOKEN, waitFor } from '../test/helpers/daemon.js';
import { TestEngine } from '../test/helpers/wccp-engine.js';
import { checkArgs, cleanUpOnClosedOutput, exitOnSignals } from './cli.js';
import type { Cli } from './cli.js';
import { BenchError } from './dataplane-measure.js';
import type { EnginesView } from '../src/admin/api-types.js';

const SOURCE = fileURLToPath(new URL('./warmup/relay-source.mjs', import.meta.url));
const CLIENT = fileURLToPath(new URL('./warmup/relay-client.mjs', import.meta.url));
const HERE = fileURLToPath(new URL('..', import.meta.url));
/** The sources (the buckets' previous owners) and the newcomer that fetches through the broker. */
const A = '127.0.0.11';
const B = '127.0.0.12';
const C = '127.0.0.13';
const TICK = 100; // USER_HZ: /proc/PID/stat counts CPU time in 1/100 s on Linux.

const CLI: Cli = {
  name: 'bench/warmup-relay',
  usage: `usage: node --import tsx bench/warmup-relay.ts [--mb 200] [--rounds 5] [--parallel 4] [--checkout DIR]
  [--warmup YAML] [--write]
The warm-up relay against a direct fetch of the same object from the same source, side by side, on loopback (no root):
throughput and its ratio, the daemon's CPU-seconds per GB relayed, the admin API's answer time idle and during
--parallel relays at once. --checkout: run that checkout's wccpd (its src/cli/wccpd.ts) instead of this one's;
--warmup: lines added to the config's top-level warmup section, ';' between them (default "maxRelayRate: 0", no
limit; e.g. "maxRelayRate: 100M" for the default budget); --write: the raw runs to
bench/results/<date>-warmup-relay.json.`,
  values: ['--mb', '--rounds', '--parallel', '--checkout', '--warmup'],
  switches: ['--write'],
};

interface Fetch {
  status: number;
  bytes: number;
  ms: number;
  error?: string;
}

function arg(argv: readonly string[], flag: string): string | undefined {
  const i = argv.indexOf(flag);
  return i < 0 ? undefined : argv[i + 1];
}

function num(argv: readonly string[], flag: string, dflt: number): number {
  const v = arg(argv, flag);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new BenchError(`${flag} takes a positive number, got "${v}"`);
  return n;
}

/**
 * CPU-seconds (user + system, all threads) of `pid` and every process descended from it, from /proc; and the system
 * part of it.
 */
export function treeCpu(pid: number): { total: number; sys: number; children: number } {
  const parent = new Map<number, number>();
  const cpu = new Map<number, number>();
  const sys = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue;
    }
    // The command name may hold spaces and parentheses: the fields after it start past the last ')'.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    parent.set(Number(name), Number(f[1]));
    cpu.set(Number(name), (Number(f[11]) + Number(f[12])) / TICK);
    sys.set(Number(name), Number(f[12]) / TICK);
  }
  let total = 0;
  let system = 0;
  let children = 0;
  const tree = new Set([pid]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [p, pp] of parent) {
      if (!tree.has(p) && tree.has(pp)) {
        tree.add(p);
        grew = true;
      }
    }
  }
  for (const p of tree) {
    total += cpu.get(p) ?? 0;
    system += sys.get(p) ?? 0;
    if (p !== pid) children += cpu.get(p) ?? 0;
  }
  return { total, sys: system, children };
}

function run(args: readonly string[]): Promise<Fetch[]> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) reject(new BenchError(`client exited ${code}`));
      else resolveRun(JSON.parse(out) as Fetch[]);
    });
  });
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

function median(xs: readonly number[]): number {
  return quantile(
    [...xs].sort((a, b) => a - b),
    0.5,
  );
}

async function main(): Promise<void> {
  const argv = checkArgs(CLI, process.argv.slice(2));
  const mb = num(argv, '--mb', 200);
  const rounds = num(argv, '--rounds', 5);
  const parallel = num(argv, '--parallel', 4);
  const checkout = resolve(arg(argv, '--checkout') ?? HERE);
  const given = (arg(argv, '--warmup') ?? '').split(';').filter((l) => l.trim() !== '');
  // The relay as fast as it goes unless the run names a budget (the daemon's default is 100M).
  // (A checkout from before the budgets has no such key, and no limit.)
  const knows = readFileSync(join(checkout, 'src/config/keys.ts'), 'utf8').includes('maxRelayRate');
  const warmupLines = given.some((l) => l.includes('maxRelayRate')) || !knows ? given : ['maxRelayRate: 0', ...given];
  const bytes = mb * 1e6;
  const started = new Date();
  const load = loadavg();

  const dir = mkdtempSync(join(tmpdir(), 'wccpd-relay-bench-'));
  const children: ChildProcess[] = [];
  const cleanup = (): void => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  cleanUpOnClosedOutput(CLI, cleanup);
  exitOnSignals();
  process.once('exit', cleanup);
  const engines: TestEngine[] = [];
  let keepAlive: ReturnType<typeof setInterval> | undefined;
  try {
    const sourceIcp = await freeUdpPort();
    const sourceHttp = await freeTcpPort();
    const source = spawn(process.execPath, [SOURCE, String(sourceIcp), String(sourceHttp), String(bytes), A, B, C], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(source);
    await new Promise<void>((r, j) => {
      source.stdout.once('data', () => r());
      source.once('exit', (code) => j(new BenchError(`the source exited ${code}`)));
    });

    const udpPort = await freeUdpPort();
    const adminPort = await freeTcpPort();
    const icpPort = await freeUdpPort();
    const httpPort = await freeTcpPort();
    const config = join(dir, 'wccpd.yaml');
    writeFileSync(
      config,
      [
        'router:',
        '  address: 127.0.0.1',
        `  port: ${udpPort}`,
        'admin:',
        `  listen: 127.0.0.1:${adminPort}`,
        `  token: ${TOKEN}`,
        `stateDir: ${join(dir, 'state')}`,
        'dataplane:',
        '  backend: none',
        'health:',
        `  icp: { port: ${sourceIcp} }`,
        `  http: { enabled: false, port: ${sourceHttp} }`,
        // A connect probe of the source's port every 50 ms: its round trip is the control plane's latency to watch.
        `  tcp: { enabled: true, port: ${sourceHttp} }`,
        'warmup:',
        '  listen: 127.0.0.1',
        `  icpPort: ${icpPort}`,
        `  httpPort: ${httpPort}`,
        ...warmupLines.map((l) => `  ${l.trim()}`),
        'services:',
        '  - id: 0',
        '    forwarding: l2',
        '    return: l2',
        '    assignment: hash',
        '    warmup: { duration: 30m, peerTimeout: 2s, minSourceHold: 0s }',
        '    engines:',
        '      allow: [127.0.0.0/24]',
        '      lenientReceiveId: 2',
        '',
      ].join('\n'),
    );
    const daemon = spawn(process.execPath, ['--import', 'tsx', 'src/cli/wccpd.ts', '--config', config], {
      cwd: checkout,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.push(daemon);
    let daemonErr = '';
    daemon.stderr.on('data', (d: Buffer) => (daemonErr = (daemonErr + d.toString()).slice(-4000)));
    const api = `http://127.0.0.1:${adminPort}/api/v1`;
    await waitFor('the admin API', async () => ((await fetch(`${api}/status`).catch(() => null))?.ok ? true : null));
    const pid = daemon.pid ?? 0;

    keepAlive = setInterval(() => {
      for (const e of engines) void e.hereIAm().catch(() => undefined);
    }, 3000);
    const buckets = async (): Promise<(string | null)[]> =>
      ((await (await fetch(`${api}/services/0/buckets`)).json()) as { buckets: (string | null)[] }).buckets;
    for (const address of [A, B, C]) {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udpPort } });
      await e.start();
      engines.push(e);
      await e.hereIAm();
      await e.hereIAm();
      await waitFor(`${address} holding buckets`, async () => ((await buckets()).includes(address) ? true : null));
    }
    const table = await buckets();
    const bucket = table.indexOf(C);
    // An origin address in a bucket the newcomer C gained (the XOR of its bytes is the bucket).
    const url = `http://198.51.100.${198 ^ 51 ^ 100 ^ bucket}/object`;
    const direct = (n: number): Promise<Fetch[]> => run([CLIENT, C, A, String(sourceHttp), url, String(n)]);
    const relayed = (n: number): Promise<Fetch[]> =>
      run([CLIENT, C, '127.0.0.1', String(httpPort), url, String(n), String(icpPort)]);
    const gbps = (f: Fetch): number => (f.bytes * 8) / (f.ms / 1000) / 1e9;
    const check = (fs: Fetch[], what: string): Fetch[] => {
      for (const f of fs)
        if (f.status !== 200 || f.bytes !== bytes)
          throw new BenchError(`${what}: status ${f.status}, ${f.bytes} of ${bytes} bytes ${f.error ?? ''}`);
      return fs;
    };
    // One relay first: the daemon's and the source's code paths warmed, the agent's connection made.
    check(await relayed(1), 'warm-up relay');
    check(await direct(1), 'warm-up fetch');

    const raw: {
      round: number;
      kind: string;
      gbps: number;
      ms: number;
      cpuS: number;
      sysS: number;
      relayProcessS: number;
    }[] = [];
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? ['direct', 'relay'] : ['relay', 'direct'];
      for (const kind of order) {
        const cpu0 = treeCpu(pid);
        const [f] = check(kind === 'direct' ? await direct(1) : await relayed(1), kind);
        const cpu1 = treeCpu(pid);
        if (f)
          raw.push({
            round: r + 1,
            kind,
            gbps: gbps(f),
            ms: f.ms,
            cpuS: cpu1.total - cpu0.total,
            sysS: cpu1.sys - cpu0.sys,
            relayProcessS: cpu1.children - cpu0.children,
          });
      }
    }

    // The admin API's answer time: sequential GET /api/v1/status, idle and while `parallel` relays run at once.
    const probeApi = async (until: () => boolean, minN: number): Promise<number[]> => {
      const times: number[] = [];
      while (until() || times.length < minN) {
        const t0 = performance.now();
        await (await fetch(`${api}/status`)).text();
        times.push(performance.now() - t0);
        await new Promise((r) => setTimeout(r, 10));
      }
      return times;
    };
    // The health probes' round trip (ICP to each engine, the daemon's own timing), read from the engines view: the
    // failover decision's input, sampled idle and during the relays.
    const probeRtt = async (until: () => boolean, minN: number): Promise<number[]> => {
      const rtts: number[] = [];
      for (let reads = 0; until() || reads < minN; reads++) {
        const v = (await (await fetch(`${api}/services/0/engines`)).json()) as EnginesView;
        for (const e of v.engines) if (e.probeRttMs !== null) rtts.push(e.probeRttMs);
        await new Promise((r) => setTimeout(r, 50));
      }
      return rtts;
    };
    const idleRtt = await probeRtt(() => false, 40);
    const idleApi = await probeApi(() => false, 100);
    let running = true;
    const par0 = treeCpu(pid);
    const cpu0 = par0.total;
    const t0 = performance.now();
    const together = relayed(parallel).then((x) => {
      running = false;
      return x;
    });
    const [busyApi, busyRtt] = await Promise.all([probeApi(() => running, 1), probeRtt(() => running, 1)]);
    const parallelFetches = check(await together, `${parallel} relays`);
    const parallelS = (performance.now() - t0) / 1000;
    const par1 = treeCpu(pid);
    const parallelCpu = par1.total - cpu0;
    const parallelRelayCpu = par1.children - par0.children;
    const status = (await (await fetch(`${api}/status`)).json()) as { warmup?: Record<string, number> };

    const d = raw.filter((x) => x.kind === 'direct');
    const rl = raw.filter((x) => x.kind === 'relay');
    const ratios = rl.map((x) => x.gbps / (d.find((y) => y.round === x.round)?.gbps ?? NaN));
    const cpuPerGb = (xs: typeof raw): number[] => xs.map((x) => x.cpuS / (bytes / 1e9));
    const sortedIdle = [...idleApi].sort((a, b) => a - b);
    const sortedBusy = [...busyApi].sort((a, b) => a - b);
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: checkout }).toString().trim();
    const f = (n: number, p = 2): string => (Number.isFinite(n) ? n.toFixed(p) : '-');
    console.log(
      `bench/warmup-relay, ${started.toISOString()}: wccpd of ${checkout} (${commit}) under tsx, ${cpus().length} cores, ` +
        `load ${load.map((l) => l.toFixed(1)).join(' ')} at start; a ${mb} MB object, ${rounds} rounds` +
        (warmupLines.length > 0 ? `; warmup: ${warmupLines.join('; ')}` : ''),
    );
    console.log('round  direct Gbit/s  relay Gbit/s  ratio  daemon CPU-s/GB (direct, relay)');
    for (let r = 1; r <= rounds; r++) {
      const x = d.find((y) => y.round === r);
      const y = rl.find((z) => z.round === r);
      if (!x || !y) continue;
      console.log(
        `${String(r).padStart(5)}  ${f(x.gbps).padStart(13)}  ${f(y.gbps).padStart(12)}  ${f(y.gbps / x.gbps).padStart(5)}  ` +
          `${f(x.cpuS / (bytes / 1e9))}, ${f(y.cpuS / (bytes / 1e9))}`,
      );
    }
    const med = {
      direct: median(d.map((x) => x.gbps)),
      relay: median(rl.map((x) => x.gbps)),
      ratio: median(ratios),
      cpuPerGb: median(cpuPerGb(rl)),
      sysPerGb: median(rl.map((x) => x.sysS / (bytes / 1e9))),
      relayProcessPerGb: median(rl.map((x) => x.relayProcessS / (bytes / 1e9))),
    };
    console.log(
      `median: direct ${f(med.direct)} Gbit/s, relay ${f(med.relay)} Gbit/s, ratio ${f(med.ratio)} ` +
        `(min ${f(Math.min(...ratios))}); daemon ${f(med.cpuPerGb)} CPU-s per GB relayed ` +
        `(max ${f(Math.max(...cpuPerGb(rl)))}; of it in the kernel ${f(med.sysPerGb)}, the relay process ${f(med.relayProcessPerGb)})`,
    );
    const aggGbps = (parallel * bytes * 8) / parallelS / 1e9;
    console.log(
      `${parallel} relays at once: ${f(aggGbps)} Gbit/s together in ${f(parallelS, 1)} s ` +
        `(each ${parallelFetches.map((x) => f(gbps(x))).join(', ')}), daemon ${f(parallelCpu / ((parallel * bytes) / 1e9))} CPU-s/GB ` +
        `(the relay process ${f(parallelRelayCpu / ((parallel * bytes) / 1e9))})`,
    );
    console.log(
      `admin API GET /status: idle median ${f(quantile(sortedIdle, 0.5))} ms, max ${f(sortedIdle.at(-1) ?? NaN)} ms (${idleApi.length}); ` +
        `during ${parallel} relays median ${f(quantile(sortedBusy, 0.5))} ms, p99 ${f(quantile(sortedBusy, 0.99))} ms, ` +
        `max ${f(sortedBusy.at(-1) ?? NaN)} ms (${busyApi.length})`,
    );
    const sortedIdleRtt = [...idleRtt].sort((a, b) => a - b);
    const sortedBusyRtt = [...busyRtt].sort((a, b) => a - b);
    console.log(
      `health probe round trip (TCP connect): idle median ${f(quantile(sortedIdleRtt, 0.5))} ms, max ${f(sortedIdleRtt.at(-1) ?? NaN)} ms (${idleRtt.length}); ` +
        `during ${parallel} relays median ${f(quantile(sortedBusyRtt, 0.5))} ms, max ${f(sortedBusyRtt.at(-1) ?? NaN)} ms (${busyRtt.length})`,
    );
    const w = status.warmup ?? {};
    console.log(
      `broker: http-relayed ${w['http-relayed'] ?? 0}, http-bytes ${w['http-bytes'] ?? 0}` +
        Object.entries(w)
          .filter(([k]) => /relay-(rate|too|worker)|too-large/.test(k))
          .map(([k, v]) => `, ${k} ${v}`)
          .join(''),
    );
    const met = (ok: boolean): string => (ok ? 'met' : 'NOT met');
    console.log(
      `targets: relay >= 0.5x direct: ${met(med.ratio >= 0.5)}; <= 1.5 CPU-s/GB: ${met(med.cpuPerGb <= 1.5)}; ` +
        `API max <= 20 ms during ${parallel} relays: ${met((sortedBusy.at(-1) ?? Infinity) <= 20)}`,
    );
    if (argv.includes('--write')) {
      const stamp = started.toISOString().slice(0, 16).replace('T', '-').replace(':', '');
      // Two runs within a minute: the second's name gets its seconds.
      const name = (st: string): string => join(HERE, 'bench', 'results', `${st}-warmup-relay.json`);
      const file = existsSync(name(stamp)) ? name(`${stamp}${started.toISOString().slice(17, 19)}`) : name(stamp);
      writeFileSync(
        file,
        JSON.stringify(
          {
            started: started.toISOString(),
            checkout,
            commit,
            cores: cpus().length,
            load,
            mb,
            warmup: warmupLines,
            rounds: raw,
            median: med,
            parallel: {
              n: parallel,
              seconds: parallelS,
              cpuS: parallelCpu,
              relayProcessS: parallelRelayCpu,
              fetches: parallelFetches,
            },
            apiMs: { idle: idleApi, duringRelays: busyApi },
            probeRttMs: { idle: idleRtt, duringRelays: busyRtt },
            broker: w,
          },
          null,
          1,
        ) + '\n',
      );
      console.log(`raw runs: ${file}`);
    }
    if (daemon.exitCode !== null) throw new BenchError(`wccpd ended: ${daemonErr}`);
  } finally {
    if (keepAlive) clearInterval(keepAlive);
    for (const e of engines) await e.stop().catch(() => undefined);
    cleanup();
  }
}

main().catch((e: unknown) => {
  console.error(
    e instanceof BenchError
      ? `bench/warmup-relay: ${e.message}`
      : e instanceof Error
        ? (e.stack ?? e.message)
        : String(e),
  );
  process.exit(1);
});
