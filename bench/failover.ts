// Failure detection in the lab, with Debian's Squid as engines and client load running. Three faults: a crash (kill -9
// of the Squid process: the kernel refuses connections), a hang (SIGSTOP: the kernel still completes handshakes) and
// a link cut (every packet to and from the engine dropped, ARP included). For each: the time from the fault to the
// last of the engine's buckets served by another engine, seen from the client (the first request in each bucket
// answered elsewhere), beside the daemon's own verdict and table change (its log), and the failed client requests.
// First with wccpd's defaults (no `health` block), then, in the same run, with the draft's timers only (probes off:
// removal at 3 x HERE_I_AM_T), and the ratio. Then each engine is restored and must be usable again with its very
// buckets; after SIGCONT only once the HTTP probe passed `rise` times (the return's reason says so).
//   sudo node --import tsx bench/failover.ts [--trials 20] [--draft-rounds 4] [--kinds crash,hang,cut]
//   sudo node --import tsx bench/failover.ts --soak [--minutes 10] [--loss 20]
// See bench/README.md and docs/health.md.
import { createLab, type Lab, type LabProcess } from '../test/lab/lab.js';
import {
  API,
  getBuckets,
  getEngines,
  getStatus,
  startDaemon,
  writeConfig,
  writeLabConfig,
  type Daemon,
} from '../test/e2e/harness.js';
import { ROUTER_ADDRESS, originAddressForBucket } from '../test/lab/addresses.js';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadavg } from 'node:os';
import { spawn, type ChildProcess } from 'node:child_process';
import { run, terminate } from '../test/lab/proc.js';
import { ClientLoad, sleep } from './failover/client.js';
import { runSoak } from './failover/soak.js';
import { DEFAULT_PROBE } from '../src/config/parse.js';
import { checkArgs, cleanUpOnClosedOutput, numberOption, orExit } from './cli.js';
import { BenchError } from './dataplane-measure.js';
import type { Cli } from './cli.js';

type Kind = 'crash' | 'hang' | 'cut';
const KINDS: readonly Kind[] = ['crash', 'hang', 'cut'];
const TARGET_MEDIAN_MS: Record<Kind, number> = { crash: 1000, hang: 2000, cut: 2000 };
const TARGET_MAX_MS = 3000;

const CLI: Cli = {
  name: 'bench/failover',
  usage: `usage (root): node --import tsx bench/failover.ts [--trials N] [--draft-rounds N] [--kinds crash,hang,cut]
       [--relay-trials N] [--relay-rate 50M]
       node --import tsx bench/failover.ts --soak [--minutes N] [--loss PERCENT]
Faults Debian Squid engines in the lab under client load and times the fault to the last of the engine's buckets
served elsewhere, with wccpd's defaults (--trials per kind, 20), the same while the warm-up broker relays at its
budget (--relay-trials per kind, 5; warmup.maxRelayRate --relay-rate) and the draft's timers (--draft-rounds, 4); --soak:
--loss % loss each way on every engine link and busy CPUs for --minutes (10, 20 %), counting false removals
(docs/health.md).`,
  values: ['--trials', '--draft-rounds', '--kinds', '--minutes', '--loss', '--relay-trials', '--relay-rate'],
  switches: ['--soak'],
};
const args = orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));
const num = (name: string, dflt: number): number => numberOption(CLI, args, name, dflt, true);
const TRIALS = num('--trials', 20);
const DRAFT_ROUNDS = num('--draft-rounds', 4);
const RELAY_TRIALS = num('--relay-trials', 5);
const RELAY_RATE = args.includes('--relay-rate') ? (args[args.indexOf('--relay-rate') + 1] ?? '50M') : '50M';
const RELAY_LOAD = fileURLToPath(new URL('./failover/relay-load.mjs', import.meta.url));
/** The relay phase's objects: under the lab Squid's maximum_object_size_in_memory (1 MB), fresh for an hour. */
const RELAY_OBJECT = '/long/bytes/900000';
const RELAY_OBJECTS = 8;
const kindsArg = args.includes('--kinds') ? (args[args.indexOf('--kinds') + 1] ?? '') : KINDS.join(',');
const kinds = orExit(CLI, () => {
  const want = kindsArg.split(',');
  if (want.some((k) => !(KINDS as readonly string[]).includes(k)))
    throw new BenchError(`--kinds takes a comma list of ${KINDS.join(', ')}; got "${kindsArg}"`);
  return KINDS.filter((k) => want.includes(k));
});
const LOAD = { fastMs: 100, slowMs: 2000, timeoutMs: 2000, maxS: 3600 };

