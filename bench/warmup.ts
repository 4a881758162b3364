// Hot insertion with and without the warm-up broker, in the namespace lab with Debian's Squid 5.7, side by side from
// one run. Per mode: wccpd and two Squids start fresh; the two are warmed with the working set (every object once,
// from an origin that counts requests per object); a third Squid is hot-inserted; the same mix (a seeded Zipf
// sequence over the working set) is replayed while the newcomer warms up; once its warm-up has ended, the broker's
// ICP MISS answer time is measured from the newcomer's namespace, and the mix is replayed once more.
// Modes: no broker (the Squids have no sibling), the broker with `source: previous-owner`, with `all-engines`.
// Run as root: node --import tsx bench/warmup.ts [--objects 2048] [--requests 4096] [--duration 120s]
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLab, originAddressForBucket, bucketOf, ROUTER_ADDRESS, type Lab } from '../test/lab/lab.js';
import { getJson, shares, startDaemon, waitUntil, ADMIN_PORT, TOKEN, type Daemon } from '../test/e2e/harness.js';
import { seededUnit } from '../test/helpers/seeded.js';
import type { BucketsView, EnginesView, StatusView } from '../src/admin/api-types.js';
import { checkArgs, cleanUpOnClosedOutput, exitOnSignals } from './cli.js';
import type { Cli } from './cli.js';
import { BenchError } from './dataplane-measure.js';

/** The warm-up's minSourceHold here: engines 1 and 2 start together (and warm nothing from each other). */
const SOURCE_HOLD_MS = 15_000;
const CLIENT = fileURLToPath(new URL('./warmup/client.mjs', import.meta.url));
const ICP_TIMING = fileURLToPath(new URL('./warmup/icp-timing.mjs', import.meta.url));

type Mode = 'none' | 'previous-owner' | 'all-engines';
const MODES: readonly Mode[] = ['none', 'previous-owner', 'all-engines'];
const LABEL: Record<Mode, string> = {
  none: 'no broker',
  'previous-owner': 'broker, previous-owner',
  'all-engines': 'broker, all-engines',
};

interface Settings {
  objects: number;
  requests: number;
  durationS: number;
  concurrency: number;
  icpQueries: number;
  slices: number;
}

const CLI: Cli = {
  name: 'bench/warmup',
  usage: `usage (root): node --import tsx bench/warmup.ts [--objects N] [--requests N] [--duration S]
  [--modes none,previous-owner,all-engines] [--json]
Hot insertion with three Debian Squid engines, without the warm-up broker and with it: origin fetches for the
newcomer's buckets, failed requests, latency, the broker's figures (bench/README.md). --objects: a multiple of 256
(2048); --requests (4096); --duration of the warm-up (120s); --json: the results as JSON too.`,
  values: ['--objects', '--requests', '--duration', '--modes'],
  switches: ['--json'],
};

function parseArgs(argv: readonly string[]): Settings {
  checkArgs(CLI, argv);
  const num = (flag: string, dflt: number): number => {
    const i = argv.indexOf(flag);
    if (i < 0) return dflt;
    const v = Number(String(argv[i + 1] ?? '').replace(/s$/, ''));
    if (!Number.isFinite(v) || v <= 0) throw new Error(`${flag} takes a positive number, got "${argv[i + 1] ?? ''}"`);
    return v;
  };
  const s = {
    objects: num('--objects', 2048),
    requests: num('--requests', 4096),
    durationS: num('--duration', 120),
    concurrency: 4,
    icpQueries: 1000,
    slices: 8,
  };
  if (s.objects < 256 || s.objects % 256 !== 0) throw new Error('--objects must be a multiple of 256 (whole buckets)');
  return s;
}

interface Request {
  status: number;
  ms: number;
  at: number;
}

