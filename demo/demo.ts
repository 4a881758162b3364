// scripts/demo: the whole job in one command. Builds a lab of its own (test/lab: a client, a gateway running wccpd
// with the nft data plane, an origin answering on 256 addresses, three engines running Debian's Squid), drives steady
// client traffic over a working set of 256 cacheable objects, and tells the story in steps, each checked against what
// the client, the Squids' access.logs and the origin saw:
//   two engines share the buckets (and become warm sources) -> a third is hot-inserted and warmed up by wccpd's
//   warm-up broker from the previous owners' caches -> one is killed (its objects are gone) -> all stop (bypass) ->
//   they return (their own buckets: no warm-up).
// wccpd's page and API are relayed to http://127.0.0.1:8080/ on the host for the whole run. `--ci`: no pauses, one
// line per step, exit 1 if a step did not show what it claims. Ctrl-C removes everything it created.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BucketsView, EnginesView, StatusView } from '../src/admin/api-types.js';
import type { EngineView, EventView } from '../src/admin/api-types.js';
import {
  createLab,
  NS_PREFIX,
  originAddressForBucket,
  ROUTER_ADDRESS,
  type Lab,
  type LabProcess,
} from '../test/lab/lab.js';
import {
  missesIn,
  objectBucket,
  objectUrl,
  originFetches,
  servedToBroker,
  viaBroker,
  warmupLine,
  warmupShortfalls,
  WORKING_SET,
} from './warm-up.js';
import { relayToHost, type HostRelay } from '../test/lab/host-relay.js';
import { elementValue } from '../src/dataplane/kernel/counters.js';
import { routeTable } from '../src/dataplane/kernel/names.js';

const REPO = fileURLToPath(new URL('../', import.meta.url));
const WCCPD = join(REPO, 'src/cli/wccpd.ts');
const TRAFFIC = join(REPO, 'test/lab/traffic-client.mjs');
const TSX = import.meta.resolve('tsx');
/** The host port for the page and API unless --port says otherwise. */
const ADMIN_PORT = 8080;
const TOKEN = `demo-${process.pid}`;
// wccpd's default health probe (HTTP to Squid's port 3128, docs/health.md) catches a dead Squid long before
// 3 x HERE_I_AM_T = 30 s of silence would (Squid sends HERE_I_AM every 10 s and that cannot be changed).
const HERE_I_AM_DETECTION_MS = 3 * 10_000;
const ENGINES = [1, 2, 3] as const;
// The warm-up's lab values (docs/warmup.md; the defaults are 1 min and 10 min), so the demo stays short: engines 1 and
// 2 are warm sources once they held their buckets MIN_SOURCE_HOLD_S, and engine3's warm-up lasts WARMUP_DURATION_S.
const MIN_SOURCE_HOLD_S = 15;
const WARMUP_DURATION_S = 20;
/** Each Squid gets docs/warmup.md's sibling lines: wccpd's warm-up broker (on the router's address) as its sibling. */
const SQUID = { sibling: ROUTER_ADDRESS } as const;

interface Options {
  ci: boolean;
  port: number;
  rate: number;
  screenshot: string | null;
  /** Pause between steps in interactive mode (ms; Enter skips it). */
  pauseMs: number;
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = { ci: false, port: ADMIN_PORT, rate: 40, screenshot: null, pauseMs: 20_000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) usage(`${a} needs a value`);
      return v;
    };
    if (a === '--ci') o.ci = true;
    else if (a === '--port') o.port = Number(value());
    else if (a === '--rate') o.rate = Number(value());
    else if (a === '--screenshot') o.screenshot = value();
    else if (a === '--pause') o.pauseMs = Number(value()) * 1000;
    else if (a === '--help' || a === '-h') usage(null);
    else usage(`unknown argument ${a}`);
  }
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) usage(`--port must be 0-65535, got ${o.port}`);
  if (!(o.rate >= 1 && o.rate <= 500)) usage(`--rate must be 1-500 requests/s, got ${o.rate}`);
  if (!(o.pauseMs >= 0 && o.pauseMs <= 600_000)) usage('--pause must be 0-600 seconds');
  return o;
}

function usage(problem: string | null): never {
  const text =
    'usage: scripts/demo [--ci] [--port 8080] [--rate 40] [--pause 20] [--screenshot FILE.png]\n' +
    '  --ci          no pauses, one line per step with its figures, exit 1 if a step did not show what it claims\n' +
    "  --port        the host port for wccpd's page and API (default 8080; the next free one if taken, said so)\n" +
    '  --rate        client requests per second (default 40)\n' +
    '  --pause       seconds to wait between steps without --ci (Enter goes on at once; default 20)\n' +
    '  --screenshot  save the page (headless Chromium, open from the start) while engine3 warms (e.g. docs/page.png)\n';
  if (problem) process.stderr.write(`scripts/demo: ${problem}\n`);
  process.stderr.write(text);
  process.exit(problem ? 2 : 0);
}