// Every packet of the engine's eth0 dropped, both ways, ARP included; the link itself stays up (a dead switch port
// or a cut cable behind a switch: nothing tells either side).
// The rules go to an `nft -i` started beforehand in the engine's namespace, one line (one transaction): starting
// `ip netns exec ... nft` at the fault took 0.1 to 0.5 s on a busy machine, counted against wccpd.
const CUT_TABLE = 'wccpbenchcut';
const CUT_LINE =
  `add table netdev ${CUT_TABLE}; add chain netdev ${CUT_TABLE} in { type filter hook ingress device "eth0" priority -500; policy drop; }; ` +
  `add chain netdev ${CUT_TABLE} out { type filter hook egress device "eth0" priority -500; policy drop; }; list table netdev ${CUT_TABLE}\n`;

/** A long-lived `nft -i` in one engine's namespace: a cut is one write, confirmed by the listing it prints. */
class NftShell {
  private readonly child: ChildProcess;
  private out = '';
  constructor(ns: string) {
    this.child = spawn('ip', ['netns', 'exec', ns, 'nft', '-i'], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout?.setEncoding('utf8').on('data', (s: string) => {
      this.out = (this.out + s).slice(-4096);
    });
    this.child.stderr?.setEncoding('utf8').on('data', (s: string) => {
      this.out = (this.out + s).slice(-4096);
    });
  }
  /** Writes the cut; resolves with the time nft printed the new table (the cut is in force by then). */
  async cut(): Promise<number> {
    this.out = '';
    this.child.stdin?.write(CUT_LINE);
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      if (this.out.includes(`table netdev ${CUT_TABLE}`)) return Date.now();
      await sleep(5);
    }
    throw new Error(`nft -i did not apply the cut within 10 s: ${this.out.slice(-300)}`);
  }
  async stop(): Promise<void> {
    this.child.stdin?.end();
    if (this.child.pid !== undefined) await terminate([this.child.pid], 1000);
  }
}

interface LogEvent {
  time: number;
  event?: string;
  engine?: string;
  from?: string;
  to?: string;
  reason?: string;
  changeNumber?: number;
}

function events(daemon: Daemon): LogEvent[] {
  const out: LogEvent[] = [];
  for (const l of daemon.proc.lines()) {
    if (!l.startsWith('{')) continue;
    try {
      out.push(JSON.parse(l) as LogEvent);
    } catch {
      /* not a log line */
    }
  }
  return out;
}

interface Trial {
  kind: Kind;
  engine: number;
  /** Client side: fault -> the last of its buckets first served elsewhere (null: not within the bound). */
  movedMs: number | null;
  /** Daemon side: fault -> verdict (engine-state event), fault -> table change (its log line). */
  verdictMs: number | null;
  tableMs: number | null;
  buckets: number;
  /** Failed requests in the engine's buckets from the fault until they were served elsewhere; elsewhere meanwhile. */
  failedOwn: number;
  failedOther: number;
  /** Failed requests from the restore until it held its buckets again (defaults only). */
  failedReturn: number;
  /** restore -> usable with exactly its old buckets, and the reason the daemon gave. */
  backMs: number | null;
  sameBuckets: boolean;
  returnReason: string;
}

class Engines {
  readonly squid = new Map<number, LabProcess>();
  private readonly nft = new Map<number, NftShell>();
  /** How long the last fault took to be in force after its time (the cut's nft transaction). */
  lastApplyMs = 0;
  constructor(
    readonly lab: Lab,
    /** The warm-up broker's address: each Squid gets the sibling lines of docs/warmup.md. */
    readonly sibling?: string,
  ) {}
  name(i: number): string {
    return `engine${i}`;
  }
  async start(i: number): Promise<void> {
    this.squid.set(i, await this.lab.startSquid(i, this.sibling === undefined ? {} : { sibling: this.sibling }));
  }
  pid(i: number): number {
    const p = this.squid.get(i);
    if (!p) throw new Error(`engine ${i} runs no Squid`);
    return p.pid;
  }
  /** Applies the fault and returns its time (taken before, so an action's own latency counts against wccpd). */
  async fault(kind: Kind, i: number): Promise<number> {
    const shell = kind === 'cut' ? this.shell(i) : null;
    const t0 = Date.now();
    if (kind === 'crash') process.kill(this.pid(i), 'SIGKILL');
    else if (kind === 'hang') process.kill(this.pid(i), 'SIGSTOP');
    this.lastApplyMs = shell !== null ? (await shell.cut()) - t0 : Date.now() - t0;
    return t0;
  }
  /** Starts the engine's `nft -i` ahead of its cut. */
  shell(i: number): NftShell {
    const s = this.nft.get(i) ?? new NftShell(this.lab.engineNs(i));
    this.nft.set(i, s);
    return s;
  }
  async stop(): Promise<void> {
    await Promise.all([...this.nft.values()].map((s) => s.stop()));
  }
  async restore(kind: Kind, i: number): Promise<void> {
    if (kind === 'crash') {
      await this.lab.stopSquid(i, { kill: true });
      await this.start(i);
    } else if (kind === 'hang') {
      process.kill(this.pid(i), 'SIGCONT');
    } else {
      await this.lab.exec(this.lab.engineNs(i), 'nft', ['delete', 'table', 'netdev', CUT_TABLE]);
    }
  }
}