interface ModeResult {
  mode: Mode;
  newcomerObjects: number;
  newcomerBuckets: number;
  /** Origin fetches during the first replay, for objects in the newcomer's buckets, and for the others. */
  originMine: number;
  originOthers: number;
  /** Distinct newcomer objects the mix asks for (what a cold newcomer must fetch at most). */
  mineInMix: number;
  failed: number;
  latency: { median: number; p99: number; max: number };
  latencyMine: { median: number; p99: number };
  /** The newcomer's access.log over the first replay, in slices: local hits, sibling hits, origin fetches. */
  slices: { local: number; sibling: number; origin: number; total: number }[];
  warmingAtReplayEnd: boolean | null;
  warmupEnd: string | null;
  broker: Record<string, number>;
  icp: { median: number; p99: number; count: number; opcodes: Record<string, number> } | null;
  /** The replay after warm-up: origin fetches for the newcomer's objects, the newcomer's own hits, broker relays. */
  after: { originMine: number; localHits: number; newcomerRequests: number; relays: number; failed: number };
  replayS: number;
  /** The 1-minute load average when the first replay started (the machine is shared). */
  load: number;
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

/** A seeded Zipf(0.8) sequence of `n` object indexes over `objects`, popularity ranks shuffled over the objects. */
function zipfMix(objects: number, n: number, seed: number): number[] {
  const rnd = seededUnit(seed);
  const rank = Array.from({ length: objects }, (_, i) => i);
  for (let i = objects - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [rank[i], rank[j]] = [rank[j] as number, rank[i] as number];
  }
  const weights = rank.map((_, r) => 1 / Math.pow(r + 1, 0.8));
  const total = weights.reduce((a, b) => a + b, 0);
  const cdf: number[] = [];
  let acc = 0;
  for (const w of weights) {
    acc += w / total;
    cdf.push(acc);
  }
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const u = rnd();
    let lo = 0;
    let hi = objects - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cdf[mid] as number) < u) lo = mid + 1;
      else hi = mid;
    }
    out.push(rank[lo] as number);
  }
  return out;
}

async function play(lab: Lab, urls: readonly string[], concurrency: number, name: string): Promise<Request[]> {
  const file = join(lab.dir, `${name}.urls`);
  writeFileSync(file, urls.join('\n') + '\n');
  const r = await lab.exec(lab.ns.client, process.execPath, [CLIENT, file, String(concurrency), '15000'], {
    timeoutMs: 20 * 60_000,
  });
  const rows = JSON.parse(r.stdout) as [number, number, number][];
  return rows.map(([status, ms, at]) => ({ status, ms, at }));
}

async function originCounts(lab: Lab): Promise<Map<string, number>> {
  const r = await lab.curl(`http://${originAddressForBucket(0)}/_counts`, { ns: lab.ns.origin, timeoutMs: 10_000 });
  if (r.status !== 200) throw new Error(`origin counts: HTTP ${r.status} ${r.error ?? ''}`);
  return new Map(Object.entries(r.json as Record<string, number>));
}

const keyOf = (url: string): string => {
  const u = new URL(url);
  return `${u.hostname} ${u.pathname}`;
};