/** What the demo needs that this machine lacks, in words; [] when it can run. */
export function missingPrerequisites(): string[] {
  const missing: string[] = [];
  if (process.platform !== 'linux') return [`Linux (this is ${process.platform})`];
  if (process.getuid?.() !== 0) missing.push('root');
  const have = (cmd: string): boolean => {
    try {
      execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  for (const [cmd, what] of [
    ['ip', 'iproute2 (ip netns)'],
    ['nft', 'nftables'],
    ['squid', "Debian's squid"],
    ['ss', 'iproute2 (ss)'],
  ]) {
    if (!have(cmd!)) missing.push(what!);
  }
  if (missing.length === 0) {
    try {
      execFileSync('ip', ['netns', 'list'], { stdio: 'ignore', timeout: 5000 });
    } catch {
      missing.push('network namespaces (ip netns)');
    }
  }
  return missing;
}

// ---- what the client saw --------------------------------------------------------------------------------------

interface Request {
  /** Wall-clock start (ms). */
  t: number;
  bucket: number;
  ms: number;
  status: number;
  engine: string | null;
  direct: boolean;
  err?: string;
}

interface Seen {
  requests: number;
  errors: number;
  p50: number;
  p99: number;
  /** Who served the answered requests: engine1..3, or 'origin' for direct. */
  servedBy: Map<string, number>;
  errorKinds: Map<string, number>;
}

function summarize(rs: readonly Request[]): Seen {
  const ok = rs.filter((r) => r.status === 200);
  const lat = ok.map((r) => r.ms).sort((a, b) => a - b);
  const q = (p: number): number => (lat.length === 0 ? 0 : lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]!);
  const servedBy = new Map<string, number>();
  const errorKinds = new Map<string, number>();
  for (const r of rs) {
    if (r.status === 200) {
      const who = r.engine ?? (r.direct ? 'origin' : 'unknown');
      servedBy.set(who, (servedBy.get(who) ?? 0) + 1);
    } else {
      const kind = r.err ?? `HTTP ${r.status}`;
      errorKinds.set(kind, (errorKinds.get(kind) ?? 0) + 1);
    }
  }
  return { requests: rs.length, errors: rs.length - ok.length, p50: q(0.5), p99: q(0.99), servedBy, errorKinds };
}

function describeSeen(s: Seen): string {
  const served =
    [...s.servedBy]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'nobody';
  const errs =
    s.errors === 0 ? '0 errors' : `${s.errors} errors (${[...s.errorKinds].map(([k, v]) => `${k} ${v}`).join(', ')})`;
  return `${s.requests} requests, ${errs}, latency p50 ${s.p50.toFixed(1)} ms p99 ${s.p99.toFixed(1)} ms; served by ${served}`;
}

// ---- the story ------------------------------------------------------------------------------------------------

interface StepResult {
  title: string;
  ok: boolean;
  figures: string;
  /** What was claimed and not shown, in words. */
  failures: string[];
}

class Demo {
  private lab: Lab | null = null;
  private relay: HostRelay | null = null;
  private daemon: LabProcess | null = null;
  private traffic: LabProcess | null = null;
  private browser: { close(): Promise<void>; screenshot(path: string): Promise<void> } | null = null;
  private readonly requests: Request[] = [];
  private activity = '';
  private progressTimer: ReturnType<typeof setInterval> | null = null;
  private readonly tty: boolean;
  private cleaning: Promise<void> | null = null;
  private readonly started = Date.now();
  readonly results: StepResult[] = [];

  constructor(private readonly o: Options) {
    this.tty = !o.ci && process.stdout.isTTY === true;
  }

  private get url(): string {
    if (!this.relay) throw new Error('the relay to the page is not up yet');
    return this.relay.url;
  }

  // -- output

  private print(line: string): void {
    if (this.tty) process.stdout.write('\r\x1b[K');
    process.stdout.write(`${line}\n`);
  }

  private bold(s: string): string {
    return this.tty ? `\x1b[1m${s}\x1b[0m` : s;
  }

  private startProgress(): void {
    if (!this.tty) return;
    this.progressTimer = setInterval(() => {
      const last = summarize(this.requests.filter((r) => r.t >= Date.now() - 5000));
      const served = [...last.servedBy]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => `${k} ${v}`)
        .join('  ');
      const line =
        `  [${((Date.now() - this.started) / 1000).toFixed(0).padStart(3)} s] ${this.activity}` +
        ` | last 5 s: ${last.requests} req, ${last.errors} err, p50 ${last.p50.toFixed(1)} ms | ${served}`;
      process.stdout.write(`\r\x1b[K${line.slice(0, (process.stdout.columns || 160) - 1)}`);
    }, 250);
  }

  // -- API through the host relay

  private async api<T>(path: string): Promise<T> {
    // Generous: on a loaded machine an nft transaction can hold the daemon's answer for seconds.
    const r = await fetch(`${this.url}/api/v1/${path}`, { signal: AbortSignal.timeout(15_000) });
    if (!r.ok) throw new Error(`GET /api/v1/${path}: HTTP ${r.status}`);
    return (await r.json()) as T;
  }

  private buckets(): Promise<BucketsView> {
    return this.api<BucketsView>('services/0/buckets');
  }

  /** Polls until pred holds on the bucket table (bounded); the table and when it was first seen. */
  private async waitTable(
    what: string,
    pred: (b: BucketsView, e: EnginesView) => boolean,
    timeoutMs: number,
  ): Promise<{ table: BucketsView; engines: EnginesView; at: number; inKernel: number }> {
    const deadline = Date.now() + timeoutMs;
    const t0 = Date.now();
    let last = '';
    for (;;) {
      this.activity = `${what} (${((Date.now() - t0) / 1000).toFixed(1)} s)`;
      try {
        const [table, engines] = await Promise.all([this.buckets(), this.api<EnginesView>('services/0/engines')]);
        if (pred(table, engines)) {
          const at = Date.now();
          // What the API shows is the cluster's decision; the claims are about traffic, so wait for the kernel.
          const inKernel = await this.waitKernel(table.buckets, what);
          return { table, engines, at, inKernel };
        }
        last = `buckets ${describeShares(table.buckets)}; engines ${engines.engines.map((e) => `${e.address} ${e.state} (${e.reason})`).join(', ')}`;
      } catch (e) {
        last = (e as Error).message;
      }
      if (Date.now() > deadline)
        throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}; last: ${last}`);
      await sleep(100);
    }
  }

  /**
   * The table the kernel holds now: nft's bucket map (bucket -> `jump claim_<slot>` or `jump direct`) in the gateway,
   * each slot resolved through the policy route of its routing table (fwmark field slot -> table
   * routeTable(slot) -> default via the engine, docs/dataplane.md). null where the data plane has no map yet.
   */
  private async kernelTable(): Promise<(string | null)[] | null> {
    const lab = this.lab!;
    const [map, routes] = await Promise.all([
      lab.exec(lab.ns.gw, 'nft', ['-j', 'list', 'map', 'inet', 'wccpd', 'bucket_0'], {
        allowFail: true,
        timeoutMs: 15_000,
      }),
      lab.exec(lab.ns.gw, 'ip', ['-4', 'route', 'show', 'table', 'all'], { timeoutMs: 15_000 }),
    ]);
    if (map.code !== 0) return null;
    const viaTable = new Map<number, string>();
    for (const m of routes.stdout.matchAll(/^default via (\S+) .*\btable (\d+)/gm)) viaTable.set(Number(m[2]), m[1]!);
    const out: (string | null)[] = new Array<string | null>(256).fill(null);
    type Elem = [unknown, { jump?: { target?: string } }];
    const doc = JSON.parse(map.stdout) as { nftables: { map?: { elem?: Elem[] } }[] };
    for (const [key, verdict] of doc.nftables.find((x) => x.map)?.map?.elem ?? []) {
      const bucket = elementValue(key);
      const target = verdict.jump?.target ?? '';
      const slot = /^claim_(\d+)$/.exec(target);
      if (bucket === null || bucket > 255) continue;
      out[bucket] = slot === null ? null : (viaTable.get(routeTable(Number(slot[1]))) ?? target);
    }
    return out;
  }

  /** Waits (bounded) until the kernel holds `want`; when it was seen. */
  private async waitKernel(want: ReadonlyArray<string | null>, what: string): Promise<number> {
    const deadline = Date.now() + 60_000;
    let last: (string | null)[] | null = null;
    while (Date.now() < deadline) {
      this.activity = `${what}: waiting for the kernel to hold the new table`;
      last = await this.kernelTable();
      if (last !== null && last.every((e, b) => e === want[b])) return Date.now();
      // Not faster: each read is two processes in the gateway, and nft reads contend with the daemon's transaction.
      await sleep(300);
    }
    throw new Error(
      `the kernel did not hold the table the API shows within 60 s (${what}); kernel: ` +
        `${last === null ? 'no map' : describeShares(last)}, API: ${describeShares(want)}`,
    );
  }

  /** How often the origin served each working-set object (its own counts), by bucket. */
  private async originCounts(): Promise<number[]> {
    const lab = this.lab!;
    const r = await lab.curl(`http://${originAddressForBucket(0)}/_counts`, { ns: lab.ns.origin, timeoutMs: 15_000 });
    if (r.status !== 200 || typeof r.json !== 'object' || r.json === null)
      throw new Error(`the origin's counts: ${r.error ?? `HTTP ${r.status}`}`);
    const c = r.json as Record<string, number>;
    return Array.from({ length: 256 }, (_, b) => c[`${originAddressForBucket(b)} ${WORKING_SET}${b}`] ?? 0);
  }

  private async engineViews(): Promise<readonly EngineView[]> {
    return (await this.api<EnginesView>('services/0/engines')).engines;
  }

  private async warmupEvents(since: number): Promise<EventView[]> {
    const r = await this.api<{ events: EventView[] }>('events?limit=200');
    return r.events.filter((e) => e.type === 'warmup' && e.time >= since);
  }

  private since(t: number, until = Infinity): Request[] {
    return this.requests.filter((r) => r.t >= t && r.t < until);
  }

  // -- set-up

  async setUp(): Promise<void> {
    this.print(
      this.bold('Setting up the lab') + ': client, gateway (wccpd, nft), origin (198.51.100.0/24), three Squid engines',
    );
    this.activity = 'building the lab';
    const lab = await createLab({ engines: ENGINES.length, name: 'demo' });
    this.lab = lab;
    await lab.startOrigin();
    try {
      // The daemon listens on the same port in the gateway namespace, so the Host header names it (docs/api.md).
      this.relay = await relayToHost(lab, lab.ns.gw, { hostPort: this.o.port, tryNext: 20 });
    } catch (e) {
      throw new Error(`cannot serve the page on the host: ${(e as Error).message}; pick a free one with --port N`);
    }
    const config = this.writeConfig(lab, this.relay.port);
    this.daemon = lab.spawn(lab.ns.gw, process.execPath, ['--import', TSX, WCCPD, '--config', config]);
    if (this.relay.taken.length > 0) {
      this.print(
        `  127.0.0.1:${this.relay.taken.join(', ')} ${this.relay.taken.length > 1 ? 'are' : 'is'} taken on this host: ` +
          `using 127.0.0.1:${this.relay.port} instead`,
      );
    }
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (!this.daemon.running()) throw new Error(`wccpd exited at start:\n${this.daemon.output().slice(-2000)}`);
      try {
        await this.api<StatusView>('status');
        break;
      } catch {
        /* not yet */
      }
      if (Date.now() > deadline)
        throw new Error(`wccpd's API did not answer within 30 s:\n${this.daemon.output().slice(-2000)}`);
      await sleep(200);
    }
    this.print(`  wccpd's page and API: ${this.bold(this.relay.url + '/')}  (open it now; it stays up until the end)`);
    this.traffic = lab.spawn(lab.ns.client, process.execPath, [
      TRAFFIC,
      '--rate',
      String(this.o.rate),
      '--seconds',
      '900',
      '--working-set',
      WORKING_SET,
    ]);
    this.traffic.child.stdout?.on('data', () => undefined);
    let partial = '';
    this.traffic.child.stdout?.setEncoding('utf8').on('data', (s: string) => {
      const parts = (partial + s).split('\n');
      partial = parts.pop() ?? '';
      for (const line of parts) {
        if (!line.startsWith('{')) continue;
        try {
          this.requests.push(JSON.parse(line) as Request);
        } catch {
          /* a torn line */
        }
      }
    });
    this.print(
      `  client traffic: ${this.o.rate} requests/s from 203.0.113.10 to the 256 origin addresses ` +
        `(one per bucket, each once every 256 requests), each on a new connection; its working set: one cacheable ` +
        `object per address (http://198.51.100.x${WORKING_SET}<bucket>, max-age 1 h)`,
    );
    this.print(
      `  warm-up broker: wccpd on ${ROUTER_ADDRESS} (ICP 3130, HTTP 3128), each Squid's sibling (docs/warmup.md's ` +
        `lines); lab values to keep the demo short: minSourceHold ${MIN_SOURCE_HOLD_S} s, duration ` +
        `${WARMUP_DURATION_S} s (defaults 1 min, 10 min)`,
    );
    this.startProgress();
    if (this.o.screenshot) await this.openBrowserPage();
  }

  private writeConfig(lab: Lab, adminPort: number): string {
    const stateDir = join(lab.dir, 'state');
    mkdirSync(stateDir, { recursive: true });
    const path = join(lab.dir, 'wccpd.yaml');
    writeFileSync(
      path,
      [
        'router:',
        `  address: ${ROUTER_ADDRESS}`,
        'admin:',
        `  listen: 127.0.0.1:${adminPort}`,
        `  token: ${TOKEN}`,
        `stateDir: ${stateDir}`,
        'dataplane:',
        '  backend: nft',
        'timers:',
        '  hereIAm: 10s',
        // The warm-up broker (docs/warmup.md) on the engines' side of the gateway: the address the Squids' cache_peer
        // line names.
        'warmup:',
        `  listen: ${ROUTER_ADDRESS}`,
        'services:',
        '  - id: 0',
        '    failMode: open',
        '    clientInterfaces: [c0]',
        '    engines:',
        '      allow: [192.0.2.0/24]',
        // Squid 5.7 never echoes a Receive ID: usable from its first well-formed HERE_I_AM, so the demo need not wait
        // 10
        // s.
        '      lenientReceiveId: 1',
        `    warmup: { duration: ${WARMUP_DURATION_S}s, minSourceHold: ${MIN_SOURCE_HOLD_S}s }`,
        '',
      ].join('\n'),
    );
    return path;
  }

  // -- steps

  private async step(n: number, title: string, body: () => Promise<Omit<StepResult, 'title'>>): Promise<void> {
    this.print('');
    this.print(this.bold(`Step ${n}: ${title}`));
    let r: Omit<StepResult, 'title'>;
    try {
      r = await body();
    } catch (e) {
      r = { ok: false, figures: '', failures: [(e as Error).message] };
    }
    this.results.push({ title, ...r });
    if (!r.ok) await this.printEvents();
    const verdict = r.ok ? 'ok' : 'FAILED';
    if (this.o.ci)
      this.print(`step ${n} ${title}: ${verdict}: ${r.figures}${r.ok ? '' : ` | not shown: ${r.failures.join('; ')}`}`);
    else {
      this.print(`  ${r.figures}`);
      this.print(`  -> ${r.ok ? this.bold('as claimed') : this.bold('NOT as claimed: ') + r.failures.join('; ')}`);
    }
  }

  /** After a step failed: wccpd's recent events, so a CI log says what the daemon saw. */
  private async printEvents(): Promise<void> {
    try {
      const r = await this.api<{ events: { time: number; type: string; [k: string]: unknown }[] }>('events?limit=30');
      this.print("  wccpd's last events:");
      for (const e of r.events) {
        const { time, type, ...rest } = e;
        this.print(`    ${new Date(time).toISOString().slice(11, 23)} ${type} ${JSON.stringify(rest)}`);
      }
    } catch (e) {
      this.print(`  (no events: ${(e as Error).message})`);
    }
    this.print("  wccpd's last log lines:");
    for (const l of (this.daemon?.lines() ?? []).slice(-15)) this.print(`    ${l.slice(0, 400)}`);
  }

  /** Lets the client run for ms, saying so on the progress line. */
  private async hold(ms: number, what: string): Promise<void> {
    const t0 = Date.now();
    while (Date.now() - t0 < ms) {
      this.activity = `${what} (${((Date.now() - t0) / 1000).toFixed(0)}/${Math.round(ms / 1000)} s)`;
      await sleep(200);
    }
  }

  /** Lets the client run for ms and returns what it saw in that window. */
  private async observe(ms: number, what: string): Promise<{ seen: Seen; from: number; to: number }> {
    const from = Date.now();
    await this.hold(ms, what);
    const to = Date.now();
    // Requests started in the window; wait for their answers (bounded by the client's 2 s timeout).
    await sleep(2200);
    return { seen: summarize(this.since(from, to)), from, to };
  }

  private async pause(next: string): Promise<void> {
    if (this.o.ci || this.o.pauseMs === 0) return;
    this.activity = `next: ${next}`;
    const prompt = process.stdin.isTTY
      ? `press Enter, or wait ${this.o.pauseMs / 1000} s`
      : `in ${this.o.pauseMs / 1000} s`;
    this.print(`  ... next: ${next} (${prompt}; the page shows it live)`);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, this.o.pauseMs);
      const rl = process.stdin.isTTY ? createInterface({ input: process.stdin }) : null;
      rl?.once('line', done);
      function done(): void {
        clearTimeout(timer);
        rl?.close();
        resolve();
      }
    });
  }

  async story(): Promise<void> {
    const lab = this.lab!;
    const addr = (i: number): string => lab.engineAddress(i);
    const name = (i: number): string => `engine${i}`;

    await this.step(0, 'no engine yet: clients reach the origin directly', async () => {
      const w = await this.observe(4000, 'traffic with no engine');
      const failures: string[] = [];
      const direct = w.seen.servedBy.get('origin') ?? 0;
      if (w.seen.requests === 0) failures.push('the client sent nothing');
      if (direct !== w.seen.requests)
        failures.push(`${w.seen.requests - direct} of ${w.seen.requests} requests not answered directly by the origin`);
      return { ok: failures.length === 0, failures, figures: describeSeen(w.seen) };
    });
    await this.pause('two engines register');

    let twoTable: BucketsView | null = null;
    await this.step(1, 'two engines register, share the buckets and become warm sources', async () => {
      const t0 = Date.now();
      await Promise.all([lab.startSquid(1, SQUID), lab.startSquid(2, SQUID)]);
      const got = await this.waitTable(
        'engine1 and engine2 registering',
        (b) => {
          const s = shares(b.buckets);
          return s.get(addr(1)) === 128 && s.get(addr(2)) === 128;
        },
        60_000,
      );
      twoTable = got.table;
      const w = await this.observe(5000, 'two engines serving');
      // Warm sources: a previous owner must have held a bucket minSourceHold (its cache fills meanwhile: the client
      // asks for each bucket's object every 256 requests).
      await this.hold(
        got.at + (MIN_SOURCE_HOLD_S + 1) * 1000 - Date.now(),
        `engine1 and engine2 holding their buckets ${MIN_SOURCE_HOLD_S} s (minSourceHold) while their caches fill`,
      );
      const heldS = (Date.now() - got.at) / 1000;
      const table = got.table.buckets;
      const logs = new Map([1, 2].map((i) => [addr(i), lab.squidAccessLog(i)]));
      const cached = table.filter((owner, b) =>
        (logs.get(owner ?? '') ?? []).some((e) => e.url === objectUrl(b) && e.status === 200),
      ).length;
      const warming = (await this.engineViews()).filter((e) => e.warmup !== null).map((e) => e.address);
      const failures: string[] = [];
      for (const i of [1, 2]) if (!(w.seen.servedBy.get(name(i)) ?? 0)) failures.push(`${name(i)} served no request`);
      if (w.seen.errors > 0) failures.push(`${w.seen.errors} failed requests while two engines served`);
      const direct = w.seen.servedBy.get('origin') ?? 0;
      if (direct > 0) failures.push(`${direct} requests still went direct`);
      if (cached < 256) failures.push(`only ${cached} of the 256 working-set objects are in their owner's access.log`);
      if (warming.length > 0) failures.push(`${warming.join(', ')} warmed, though the engines started together`);
      return {
        ok: failures.length === 0,
        failures,
        figures:
          `registered and serving ${((got.at - t0) / 1000).toFixed(1)} s after Squid started; buckets ` +
          `${describeShares(got.table.buckets)}; client: ${describeSeen(w.seen)}; held their buckets ` +
          `${heldS.toFixed(1)} s (minSourceHold ${MIN_SOURCE_HOLD_S} s, a lab value): warm sources, with ${cached} of ` +
          `the 256 working-set objects in their owner's cache (its access.log); no warm-up between them (engines ` +
          `that start together warm nothing from each other)`,
      };
    });
    await this.pause('a third engine is hot-inserted');

    let threeTable: BucketsView | null = null;
    await this.step(2, 'a third engine is hot-inserted, takes its share and is warmed up', async () => {
      const before = twoTable ?? (await this.buckets());
      // Where the previous owners' access.logs stand, and what the origin served so far.
      const sourceFrom = new Map([1, 2].map((i) => [addr(i), lab.squidAccessLog(i).length]));
      const originBefore = await this.originCounts();
      const t0 = Date.now();
      await lab.startSquid(3, SQUID);
      const got = await this.waitTable('engine3 joining', (b) => (shares(b.buckets).get(addr(3)) ?? 0) >= 85, 60_000);
      threeTable = got.table;
      const moved = got.table.buckets.filter((e, b) => e !== before.buckets[b]);
      const gained = new Set(
        got.table.buckets.flatMap((e, b) => (e === addr(3) && before.buckets[b] !== e ? [b] : [])),
      );
      const share = shares(got.table.buckets).get(addr(3)) ?? 0;
      // The buckets being warmed, as the page shows them (striped): engine3's gains, each from its previous owner.
      const warmingNow = (await this.buckets()).warming ?? [];
      const e3 = (await this.engineViews()).find((e) => e.address === addr(3));
      // Each bucket's object comes once every 256 requests: 8 s covers every bucket at 40 requests/s.
      const w = await this.observe(Math.max(8000, (256 / this.o.rate) * 1000 + 1500), 'engine3 warming up');
      const served3 = w.seen.servedBy.get(name(3)) ?? 0;
      const answered = w.seen.requests - w.seen.errors;

      // What happened to the newcomer's first misses, from Squid's and the origin's own records.
      const misses = missesIn(lab.squidAccessLog(3), gained);
      const relayed = misses.filter(viaBroker);
      const sourceLines = new Map([1, 2].map((i) => [addr(i), lab.squidAccessLog(i).slice(sourceFrom.get(addr(i)))]));
      const unconfirmed = relayed.filter((e) => {
        const b = objectBucket(e.url);
        return b === null || !servedToBroker(sourceLines.get(before.buckets[b] ?? '') ?? [], e.url);
      });
      const fromOrigin = originFetches(originBefore, await this.originCounts(), gained);
      this.print(warmupLine(misses.length, relayed.length, fromOrigin));

      const failures: string[] = [...warmupShortfalls(misses.length, fromOrigin)];
      if (unconfirmed.length > 0) {
        failures.push(
          `${unconfirmed.length} objects came through the broker without a hit in their previous owner's access.log ` +
            `(e.g. ${unconfirmed[0]?.url})`,
        );
      }
      if (warmingNow.length !== gained.size || warmingNow.some((x) => x.engine !== addr(3) || !gained.has(x.bucket)))
        failures.push(
          `the API shows ${warmingNow.length} buckets being warmed, not engine3's ${gained.size} gained ones`,
        );
      if (e3?.warmup?.warming !== true) failures.push('engine3 was not warming once it held its buckets');
      if (this.o.screenshot) await this.screenshot(this.o.screenshot);
      if (!this.o.ci && this.o.pauseMs > 0) {
        this.print(
          `  engine3 warms now: watch it on ${this.bold(this.url + '/')} (its warm-up column: peer hits, time left; ` +
            'its gained buckets striped in the grid; the warm-up event)',
        );
        await this.pause(`engine3's warm-up ending (its duration: ${WARMUP_DURATION_S} s, a lab value)`);
      }
      // Then the warm-up ends: when, and why (wccpd's warm-up event).
      const ended = await this.waitWarmupEnd(addr(3), t0, (WARMUP_DURATION_S + 30) * 1000);
      if (typeof ended === 'string') failures.push(ended);
      if (share < 85 || share > 86)
        failures.push(`engine3 holds ${share} buckets, not its share of 256 / 3 (85 or 86)`);
      if (moved.length !== share || moved.some((e) => e !== addr(3))) {
        failures.push(
          `${moved.length} buckets moved, ${moved.filter((e) => e !== addr(3)).length} of them not to engine3`,
        );
      }
      if (answered > 0 && (served3 / answered < 0.2 || served3 / answered > 0.47)) {
        failures.push(`engine3 served ${served3} of ${answered} requests, far from a third`);
      }
      if (w.seen.errors > 0) failures.push(`${w.seen.errors} failed requests`);
      return {
        ok: failures.length === 0,
        failures,
        figures:
          `engine3 serving ${((got.at - t0) / 1000).toFixed(1)} s after start with ${share} buckets; ${moved.length} ` +
          `buckets moved, all to it; buckets ${describeShares(got.table.buckets)}; client: ${describeSeen(w.seen)} ` +
          `(engine3 ${answered === 0 ? 0 : Math.round((served3 / answered) * 100)}%); ${warmingNow.length} buckets ` +
          `being warmed; ${warmupLine(misses.length, relayed.length, fromOrigin)} (engine3's access.log: misses in ` +
          `its gained buckets, SIBLING_HIT through ${ROUTER_ADDRESS}, each a hit in its previous owner's access.log; ` +
          `the origin's counts); ${typeof ended === 'string' ? ended : ended.text}`,
      };
    });
    await this.pause('engine2 is killed (SIGKILL, like a crash)');

    await this.step(3, 'one engine is killed: its buckets heal onto the others, its objects are gone', async () => {
      const before = threeTable ?? (await this.buckets());
      const survivorsFrom = new Map([1, 3].map((i) => [i, lab.squidAccessLog(i).length]));
      const originBefore = await this.originCounts();
      const tKill = Date.now();
      await lab.stopSquid(2, { kill: true });
      const got = await this.waitTable(
        'the gateway noticing engine2 is gone',
        (b) => !b.buckets.includes(addr(2)),
        60_000,
      );
      // When wccpd decided (its event's time), not when this poll saw it: on a busy machine the poll lags.
      const events = await this.api<{ events: { time: number; type: string; engine?: string; to?: string }[] }>(
        'events?limit=50',
      );
      const decided = events.events.find(
        (e) => e.type === 'engine-state' && e.engine === addr(2) && e.time >= tKill && e.to !== 'usable',
      );
      const healMs = (decided?.time ?? got.at) - tKill;
      const moved = got.table.buckets.filter((e, b) => e !== before.buckets[b]).length;
      const wrongly = got.table.buckets.filter(
        (e, b) => before.buckets[b] !== addr(2) && e !== before.buckets[b],
      ).length;
      // A request started once the kernel holds the new table must not fail.
      const w = await this.observe(5000, 'two engines serving after the kill');
      const during = summarize(this.since(tKill, got.inKernel));
      const after = summarize(this.since(got.inKernel));
      const lastFailed = this.since(tKill)
        .filter((r) => r.status !== 200)
        .at(-1);
      const failures: string[] = [];
      // The claim is that the probes caught it, long before 3 x HERE_I_AM_T (30 s) of silence would have; how long
      // it took is printed, not judged, since a busy machine delays probes.
      const e2 = got.engines.engines.find((e) => e.address === addr(2));
      if (e2?.state !== 'suspect')
        failures.push(`engine2 is ${e2?.state ?? 'missing'} (${e2?.reason ?? ''}), not suspect by its probes`);
      if (healMs > HERE_I_AM_DETECTION_MS / 2)
        failures.push(`healing took ${healMs} ms, not far below the ${HERE_I_AM_DETECTION_MS} ms HERE_I_AM timeout`);
      if (wrongly > 0) failures.push(`${wrongly} buckets of the surviving engines moved`);
      if (after.errors > 0) failures.push(`${after.errors} requests failed after healing`);
      if (w.seen.servedBy.get(name(2))) failures.push('engine2 still served requests');
      // What warm-up does not cover: the dead engine's buckets went to engines that have none of its objects, and
      // there is no warm source to ask (the broker asks only a live previous owner).
      const orphans = new Set(before.buckets.flatMap((e, b) => (e === addr(2) ? [b] : [])));
      const misses = [1, 3].flatMap((i) => missesIn(lab.squidAccessLog(i).slice(survivorsFrom.get(i)), orphans));
      const relayed = misses.filter(viaBroker).length;
      const fromOrigin = originFetches(originBefore, await this.originCounts(), orphans);
      const started = (await this.warmupEvents(tKill)).filter((e) => e.to === 'warming');
      const notWarmed =
        `not warmed: ${misses.length} misses in engine2's former buckets, ${relayed} from previous owners, ` +
        `${fromOrigin} from the origin`;
      this.print(notWarmed);
      if (relayed > 0) failures.push(`${relayed} of the dead engine's objects came through the broker`);
      if (started.length > 0) failures.push(`a warm-up started: ${started.map((e) => String(e.engine)).join(', ')}`);
      if (fromOrigin === 0) failures.push("none of engine2's objects was fetched from the origin again");
      return {
        ok: failures.length === 0,
        failures,
        figures:
          `wccpd moved engine2's buckets ${(healMs / 1000).toFixed(1)} s after the kill (engine2 ${e2?.state}: ${e2?.reason}; ` +
          `silence alone would take ${HERE_I_AM_DETECTION_MS / 1000} s), seen in the kernel by ${((got.inKernel - tKill) / 1000).toFixed(1)} s; ` +
          `${moved} buckets moved (only engine2's); failed requests: ${during.errors} while healing (of ${during.requests}; ` +
          `the last started ${lastFailed ? `${((lastFailed.t - tKill) / 1000).toFixed(1)} s` : '-'} after the kill), ` +
          `${after.errors} after; buckets ${describeShares(got.table.buckets)}; client after: ${describeSeen(w.seen)}; ` +
          `${notWarmed} (a dead engine's objects are gone: its buckets start no warm-up)`,
      };
    });
    await this.pause('all engines stop');

    let healedTable: BucketsView | null = null;
    await this.step(4, 'all engines stop: bypass, clients still get pages from the origin', async () => {
      healedTable = await this.buckets();
      const t0 = Date.now();
      // One after the other, so the order is known: engine3, the last one out, holds every bucket when it leaves.
      await lab.stopSquid(1, { graceMs: 1500 });
      await this.waitTable('engine1 leaving', (b) => !b.buckets.includes(addr(1)), 60_000);
      await lab.stopSquid(3, { graceMs: 1500 });
      const got = await this.waitTable('bypass', (b) => b.buckets.every((e) => e === null), 60_000);
      const status = await this.api<StatusView>('status');
      const svc = status.services.find((s) => s.id === 0);
      const transition = summarize(this.since(t0, got.inKernel));
      const w = await this.observe(5000, 'bypass');
      const direct = w.seen.servedBy.get('origin') ?? 0;
      const failures: string[] = [];
      if (svc?.state !== 'bypass') failures.push(`service 0 is ${svc?.state ?? 'missing'}, not bypass`);
      if (w.seen.requests === 0 || direct !== w.seen.requests) {
        failures.push(`${w.seen.requests - direct} of ${w.seen.requests} requests not served by the origin in bypass`);
      }
      return {
        ok: failures.length === 0,
        failures,
        figures:
          `bypass ${((got.at - t0) / 1000).toFixed(1)} s after the stop (service state ${svc?.state}); ` +
          `${transition.errors} failed requests while stopping (of ${transition.requests}); in bypass: ${describeSeen(w.seen)}`,
      };
    });
    await this.pause('the engines return');

    await this.step(5, 'the engines return: each gets the same buckets as before, and needs no warm-up', async () => {
      // In the reverse order of leaving: engine3 (it left last, holding every bucket, and wccpd remembers all 256 for
      // it), then engine1, which takes back what it held: the table before the stop. Then engine2, killed earlier,
      // takes back its buckets: the table before the kill. (Returning in another order, engine3's memory of all 256
      // buckets competes with engine1's, and some buckets land elsewhere.)
      const originBefore = await this.originCounts();
      const t0 = Date.now();
      await lab.startSquid(3, SQUID);
      await this.waitTable('engine3 returning', (b) => shares(b.buckets).get(addr(3)) === 256, 60_000);
      await lab.startSquid(1, SQUID);
      const two = await this.waitTable(
        'engine1 returning',
        (b) => shares(b.buckets).get(addr(1)) === 128 && shares(b.buckets).get(addr(3)) === 128,
        60_000,
      );
      const t2 = Date.now();
      await lab.startSquid(2, SQUID);
      const three = await this.waitTable(
        'engine2 returning',
        (b) => (shares(b.buckets).get(addr(2)) ?? 0) >= 85,
        60_000,
      );
      const w = await this.observe(5000, 'three engines serving again');
      const differ = (a: BucketsView | null, b: BucketsView): number =>
        a === null ? 256 : b.buckets.filter((e, i) => e !== a.buckets[i]).length;
      const d13 = differ(healedTable, two.table);
      const d2 = differ(threeTable, three.table);
      const failures: string[] = [];
      if (d13 > 0)
        failures.push(`${d13} buckets differ from the table before the stop once engine3 and engine1 are back`);
      if (d2 > 0) failures.push(`${d2} buckets differ from the table before the kill once engine2 is back`);
      for (const i of ENGINES) if (!(w.seen.servedBy.get(name(i)) ?? 0)) failures.push(`${name(i)} served no request`);
      if (w.seen.errors > 0) failures.push(`${w.seen.errors} failed requests`);
      // Their own buckets (each held them within historyWindow): a sticky return, no gain, so no warm-up to run.
      const started = (await this.warmupEvents(t0)).filter((e) => e.to === 'warming');
      const warming = (await this.engineViews()).filter((e) => e.warmup?.warming).map((e) => e.address);
      if (started.length > 0 || warming.length > 0)
        failures.push(`a warm-up started for ${[...started.map((e) => String(e.engine)), ...warming].join(', ')}`);
      const refetched = originFetches(
        originBefore,
        await this.originCounts(),
        Array.from({ length: 256 }, (_, b) => b),
      );
      return {
        ok: failures.length === 0,
        failures,
        figures:
          `no warm-up: each engine got its own buckets back, which its cache held before (no warm-up event, none ` +
          `warming; the demo's Squids cache in memory only, so after their restart ${refetched} objects came from ` +
          `the origin again); ` +
          `engine3 then engine1 serving ${((two.at - t0) / 1000).toFixed(1)} s after engine3 started, ${256 - d13} of 256 buckets ` +
          `as before the stop; engine2 ${((three.at - t2) / 1000).toFixed(1)} s after start, ${256 - d2} of 256 buckets ` +
          `as before the kill; buckets ${describeShares(three.table.buckets)}; client: ${describeSeen(w.seen)}`,
      };
    });
  }

  /**
   * Waits (bounded) until `engine`'s warm-up has ended; says when (from the start event, both wccpd's) and why, or
   * what was seen instead.
   */
  private async waitWarmupEnd(engine: string, since: number, timeoutMs: number): Promise<{ text: string } | string> {
    const deadline = Date.now() + timeoutMs;
    let view: EngineView | undefined;
    while (Date.now() < deadline) {
      view = (await this.engineViews()).find((e) => e.address === engine);
      if (view?.warmup && !view.warmup.warming) break;
      this.activity = `${engine} warming: ${view?.flagsText.find((f) => f.startsWith('warm')) ?? 'no warm-up'}`;
      await sleep(500);
    }
    const w = view?.warmup;
    if (!w || w.warming) return `${engine}'s warm-up had not ended ${timeoutMs / 1000} s after it joined`;
    const events = (await this.warmupEvents(since)).filter((e) => e.engine === engine);
    const at = (e: EventView | undefined) => (e === undefined ? NaN : typeof e.at === 'number' ? e.at : e.time);
    const start = at(events.find((e) => e.to === 'warming'));
    const end = events.find((e) => e.to === 'warm');
    const after =
      Number.isNaN(start) || end === undefined ? '' : ` ${((at(end) - start) / 1000).toFixed(1)} s after it started`;
    return {
      text:
        `engine3's warm-up ended${after}, ended by ${w.endReason} (${String(end?.reason ?? '?')}): ` +
        `${w.peerHits}/${w.queries} peer hits`,
    };
  }

  /** With --screenshot: a headless Chromium opens the page at the start, so its chart has the story's history. */
  private async openBrowserPage(): Promise<void> {
    const { chromium } = await import('playwright-core');
    const browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
    await page.goto(`${this.url}/`);
    this.browser = {
      close: () => browser.close(),
      screenshot: (path) => page.screenshot({ path }).then(() => undefined),
    };
  }

  private async screenshot(file: string): Promise<void> {
    if (!this.browser) return;
    mkdirSync(dirname(file), { recursive: true });
    await this.browser.screenshot(file);
    this.print(`  screenshot of the page: ${file}`);
    await this.browser.close();
    this.browser = null;
  }

  async finish(): Promise<void> {
    const all = summarize(this.requests);
    this.print('');
    this.print(this.bold('The client, over the whole demo') + `: ${describeSeen(all)}`);
    if (!this.o.ci && this.o.pauseMs > 0) {
      await this.pause('tearing the lab down (the page goes away)');
    }
  }

  /** Removes everything this run created: client, relay, lab processes (by PID), namespaces (by name), files. */
  cleanUp(): Promise<void> {
    this.cleaning ??= (async () => {
      if (this.progressTimer) clearInterval(this.progressTimer);
      await this.browser?.close().catch(() => undefined);
      this.activity = 'cleaning up';
      await this.relay?.close().catch(() => undefined);
      await this.traffic?.stop(1000).catch(() => undefined);
      if (this.lab) {
        const id = this.lab.id;
        await this.lab.destroy().catch((e: Error) => this.print(`cleanup: ${e.message}`));
        // By name too: any namespace of this run that survived (e.g. Ctrl-C while the lab was being built).
        const left = listNamespaces().filter((n) => n.startsWith(`${id}-`));
        for (const n of left) {
          try {
            execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore', timeout: 5000 });
          } catch {
            /* gone */
          }
        }
      } else {
        for (const n of listNamespaces().filter((x) => x.startsWith(`${NS_PREFIX}${process.pid}-`))) {
          try {
            execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore', timeout: 5000 });
          } catch {
            /* gone */
          }
        }
      }
    })();
    return this.cleaning;
  }
}