/**
 * Whether the engines `back` hold their old buckets again: only buckets they held before `pre`'s fault, and all of them
 * but at most one each (256 buckets do not split evenly: the odd one may stay with an engine that kept its share).
 */
function regained(
  pre: ReadonlyArray<string | null>,
  now: ReadonlyArray<string | null>,
  back: readonly string[],
): boolean {
  return back.every((a) => {
    const before = owned(pre, a);
    const after = owned(now, a);
    return after.every((b) => pre[b] === a) && after.length >= before.length - 1;
  });
}

/** Polls until `count` engines are usable and the table has no empty bucket (and, with `expect`, they regained theirs).
 * */
async function steady(
  lab: Lab,
  count: number,
  timeoutMs: number,
  expect?: { pre: ReadonlyArray<string | null>; back: readonly string[] },
): Promise<{ buckets: (string | null)[]; at: number }> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const [e, b] = await Promise.all([getEngines(lab), getBuckets(lab)]);
      const usable = e.engines.filter((x) => x.state === 'usable' && x.buckets > 0).length;
      const full = !b.buckets.includes(null);
      const same = expect === undefined || regained(expect.pre, b.buckets, expect.back);
      if (usable === count && full && same) return { buckets: [...b.buckets], at: Date.now() };
      last =
        `${usable}/${count} usable, ${full ? 'no' : 'some'} empty bucket(s), ${same ? 'regained' : 'not regained'}; ` +
        e.engines.map((x) => `${x.address} ${x.state} ${x.buckets} (${x.reason})`).join('; ');
    } catch (err) {
      last = (err as Error).message;
    }
    await sleep(100);
  }
  throw new Error(`not steady within ${timeoutMs} ms: ${last}`);
}

/** The daemon's data plane applies so far: count and total seconds (its /metrics histogram). */
async function applies(lab: Lab): Promise<{ count: number; sum: number }> {
  const r = await lab.exec(lab.ns.gw, 'curl', ['-sS', '--noproxy', '*', '--max-time', '3', `${API}/metrics`], {
    allowFail: true,
    timeoutMs: 5000,
  });
  const sum = /^wccpd_dataplane_apply_seconds_sum\{[^}]*outcome="ok"[^}]*\} (\S+)$/m.exec(r.stdout);
  const count = /^wccpd_dataplane_apply_seconds_count\{[^}]*outcome="ok"[^}]*\} (\S+)$/m.exec(r.stdout);
  return { count: Number(count?.[1] ?? 0), sum: Number(sum?.[1] ?? 0) };
}

const owned = (buckets: ReadonlyArray<string | null>, addr: string): number[] =>
  buckets.flatMap((a, b) => (a === addr ? [b] : []));

/** The relay load's totals so far (its last line). */
function relayTotals(p: LabProcess | null): { bytes: number; ok: number; failed: number; miss: number } {
  const last = p?.lines().at(-1);
  return last
    ? (JSON.parse(last) as { bytes: number; ok: number; failed: number; miss: number })
    : { bytes: 0, ok: 0, failed: 0, miss: 0 };
}

async function rateWaits(lab: Lab): Promise<number> {
  return (await getStatus(lab)).warmup?.['http-rate-waits'] ?? 0;
}

function firstEvent(daemon: Daemon, after: number, pred: (e: LogEvent) => boolean): LogEvent | undefined {
  return events(daemon).find((e) => e.time >= after && pred(e));
}

/** What the relay phase's load moved while its trials ran. */
interface RelayRun {
  seconds: number;
  bytes: number;
  ok: number;
  failed: number;
  miss: number;
  rateWaits: number;
  rate: string;
}

/**
 * The warm-up broker relaying at its budget (warmup.maxRelayRate): engines 1 and 2 hold the buckets, engine 3 is
 * hot-inserted and warms (its gained buckets' previous owners are its sources); engine 1's Squid holds objects in
 * buckets engine 3 took from it, and from engine 3's address four loops ask the broker by ICP and fetch them
 * through it, without a pause, for the whole phase. Engine 2 (neither source nor newcomer) is faulted.
 */