async function runMode(lab: Lab, mode: Mode, s: Settings, tag: string): Promise<ModeResult> {
  const stateDir = join(lab.dir, `state-${mode}`);
  const config = join(lab.dir, `wccpd-${mode}.yaml`);
  const broker = mode !== 'none';
  writeFileSync(
    config,
    [
      'router:',
      `  address: ${ROUTER_ADDRESS}`,
      'admin:',
      `  listen: 127.0.0.1:${ADMIN_PORT}`,
      `  token: ${TOKEN}`,
      `stateDir: ${stateDir}`,
      'dataplane:',
      '  backend: nft',
      ...(broker ? ['warmup:', `  listen: ${ROUTER_ADDRESS}`] : []),
      'services:',
      '  - id: 0',
      '    clientInterfaces: [c0]',
      '    engines:',
      '      allow: [192.0.2.0/24]',
      ...(broker
        ? [`    warmup: { duration: ${s.durationS}s, source: ${mode}, minSourceHold: ${SOURCE_HOLD_MS / 1000}s }`]
        : []),
      '',
    ].join('\n'),
  );
  const urls = Array.from(
    { length: s.objects },
    (_, i) => `http://${originAddressForBucket(i % 256)}/long/${tag}/${mode}/${Math.floor(i / 256)}`,
  );
  const mix = zipfMix(s.objects, s.requests, 0x5eed).map((i) => urls[i] as string);
  const sibling = broker ? { sibling: ROUTER_ADDRESS } : {};
  let daemon: Daemon | undefined;
  try {
    daemon = await startDaemon(lab, config);
    const table = (): Promise<BucketsView | null> => getJson<BucketsView>(lab, 'services/0/buckets').catch(() => null);
    await Promise.all([1, 2].map((i) => lab.startSquid(i, sibling)));
    const shared = await waitUntil(table, (v) => v !== null && shares(v.buckets).get(lab.engineAddress(1)) === 128, {
      timeoutMs: 90_000,
      intervalMs: 250,
      what: 'two Squids sharing the buckets',
    });
    const warm = await play(lab, urls, s.concurrency, `${mode}-warm`);
    const warmFailed = warm.filter((r) => r.status !== 200).length;
    if (warmFailed > 0) throw new Error(`${mode}: ${warmFailed} of ${urls.length} warming requests failed`);

    // The newcomer comes once the two have held their buckets minSourceHold (they are its warm sources).
    const wait = shared.at + SOURCE_HOLD_MS + 1000 - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    await lab.startSquid(3, sibling);
    const newcomer = lab.engineAddress(3);
    const t = await waitUntil(
      table,
      (v) => v !== null && (shares(v.buckets).get(newcomer) ?? 0) >= 85 && (shares(v.buckets).get(null) ?? 0) === 0,
      { timeoutMs: 90_000, intervalMs: 250, what: 'the newcomer holding its share' },
    );
    const buckets = t.value?.buckets ?? [];
    const isMine = (url: string): boolean => buckets[bucketOf(new URL(url).hostname)] === newcomer;
    const mine = urls.filter(isMine);
    const before = await originCounts(lab);
    const logged = lab.squidAccessLog(3).length;
    const statusBefore = broker ? ((await getJson<StatusView>(lab, 'status')).warmup ?? {}) : {};

    const load = loadavg()[0] ?? NaN;
    const t0 = Date.now();
    const replay = await play(lab, mix, s.concurrency, `${mode}-replay`);
    const replayS = (Date.now() - t0) / 1000;
    const after = await originCounts(lab);
    const delta = (u: string): number => (after.get(keyOf(u)) ?? 0) - (before.get(keyOf(u)) ?? 0);
    const originMine = mine.reduce((a, u) => a + delta(u), 0);
    const originOthers = urls.filter((u) => !isMine(u)).reduce((a, u) => a + delta(u), 0);
    const engines = await getJson<EnginesView>(lab, 'services/0/engines');
    const nv = engines.engines.find((e) => e.address === newcomer);
    const warmingAtReplayEnd = broker ? nv?.flags.warming === true : null;
    const statusAfter = broker ? ((await getJson<StatusView>(lab, 'status')).warmup ?? {}) : {};
    const brokerDelta: Record<string, number> = {};
    for (const [k, v] of Object.entries(statusAfter)) brokerDelta[k] = v - (statusBefore[k] ?? 0);

    // The newcomer's access.log lines of this replay (Squid writes a line when a transaction ends: wait, bounded).
    const mixSet = new Set(mix);
    const mineInMix = new Set(mix.filter(isMine)).size;
    const mineRequests = mix.filter(isMine).length;
    const lines = (
      await waitUntil(
        async () =>
          lab
            .squidAccessLog(3)
            .slice(logged)
            .filter((e) => mixSet.has(e.url)),
        (l) => l.length >= mineRequests,
        { timeoutMs: 15_000, intervalMs: 250, what: "the replay in the newcomer's access.log" },
      ).catch(() => ({
        value: lab
          .squidAccessLog(3)
          .slice(logged)
          .filter((e) => mixSet.has(e.url)),
      }))
    ).value;
    const slices: ModeResult['slices'] = [];
    for (let i = 0; i < s.slices; i++) {
      const part = lines.slice(
        Math.floor((i * lines.length) / s.slices),
        Math.floor(((i + 1) * lines.length) / s.slices),
      );
      slices.push({
        local: part.filter((e) => /HIT/.test(e.result) && e.hierarchy === 'HIER_NONE').length,
        sibling: part.filter((e) => e.hierarchy === 'SIBLING_HIT').length,
        origin: part.filter((e) => e.hierarchy === 'ORIGINAL_DST' || e.hierarchy === 'HIER_DIRECT').length,
        total: part.length,
      });
    }
    const ms = replay
      .filter((r) => r.status === 200)
      .map((r) => r.ms)
      .sort((a, b) => a - b);
    const msMine = replay
      .filter((r, i) => r.status === 200 && isMine(mix[i] as string))
      .map((r) => r.ms)
      .sort((a, b) => a - b);

    // After warm-up: wait for the newcomer's warm-up to end (its duration), then time the broker's MISS answers
    // from the newcomer's own namespace and address, and replay the mix once more.
    let icp: ModeResult['icp'] = null;
    let warmupEnd: string | null = null;
    if (broker) {
      const ended = await waitUntil(
        () => getJson<EnginesView>(lab, 'services/0/engines').catch(() => null),
        (v) => v !== null && v.engines.find((e) => e.address === newcomer)?.flags.warming === false,
        { timeoutMs: (s.durationS + 60) * 1000, intervalMs: 1000, what: "the newcomer's warm-up to end" },
      );
      const w = ended.value?.engines.find((e) => e.address === newcomer)?.warmup;
      warmupEnd = w ? `${w.endReason ?? '?'} after ${w.peerHits}/${w.queries} peer hits` : null;
      const file = join(lab.dir, `${mode}-icp.urls`);
      writeFileSync(file, Array.from({ length: s.icpQueries }, (_, i) => mine[i % mine.length]).join('\n') + '\n');
      const r = await lab.exec(
        lab.engineNs(3),
        process.execPath,
        [ICP_TIMING, file, ROUTER_ADDRESS, '3130', newcomer],
        { timeoutMs: 120_000 },
      );
      const got = JSON.parse(r.stdout) as { rtts: number[]; opcodes: Record<string, number> };
      const sorted = [...got.rtts].sort((a, b) => a - b);
      icp = { median: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), count: sorted.length, opcodes: got.opcodes };
    }
    const relaysBefore = broker ? ((await getJson<StatusView>(lab, 'status')).warmup?.['http-relayed'] ?? 0) : 0;
    const logged2 = lab.squidAccessLog(3).length;
    const before2 = await originCounts(lab);
    const again = await play(lab, mix, s.concurrency, `${mode}-again`);
    const after2 = await originCounts(lab);
    const lines2 = (
      await waitUntil(
        async () =>
          lab
            .squidAccessLog(3)
            .slice(logged2)
            .filter((e) => mixSet.has(e.url)),
        (l) => l.length >= mineRequests,
        { timeoutMs: 15_000, intervalMs: 250, what: "the second replay in the newcomer's access.log" },
      ).catch(() => ({
        value: lab
          .squidAccessLog(3)
          .slice(logged2)
          .filter((e) => mixSet.has(e.url)),
      }))
    ).value;
    const relaysAfter = broker ? ((await getJson<StatusView>(lab, 'status')).warmup?.['http-relayed'] ?? 0) : 0;

    return {
      mode,
      newcomerObjects: mine.length,
      newcomerBuckets: shares(buckets).get(newcomer) ?? 0,
      originMine,
      originOthers,
      mineInMix,
      failed: replay.filter((r) => r.status !== 200).length,
      latency: { median: quantile(ms, 0.5), p99: quantile(ms, 0.99), max: ms[ms.length - 1] ?? NaN },
      latencyMine: { median: quantile(msMine, 0.5), p99: quantile(msMine, 0.99) },
      slices,
      warmingAtReplayEnd,
      warmupEnd,
      broker: brokerDelta,
      icp,
      after: {
        originMine: mine.reduce((a, u) => a + (after2.get(keyOf(u)) ?? 0) - (before2.get(keyOf(u)) ?? 0), 0),
        localHits: lines2.filter((e) => /HIT/.test(e.result) && e.hierarchy === 'HIER_NONE').length,
        newcomerRequests: lines2.length,
        relays: relaysAfter - relaysBefore,
        failed: again.filter((r) => r.status !== 200).length,
      },
      replayS,
      load,
    };
  } finally {
    for (const i of [1, 2, 3]) await lab.stopSquid(i, { kill: true }).catch(() => undefined);
    if (daemon) await daemon.terminate().catch(() => daemon?.kill());
  }
}