function listNamespaces(): string[] {
  try {
    return execFileSync('ip', ['netns', 'list'], { encoding: 'utf8', timeout: 5000 })
      .split('\n')
      .map((l) => l.split(' ')[0] ?? '')
      .filter(Boolean);
  } catch {
    return [];
  }
}

function shares(buckets: ReadonlyArray<string | null>): Map<string | null, number> {
  const m = new Map<string | null, number>();
  for (const b of buckets) m.set(b, (m.get(b) ?? 0) + 1);
  return m;
}

function describeShares(buckets: ReadonlyArray<string | null>): string {
  return [...shares(buckets)]
    .sort(([a], [b]) => String(a).localeCompare(String(b)))
    .map(([k, v]) => `${k ?? 'none'} ${v}`)
    .join(', ');
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function main(): Promise<number> {
  const o = parseArgs(process.argv.slice(2));
  const missing = missingPrerequisites();
  if (missing.length > 0) {
    process.stderr.write(
      `scripts/demo needs ${missing.join(', ')}: it builds network namespaces with nft and runs ` +
        "Debian's squid; run it as root on Debian 12 (sudo scripts/demo)\n",
    );
    return 1;
  }
  if (o.screenshot && !existsSync('/usr/bin/chromium')) {
    process.stderr.write("scripts/demo: --screenshot needs Debian's chromium at /usr/bin/chromium\n");
    return 1;
  }
  const demo = new Demo(o);
  let interrupted = false;
  const onSignal = (sig: string): void => {
    if (interrupted) {
      process.stdout.write('\nstill cleaning up, please wait\n');
      return;
    }
    interrupted = true;
    process.stdout.write(`\n${sig}: removing the lab (processes, namespaces, rules)\n`);
    void demo.cleanUp().finally(() => {
      process.stdout.write('removed\n');
      process.exit(130);
    });
  };
  process.on('SIGINT', () => onSignal('SIGINT'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  try {
    await demo.setUp();
    await demo.story();
    await demo.finish();
  } catch (e) {
    if (!interrupted) process.stderr.write(`\nscripts/demo: ${(e as Error).message}\n`);
    demo.results.push({ title: 'run', ok: false, figures: '', failures: [(e as Error).message] });
  } finally {
    if (!interrupted) await demo.cleanUp();
  }
  if (interrupted) await new Promise(() => undefined);
  const failed = demo.results.filter((r) => !r.ok);
  process.stdout.write(
    failed.length === 0
      ? `demo: every step showed what it claims (${demo.results.length} steps)\n`
      : `demo: ${failed.length} step(s) did not show what they claim: ${failed.map((r) => r.title).join('; ')}\n`,
  );
  return failed.length === 0 ? 0 : 1;
}

process.exit(await main());