async function relaySetup(lab: Lab, engines: Engines): Promise<{ daemon: Daemon; urls: string[] }> {
  const service = [
    '  - id: 0',
    '    failMode: open',
    '    clientInterfaces: [c0]',
    '    warmup: { duration: 30m, maxPeerHits: 1000000000, minHitRatio: 0, minSourceHold: 0s }',
    '    engines:',
    '      allow: [192.0.2.0/24]',
    '      lenientReceiveId: 2',
  ];
  const config = writeLabConfig(lab, 'relay', {
    top: ['timers:', '  hereIAm: 10s', 'warmup:', `  listen: ${ROUTER_ADDRESS}`, `  maxRelayRate: ${RELAY_RATE}`],
    services: service,
  });
  for (const i of [1, 2]) await engines.start(i);
  const daemon = await startDaemon(lab, config);
  const before = (await steady(lab, 2, 60_000)).buckets;
  await engines.start(3);
  const after = (await steady(lab, 3, 60_000)).buckets;
  const fromOne = after.flatMap((a, b) =>
    a === lab.engineAddress(3) && before[b] === lab.engineAddress(1) ? [b] : [],
  );
  const urls = fromOne.slice(0, RELAY_OBJECTS).map((b) => `http://${originAddressForBucket(b)}${RELAY_OBJECT}`);
  if (urls.length === 0) throw new BenchError('engine 3 took no bucket from engine 1');
  // Engine 1 caches them: fetched through it as a proxy from the router's address (its sibling lines allow it).
  for (const url of urls) {
    const r = await lab.exec(
      lab.ns.gw,
      'curl',
      [
        '-sS',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code}',
        '--max-time',
        '10',
        '-x',
        `http://${lab.engineAddress(1)}:3128`,
        url,
      ],
      { allowFail: true, timeoutMs: 15_000 },
    );
    if (r.stdout.trim() !== '200') throw new BenchError(`caching ${url} at engine 1: HTTP ${r.stdout} ${r.stderr}`);
  }
  return { daemon, urls };
}