const pct = (a: number, b: number): string => (b === 0 ? '-' : `${((100 * a) / b).toFixed(0)}%`);
const f = (n: number, d = 1): string => (Number.isFinite(n) ? n.toFixed(d) : '-');

function report(results: readonly ModeResult[], s: Settings, started: Date, load: number[]): void {
  const cols = results.map((r) => LABEL[r.mode]);
  const w0 = 58;
  const w = Math.max(...cols.map((c) => c.length)) + 2;
  const row = (label: string, cells: readonly string[]): void => {
    console.log(label.padEnd(w0) + cells.map((c) => c.padStart(w)).join(''));
  };
  console.log(
    `\nbench/warmup, ${started.toISOString()}: Debian Squid 5.7 x3 in the namespace lab, ${cpus().length} cores, ` +
      `load ${load.map((l) => l.toFixed(1)).join(' ')} at start`,
  );
  console.log(
    `working set ${s.objects} objects (256 origin addresses x ${s.objects / 256}, max-age 3600); mix ${s.requests} ` +
      `requests, Zipf 0.8, seeded; ${s.concurrency} clients; warm-up duration ${s.durationS}s\n`,
  );
  row('', cols);
  row(
    "newcomer's buckets / objects in them",
    results.map((r) => `${r.newcomerBuckets} / ${r.newcomerObjects}`),
  );
  row(
    'distinct newcomer objects the mix asks for',
    results.map((r) => String(r.mineInMix)),
  );
  row(
    "origin fetches, newcomer's buckets (first replay)",
    results.map((r) => String(r.originMine)),
  );
  const base = results.find((r) => r.mode === 'none');
  row(
    '  ... drop against no broker',
    results.map((r) =>
      base === undefined || r.mode === 'none' || base.originMine === 0
        ? '-'
        : `${f(100 * (1 - r.originMine / base.originMine))}%`,
    ),
  );
  row(
    'origin fetches, other buckets (first replay)',
    results.map((r) => String(r.originOthers)),
  );
  row(
    'client requests failed (first replay)',
    results.map((r) => `${r.failed} / ${s.requests}`),
  );
  row(
    'client latency, all, median / p99 (ms)',
    results.map((r) => `${f(r.latency.median)} / ${f(r.latency.p99)}`),
  );
  row(
    "client latency, newcomer's objects, median / p99 (ms)",
    results.map((r) => `${f(r.latencyMine.median)} / ${f(r.latencyMine.p99)}`),
  );
  row(
    'first replay took (s); load average at its start',
    results.map((r) => `${f(r.replayS)}; ${f(r.load)}`),
  );
  console.log("newcomer's requests over the first replay, in eighths: local hit / sibling hit / origin");
  for (let i = 0; i < s.slices; i++) {
    row(
      `  ${i + 1}/${s.slices}`,
      results.map((r) => {
        const x = r.slices[i];
        return x === undefined
          ? '-'
          : `${pct(x.local, x.total)} / ${pct(x.sibling, x.total)} / ${pct(x.origin, x.total)}`;
      }),
    );
  }
  row(
    'still warming when the first replay ended',
    results.map((r) => (r.warmingAtReplayEnd === null ? '-' : r.warmingAtReplayEnd ? 'yes' : 'NO')),
  );
  row(
    'warm-up ended by',
    results.map((r) => r.warmupEnd?.split(' ')[0] ?? '-'),
  );
  row(
    'broker: ICP queries asked of a source / peer HITs',
    results.map((r) =>
      r.mode === 'none' ? '-' : `${r.broker['icp-asked'] ?? 0} / ${r.broker['icp-answered-hit'] ?? 0}`,
    ),
  );
  row(
    'broker: objects relayed',
    results.map((r) => (r.mode === 'none' ? '-' : String(r.broker['http-relayed'] ?? 0))),
  );
  row(
    'ICP MISS after warm-up, round trip at the engine, median (ms)',
    results.map((r) => (r.icp === null ? '-' : f(r.icp.median, 3))),
  );
  row(
    '  ... p99 (ms), answers',
    results.map((r) =>
      r.icp === null
        ? '-'
        : `${f(r.icp.p99, 3)}, ${Object.entries(r.icp.opcodes)
            .map(([k, v]) => `${v} ${k}`)
            .join(' ')}`,
    ),
  );
  console.log('replay after warm-up:');
  row(
    "  origin fetches, newcomer's buckets",
    results.map((r) => String(r.after.originMine)),
  );
  row(
    "  newcomer's requests served from its own cache",
    results.map((r) => `${r.after.localHits} / ${r.after.newcomerRequests}`),
  );
  row(
    '  broker relays / failed client requests',
    results.map((r) => `${r.mode === 'none' ? '-' : r.after.relays} / ${r.after.failed}`),
  );
  const drops = results
    .filter((r) => r.mode !== 'none' && base !== undefined && base.originMine > 0)
    .map((r) => 1 - r.originMine / (base?.originMine ?? 1));
  const icpOk = results.every((r) => r.icp === null || r.icp.median < 1);
  console.log(
    `\ntargets: origin fetches for the newcomer's buckets drop >= 90%: ${drops.length > 0 && drops.every((d) => d >= 0.9) ? 'met' : 'NOT met'}; ` +
      `ICP MISS after warm-up median < 1 ms: ${icpOk ? 'met' : 'NOT met'}`,
  );
}