/** wccpd's defaults: one engine faulted at a time in a lab of three; with `relay`, while the broker relays. */
async function defaultsPhase(trials: number, relay?: RelayRun): Promise<Trial[]> {
  const lab = await createLab({ engines: 3, name: relay ? 'forel' : 'fodef' });
  const out: Trial[] = [];
  let load: ClientLoad | null = null;
  let relayLoad: LabProcess | null = null;
  const engines = new Engines(lab, relay ? ROUTER_ADDRESS : undefined);
  const label = relay ? 'relays' : 'defaults';
  try {
    await lab.startOrigin();
    let daemon: Daemon;
    if (relay) {
      const r = await relaySetup(lab, engines);
      daemon = r.daemon;
      relayLoad = lab.spawn(lab.engineNs(3), process.execPath, [
        RELAY_LOAD,
        lab.engineAddress(3),
        ROUTER_ADDRESS,
        '3128',
        '3130',
        '4',
        ...r.urls,
      ]);
      for (let i = 1; i <= 3; i++) if (kinds.includes('cut')) engines.shell(i);
    } else {
      for (let i = 1; i <= 3; i++) {
        await engines.start(i);
        if (kinds.includes('cut')) engines.shell(i);
      }
      daemon = await startDaemon(lab, writeConfig(lab, 'defaults', {}));
      await steady(lab, 3, 60_000);
    }
    load = new ClientLoad(lab, LOAD);
    await sleep(3000);
    const relayStart = { at: Date.now(), waits: relay ? await rateWaits(lab) : 0, totals: relayTotals(relayLoad) };
    for (const kind of kinds) {
      for (let t = 0; t < trials; t++) {
        // With relays, engine 2: engine 1 is their source, engine 3 the newcomer.
        const i = relay ? 2 : (t % 3) + 1;
        const addr = lab.engineAddress(i);
        // A gateway so starved that the API does not answer for a minute ends the phase with the trials so far.
        const ready = await steady(lab, 3, 60_000).catch((e: Error) => {
          console.log(`  phase stopped: ${e.message.split('\n')[0]}`);
          return null;
        });
        if (ready === null) return out;
        const pre = ready.buckets;
        const mine = owned(pre, addr);
        load.prune(Date.now() - 5000);
        const a0 = await applies(lab);
        load.lateMostMs = 0;
        load.watch(engines.name(i), mine);
        await sleep(300);
        const t0 = await engines.fault(kind, i);
        const applied = engines.lastApplyMs;
        const served = await load.waitServed(mine, t0 + 10_000);
        const a1 = await applies(lab);
        const late = load.lateMostMs;
        const movedMs = served.size === mine.length ? Math.max(...served.values()) - t0 : null;
        const verdict = firstEvent(
          daemon,
          t0,
          (e) => e.event === 'engine-state' && e.engine === addr && e.from === 'usable',
        );
        const table = verdict ? firstEvent(daemon, verdict.time, (e) => e.event === 'table') : undefined;
        const tr = Date.now();
        await engines.restore(kind, i);
        const back = await steady(lab, 3, 30_000, { pre, back: [addr] }).catch((e: Error) => {
          console.log(`  ${e.message}`);
          return null;
        });
        const ret = firstEvent(daemon, tr, (e) => e.event === 'engine-state' && e.engine === addr && e.to === 'usable');
        await sleep(LOAD.timeoutMs + 300);
        const own = new Set(mine);
        const other = new Set(Array.from({ length: 256 }, (_, b) => b).filter((b) => !own.has(b)));
        const end = movedMs === null ? tr : t0 + movedMs;
        const why = new Map<string, number>();
        for (const r of load.failed(t0 - LOAD.timeoutMs, end))
          why.set(r.error ?? `HTTP ${r.status}`, (why.get(r.error ?? `HTTP ${r.status}`) ?? 0) + 1);
        const trial: Trial = {
          kind,
          engine: i,
          movedMs,
          buckets: mine.length,
          verdictMs: verdict ? verdict.time - t0 : null,
          tableMs: table ? table.time - t0 : null,
          failedOwn: load.failed(t0 - LOAD.timeoutMs, end, own).length,
          failedOther: load.failed(t0 - LOAD.timeoutMs, end, other).length,
          failedReturn: load.failed(tr, back?.at ?? Date.now()).length,
          backMs: back ? back.at - tr : null,
          sameBuckets: back !== null,
          returnReason: ret?.reason ?? '(none logged)',
        };
        out.push(trial);
        console.log(
          `  ${label} ${kind.padEnd(5)} #${String(t + 1).padStart(2)} engine${i}: ${fmt(trial.movedMs)} to the last of ` +
            `${mine.length} buckets elsewhere (${kind === 'cut' ? `cut in force after ${applied} ms, ` : ''}verdict ${fmt(trial.verdictMs)}, table ${fmt(trial.tableMs)}); failed ${trial.failedOwn} ` +
            `own + ${trial.failedOther} other (${[...why].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}); back in ${fmt(trial.backMs)} ${trial.sameBuckets ? 'with its buckets' : 'WITHOUT its buckets'}, ` +
            `"${trial.returnReason}"${trial.failedReturn > 0 ? `, ${trial.failedReturn} failed meanwhile` : ''}; apply ` +
            `${a1.count > a0.count ? `${((1000 * (a1.sum - a0.sum)) / (a1.count - a0.count)).toFixed(0)} ms` : '-'}, load generator ` +
            `late ${late.toFixed(0)} ms, load average ${loadavg()[0]?.toFixed(1)}`,
        );
      }
    }
    console.log(`  (client load generator: most timer lateness in one second ${load.lateMostMs.toFixed(0)} ms)`);
    if (relay) {
      const end = relayTotals(relayLoad);
      Object.assign(relay, {
        seconds: (Date.now() - relayStart.at) / 1000,
        bytes: end.bytes - relayStart.totals.bytes,
        ok: end.ok - relayStart.totals.ok,
        failed: end.failed - relayStart.totals.failed,
        miss: end.miss - relayStart.totals.miss,
        rateWaits: (await rateWaits(lab)) - relayStart.waits,
      });
    }
  } finally {
    if (relayLoad) await terminate([relayLoad.pid], 1000);
    await load?.stop();
    await engines.stop();
    await lab.destroy();
  }
  return out;
}

/**
 * The draft's timers (probes off): nine engines, six faulted at once (two per kind), so a round of ~30 s gives six
 * trials. A faulted engine's bucket that the daemon handed to another faulted engine (it cannot know) is left out of
 * that engine's client-side time, which would otherwise wait for the second removal too; the table is polled for that.
 */