async function main(): Promise<void> {
  const s = parseArgs(process.argv.slice(2));
  const want = process.argv.includes('--modes')
    ? String(process.argv[process.argv.indexOf('--modes') + 1]).split(',')
    : MODES;
  const unknown = want.filter((m) => !(MODES as readonly string[]).includes(m));
  if (unknown.length > 0 || want.length === 0)
    throw new BenchError(`--modes takes a comma list of ${MODES.join(', ')}; got "${want.join(',')}"`);
  const modes = MODES.filter((m) => want.includes(m));
  const started = new Date();
  const load = loadavg();
  const lab = await createLab({ engines: 3, name: 'wbench' });
  // The lab's exit handler removes it (process.exit runs it).
  cleanUpOnClosedOutput(CLI, () => undefined);
  exitOnSignals();
  const results: ModeResult[] = [];
  try {
    await lab.startOrigin();
    const tag = `${process.pid}`;
    for (const m of modes) {
      const t0 = Date.now();
      results.push(await runMode(lab, m, s, tag));
      console.error(`bench/warmup: ${LABEL[m]} done in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
    }
  } finally {
    await lab.destroy();
  }
  report(results, s, started, load);
  if (process.argv.includes('--json')) console.log(JSON.stringify(results));
}

main().catch((e: unknown) => {
  console.error(
    e instanceof BenchError ? `bench/warmup: ${e.message}` : e instanceof Error ? (e.stack ?? e.message) : String(e),
  );
  process.exit(1);
});