async function draftPhase(rounds: number): Promise<Trial[]> {
  const N = 9;
  const faulted: { i: number; kind: Kind }[] = kinds.flatMap((kind, k) => [
    { i: 2 * k + 1, kind },
    { i: 2 * k + 2, kind },
  ]);
  const lab = await createLab({ engines: N, name: 'fodraft' });
  const out: Trial[] = [];
  let load: ClientLoad | null = null;
  const engines = new Engines(lab);
  try {
    await lab.startOrigin();
    for (let i = 1; i <= N; i++) await engines.start(i);
    for (const f of faulted) if (f.kind === 'cut') engines.shell(f.i);
    const daemon = await startDaemon(lab, writeConfig(lab, 'draft', { probes: false }));
    await steady(lab, N, 90_000);
    load = new ClientLoad(lab, LOAD);
    await sleep(3000);
    const addrs = new Set(faulted.map((f) => lab.engineAddress(f.i)));
    for (let r = 0; r < rounds; r++) {
      const ready = await steady(lab, N, 90_000).catch((e: Error) => {
        console.log(`  phase stopped: ${e.message.split('\n')[0]}`);
        return null;
      });
      if (ready === null) return out;
      const pre = ready.buckets;
      load.prune(Date.now() - 5000);
      const mine = new Map(faulted.map((f) => [f.i, owned(pre, lab.engineAddress(f.i))]));
      for (const f of faulted) load.watch(engines.name(f.i), mine.get(f.i) ?? []);
      await sleep(300);
      const t0 = new Map<number, number>();
      await Promise.all(
        faulted.map(async (f) => {
          t0.set(f.i, await engines.fault(f.kind, f.i));
        }),
      );
      // The first holder of each faulted bucket after its engine's removal, from the table polled every 200 ms.
      const firstHolder = new Map<number, string | null>();
      const deadline = Date.now() + 45_000;
      while (Date.now() < deadline) {
        const b = await getBuckets(lab).then(
          (v) => v.buckets,
          () => null,
        );
        if (b === null) {
          await sleep(200);
          continue;
        }
        for (const [i, list] of mine) {
          for (const x of list)
            if (!firstHolder.has(x) && b[x] !== lab.engineAddress(i)) firstHolder.set(x, b[x] ?? null);
        }
        if (![...addrs].some((a) => b.includes(a))) break;
        await sleep(200);
      }
      const lastFault = Math.max(...t0.values());
      const trials: Trial[] = [];
      for (const f of faulted) {
        const list = mine.get(f.i) ?? [];
        const clean = list.filter((x) => {
          const h = firstHolder.get(x);
          return h !== undefined && h !== null && !addrs.has(h);
        });
        const start = t0.get(f.i) ?? lastFault;
        const served = await load.waitServed(clean, Date.now() + 5000);
        const movedMs = clean.length > 0 && served.size === clean.length ? Math.max(...served.values()) - start : null;
        const addr = lab.engineAddress(f.i);
        const verdict = firstEvent(
          daemon,
          start,
          (e) => e.event === 'engine-state' && e.engine === addr && e.from === 'usable',
        );
        const table = verdict ? firstEvent(daemon, verdict.time, (e) => e.event === 'table') : undefined;
        const end = movedMs === null ? Date.now() : start + movedMs;
        trials.push({
          kind: f.kind,
          engine: f.i,
          movedMs,
          buckets: clean.length,
          verdictMs: verdict ? verdict.time - start : null,
          tableMs: table ? table.time - start : null,
          failedOwn: load.failed(start - LOAD.timeoutMs, end, new Set(list)).length,
          failedOther: 0,
          failedReturn: 0,
          backMs: null,
          sameBuckets: false,
          returnReason: '',
        });
      }
      const tr = Date.now();
      await Promise.all(faulted.map((f) => engines.restore(f.kind, f.i)));
      // Six engines come back at different times (a restarted Squid registers anew), so one that returns early may
      // take more than its old share until the others are back: wait for that to settle, then for all to be usable.
      const back = await steady(lab, N, 40_000, { pre, back: [...addrs] }).catch(() => null);
      const now =
        back ?? (await steady(lab, N, 90_000).catch(() => ({ buckets: pre.map(() => null), at: Date.now() })));
      for (const t of trials) {
        const addr = lab.engineAddress(t.engine);
        const old = owned(pre, addr);
        t.backMs = now.at - tr;
        t.sameBuckets = back !== null;
        t.returnReason =
          `${firstEvent(daemon, tr, (e) => e.event === 'engine-state' && e.engine === addr && e.to === 'usable')?.reason ?? '(none logged)'}; ` +
          `holds ${owned(now.buckets, addr).filter((b) => pre[b] === addr).length} of its ${old.length} old buckets and ` +
          `${owned(now.buckets, addr).filter((b) => pre[b] !== addr).length} others`;
        out.push(t);
        console.log(
          `  draft    ${t.kind.padEnd(5)} round ${r + 1} engine${t.engine}: ${fmt(t.movedMs)} to the last of ${t.buckets} ` +
            `buckets elsewhere (verdict ${fmt(t.verdictMs)}, table ${fmt(t.tableMs)}); failed ${t.failedOwn}; back in ${fmt(t.backMs)} ` +
            `${t.sameBuckets ? 'with its buckets' : 'WITHOUT its buckets'}, "${t.returnReason}"`,
        );
      }
      await sleep(LOAD.timeoutMs);
    }
  } finally {
    await load?.stop();
    await engines.stop();
    await lab.destroy();
  }
  return out;
}

function fmt(ms: number | null): string {
  return ms === null ? '-' : `${(ms / 1000).toFixed(2)} s`;
}

function median(xs: readonly number[]): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[m] ?? 0) : ((s[m - 1] ?? 0) + (s[m] ?? 0)) / 2;
}

const maxOf = (xs: readonly number[]): number | null => (xs.length === 0 ? null : Math.max(...xs));

interface Summary {
  n: number;
  missing: number;
  median: number | null;
  max: number | null;
  tableMedian: number | null;
  tableMax: number | null;
  failedMedian: number | null;
  failedMax: number | null;
}

function summarize(ts: readonly Trial[]): Summary {
  const moved = ts.flatMap((t) => (t.movedMs === null ? [] : [t.movedMs]));
  const table = ts.flatMap((t) => (t.tableMs === null ? [] : [t.tableMs]));
  const failed = ts.map((t) => t.failedOwn + t.failedOther);
  return {
    n: ts.length,
    missing: ts.length - moved.length,
    median: median(moved),
    max: maxOf(moved),
    tableMedian: median(table),
    tableMax: maxOf(table),
    failedMedian: median(failed),
    failedMax: maxOf(failed),
  };
}

/**
 * The bench and everything it starts (wccpd, whose systemd unit says Nice=-10, and its nft and ip children; the
 * client, the engines and the origin, which stand for other machines) at nice -10, so that unrelated work on a shared
 * machine delays neither the daemon nor the instruments more than a gateway's own bulk work would.
 */
async function asDeployed(): Promise<void> {
  await run('renice', ['-n', '-10', '-p', ...readdirSync(`/proc/${process.pid}/task`)]);
}

// Interrupted: exit, so the lab's exit handler kills its processes by PID and deletes its namespaces.
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => process.exit(130));
// The same when its output is closed under it (exit 141).
cleanUpOnClosedOutput(CLI, () => undefined);

async function main(): Promise<number> {
  if (args.includes('--soak')) return runSoak({ minutes: num('--minutes', 10), lossPercent: num('--loss', 20) });
  const started = new Date();
  await asDeployed();
  console.log(
    `bench/failover ${started.toISOString()}: Debian Squid engines in the lab, every lab process at nice -10 ` +
      `(wccpd as its unit runs it); client load: every bucket every ${LOAD.slowMs / 1000} s, ` +
      `a faulted engine's buckets every ${LOAD.fastMs} ms until served elsewhere (each request a new connection, ` +
      `${LOAD.timeoutMs / 1000} s timeout); load average ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}`,
  );
  const d = DEFAULT_PROBE;
  console.log(
    `defaults (no health block: HTTP probe every ${d.intervalMs} ms, timeout ${d.timeoutMs} ms, fall ${d.fall}, ` +
      `hardFall ${d.hardFall}, rise ${d.rise}: worst case ${(d.intervalMs * d.fall + d.timeoutMs) / 1000} s silent), 3 engines, ` +
      `one fault at a time, ${TRIALS} trials per kind`,
  );
  const defaults = TRIALS > 0 ? await defaultsPhase(TRIALS) : [];
  const relayRun: RelayRun = { seconds: 0, bytes: 0, ok: 0, failed: 0, miss: 0, rateWaits: 0, rate: RELAY_RATE };
  let relays: Trial[] = [];
  if (RELAY_TRIALS > 0) {
    console.log(
      `relays at the budget: defaults, the warm-up broker on (warmup.maxRelayRate ${RELAY_RATE}), engine 3 warming ` +
        `from engine 1 with 4 relays of ${RELAY_OBJECT} at a time throughout; engine 2 faulted, ${RELAY_TRIALS} trials per kind`,
    );
    relays = await defaultsPhase(RELAY_TRIALS, relayRun);
    console.log(
      `  relayed ${(relayRun.bytes / 1e6 / Math.max(1, relayRun.seconds)).toFixed(1)} MB/s over ${relayRun.seconds.toFixed(0)} s ` +
        `(${relayRun.ok} objects, ${relayRun.failed} failed, ${relayRun.miss} ICP MISS), ${relayRun.rateWaits} waits for the rate`,
    );
  }
  let draft: Trial[] = [];
  if (DRAFT_ROUNDS > 0) {
    console.log(
      `draft timers (probes off: removal at 3 x HERE_I_AM_T = 30 s), 9 engines, 2 per kind faulted at once, ` +
        `${DRAFT_ROUNDS} rounds: ${2 * DRAFT_ROUNDS} trials per kind (fewer than the defaults' ${TRIALS}: each takes ~30 s)`,
    );
    draft = await draftPhase(DRAFT_ROUNDS);
  }
  const s = (x: number | null): string => (x === null ? '-' : `${(x / 1000).toFixed(2)}`);
  const ratio = (a: number | null, b: number | null): string =>
    a === null || b === null || b === 0 ? '-' : `${(a / b).toFixed(0)}x`;
  console.log(
    `\nfailover ${started.toISOString().slice(0, 10)}: time from the fault to the last of the engine's buckets ` +
      `served elsewhere (client side; seconds), the daemon's table change, and failed client requests per trial`,
  );
  console.log('kind   timers    trials  median   max   | table med  max  | failed med  max | target');
  let ok = true;
  for (const kind of kinds) {
    const d = summarize(defaults.filter((t) => t.kind === kind));
    const r = summarize(draft.filter((t) => t.kind === kind));
    const met =
      d.missing === 0 &&
      d.n > 0 &&
      (d.median ?? Infinity) <= TARGET_MEDIAN_MS[kind] &&
      (d.max ?? Infinity) <= TARGET_MAX_MS;
    ok &&= met;
    const row = (name: string, x: Summary, target: string): string =>
      `${kind.padEnd(6)} ${name.padEnd(9)} ${`${x.n - x.missing}/${x.n}`.padStart(6)}  ${s(x.median).padStart(6)} ${s(x.max).padStart(6)} | ` +
      `${s(x.tableMedian).padStart(8)} ${s(x.tableMax).padStart(5)} | ${String(x.failedMedian ?? '-').padStart(10)} ${String(x.failedMax ?? '-').padStart(4)} | ${target}`;
    console.log(
      row(
        'defaults',
        d,
        `median <= ${TARGET_MEDIAN_MS[kind] / 1000} s, max <= ${TARGET_MAX_MS / 1000} s: ${met ? 'met' : 'MISSED'}`,
      ),
    );
    if (relays.length > 0) {
      const x = summarize(relays.filter((t) => t.kind === kind));
      const relayMet =
        x.missing === 0 &&
        x.n > 0 &&
        (x.median ?? Infinity) <= TARGET_MEDIAN_MS[kind] &&
        (x.max ?? Infinity) <= TARGET_MAX_MS;
      ok &&= relayMet;
      console.log(row('relays', x, `the same: ${relayMet ? 'met' : 'MISSED'}`));
    }
    if (draft.length > 0) {
      console.log(row('draft', r, ''));
      console.log(
        `${kind.padEnd(6)} ratio draft/defaults: median ${ratio(r.median, d.median)}, max ${ratio(r.max, d.max)}, ` +
          `failed requests median ${ratio(r.failedMedian, d.failedMedian)}`,
      );
    }
  }
  const hang = defaults.filter((t) => t.kind === 'hang');
  const risen = hang.filter(
    (t) => t.sameBuckets && t.returnReason.includes(`http: ${DEFAULT_PROBE.rise} consecutive passes`),
  ).length;
  const backMs = defaults.flatMap((t) => (t.backMs === null ? [] : [t.backMs]));
  console.log(
    `returns (defaults): ${defaults.filter((t) => t.sameBuckets).length}/${defaults.length} engines usable again with ` +
      `their old buckets (all, or all but the odd one of 256), median ${s(median(backMs))} s after the restore; after SIGCONT ` +
      `${risen}/${hang.length} came back only with "probes pass again (http: ${DEFAULT_PROBE.rise} consecutive passes)"`,
  );
  if (draft.length > 0) {
    console.log(
      `returns (draft, six at once): ${draft.filter((t) => t.sameBuckets).length}/${draft.length} with their old buckets within 40 s`,
    );
  }
  ok &&= defaults.every((t) => t.sameBuckets) && risen === hang.length;
  console.log(`finished in ${((Date.now() - started.getTime()) / 60_000).toFixed(1)} min`);
  return ok ? 0 : 1;
}

process.exitCode = await main();
