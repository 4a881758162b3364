// Load-aware assignment in the namespace lab (issue 35, step 4; docs/buckets.md, "Load-aware assignment"): the built
// wccpd with the nft backend and 4 engines registered over WCCP, a client opening a fixed number of connections a
// second to destinations drawn Zipf over TEST-NET addresses (bench/load-aware/mix.ts: a few buckets carry many times
// the mean). Each engine counts the connections it receives: that count, not the daemon's, is the load measured here,
// over a window before the daemon's first load move and the first whole window after its last; then the same mix runs
// on for --steady-minutes and the moves in that time are counted (target 0). The table is polled every second from
// the admin API, so the moves counted are the buckets the bench saw change engine, set beside the daemon's
// wccpd_load_moves_total; the daemon's own view (kernel per-bucket counters x table) and its wccpd_engine_load_ratio
// are printed beside the engines' counts.
//   sudo node --import tsx bench/load-aware.ts [--rate 200] [--window 30] [--steady-minutes 10] [--write]
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { basename, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkArgs, cleanUpOnClosedOutput, exitOnSignals, numberOption, orExit, type Cli } from './cli.js';
import { BenchError } from './dataplane-measure.js';
import { LoadLab, type EngineSample } from './load-aware/lab.js';
import { maxOverMean, zipfMix } from './load-aware/mix.js';
import { needGwDaemon } from '../test/dataplane/gw-daemon.js';

const CLI: Cli = {
  name: 'bench/load-aware',
  usage: `usage (root, after npm run build): node --import tsx bench/load-aware.ts [--rate 200] [--window 30]
       [--steady-minutes 10] [--exponent 1] [--seed 1] [--settle-windows 6] [--off] [--checkout DIR] [--write]
The built wccpd (nft backend, loadAware on with --window seconds) and 4 engines in the namespace lab; a client opens
--rate connections/s to destinations drawn Zipf (--exponent, --seed) over 320 TEST-NET addresses. Prints each
engine's load (connections it received) over a window before the first load move and after the last (moves have
--settle-windows windows to end), the line \`load-aware: max/mean B -> A, N buckets moved\`, then the moves in
--steady-minutes more of the same mix (target 0). --write keeps the raw samples in bench/results/. Exit 1 when a
target of issue 35 is missed (B >= 1.3, A <= 1.15, N <= 32, 0 steady moves). --off runs the same without
loadAware (the control: nothing moves, the skew stays). --checkout runs another checkout's built wccpd.`,
  values: ['--checkout', '--rate', '--window', '--steady-minutes', '--exponent', '--seed', '--settle-windows'],
  switches: ['--write', '--off'],
};
const args = orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));
const num = (name: string, dflt: number): number => numberOption(CLI, args, name, dflt);
const RATE = num('--rate', 200);
const WINDOW_S = num('--window', 30);
const STEADY_MIN = num('--steady-minutes', 10);
const EXPONENT = num('--exponent', 1);
const SEED = num('--seed', 1);
const SETTLE_WINDOWS = num('--settle-windows', 6);
const WRITE = args.includes('--write');
const OFF = args.includes('--off');
const CHECKOUT = args.includes('--checkout') ? resolve(args[args.indexOf('--checkout') + 1] ?? '.') : undefined;
const ENGINES = 4;
const TARGET = { before: 1.3, after: 1.15, moves: 32, steady: 0 };
/** Windows of traffic the first move may take (the daemon decides at a window's end; its first may be partial). */
const FIRST_MOVE_WINDOWS = 4;
const W = WINDOW_S * 1000;
const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));

/** One read of the admin API: the table, the kernel's per-bucket new connections, the daemon's load metrics. */
interface Poll {
  readonly t: number;
  readonly table: readonly (string | null)[];
  readonly counters: readonly number[] | null;
  /** wccpd_load_moves_total for service 0 (null: not exported). */
  readonly movesMetric: number | null;
  /** wccpd_engine_load_ratio per engine for service 0. */
  readonly ratios: Readonly<Record<string, number>>;
}

interface Move {
  readonly t: number;
  readonly bucket: number;
  readonly from: string | null;
  readonly to: string | null;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const f2 = (x: number): string => (Number.isFinite(x) ? x.toFixed(2) : '-');

function parseMetrics(text: string): { moves: number | null; ratios: Record<string, number> } {
  const label = (labels: string, k: string): string | undefined => new RegExp(`${k}="([^"]*)"`).exec(labels)?.[1];
  let moves: number | null = null;
  const ratios: Record<string, number> = {};
  for (const m of text.matchAll(/^(wccpd_load_moves_total|wccpd_engine_load_ratio)\{([^}]*)\} (\S+)$/gm)) {
    if (label(m[2] ?? '', 'service') !== '0') continue;
    if (m[1] === 'wccpd_load_moves_total') moves = (moves ?? 0) + Number(m[3]);
    else ratios[label(m[2] ?? '', 'engine') ?? '?'] = Number(m[3]);
  }
  return { moves, ratios };
}

/** An engine's connections at `t`, interpolated between its per-second samples. */
function countAt(samples: readonly EngineSample[], t: number): number {
  const i = samples.findIndex((s) => s.t >= t);
  if (i < 0) return samples.at(-1)?.connections ?? 0;
  if (i === 0) return samples[0]?.connections ?? 0;
  const a = samples[i - 1] as EngineSample;
  const b = samples[i] as EngineSample;
  return a.connections + ((b.connections - a.connections) * (t - a.t)) / Math.max(1, b.t - a.t);
}

async function main(): Promise<void> {
  const skip = needGwDaemon();
  if (skip !== false) throw new BenchError(`needs ${skip.replace(/^skipped: /, '')}`);
  const started = new Date();
  const load0 = loadavg();
  const mix = zipfMix(EXPONENT, SEED);
  const lab = new LoadLab(ENGINES);
  const engines = lab.engineAddresses();
  exitOnSignals();
  cleanUpOnClosedOutput(CLI, () => lab.stopNow());
  process.once('exit', () => lab.stopNow());

  const boundS = Math.ceil((FIRST_MOVE_WINDOWS + SETTLE_WINDOWS + 2) * WINDOW_S + STEADY_MIN * 60 + 120);
  // The daemon's loadAware block: the defaults (docs/buckets.md) but a lab-sized window.
  const loadAware = OFF
    ? []
    : ['    loadAware:', '      enabled: true', '      measure: connections', `      window: ${WINDOW_S}s`];
  const out: string[] = [];
  const say = (line: string): void => {
    out.push(line);
    console.log(line);
  };

  const polls: Poll[] = [];
  const moves: Move[] = [];
  let polling = true;
  /** Moves count from when every engine holds its even share. */
  let settled = false;
  const poll = async (): Promise<void> => {
    const t = Date.now();
    const [bucketsText, metricsText] = await Promise.all([lab.api('/api/v1/services/0/buckets'), lab.api('/metrics')]);
    let view: { buckets?: (string | null)[]; counters?: { connections: number }[] | null } = {};
    try {
      view = JSON.parse(bucketsText) as typeof view;
    } catch {
      return; // not answering (yet): no poll
    }
    if (view.buckets?.length !== 256) return;
    const m = parseMetrics(metricsText);
    const p: Poll = {
      t,
      table: view.buckets,
      counters: view.counters?.map((c) => c.connections) ?? null,
      movesMetric: m.moves,
      ratios: m.ratios,
    };
    const prev = polls.at(-1);
    if (prev !== undefined && settled)
      p.table.forEach((e, b) => {
        if (e !== prev.table[b]) moves.push({ t, bucket: b, from: prev.table[b] ?? null, to: e });
      });
    polls.push(p);
  };
  // Polls at half past each second: the daemon's windows end on whole seconds (wall-clock multiples of the window),
  // so a window's edge falls half a second from the polls on either side of it.
  const pollLoop = (async () => {
    while (polling) {
      await poll();
      await sleep(1500 - ((Date.now() + 500) % 1000));
    }
  })();
  const last = (): Poll | undefined => polls.at(-1);
  const waitUntil = async (ok: () => boolean, ms: number): Promise<boolean> => {
    const end = Date.now() + ms;
    while (!ok() && Date.now() < end) await sleep(200);
    return ok();
  };
  /** The first poll at or after `t`. */
  const pollFrom = (t: number): Poll => polls.find((p) => p.t >= t) ?? (polls.at(-1) as Poll);

  try {
    await lab.up(loadAware, boundS, CHECKOUT);
    let daemonEnded = false;
    void lab.daemon?.exited.then(() => (daemonEnded = true));
    // Every engine usable with its even share (64 buckets), the table unchanged for 3 s.
    const even = (p: Poll | undefined): boolean =>
      p !== undefined && engines.every((e) => p.table.filter((x) => x === e).length === 256 / ENGINES);
    const ready = await waitUntil(() => {
      const recent = polls.filter((p) => p.t >= Date.now() - 3500);
      return daemonEnded || (recent.length >= 3 && recent.every(even));
    }, 90_000);
    if (!ready || daemonEnded)
      throw new BenchError(
        `the ${ENGINES} engines did not each get ${256 / ENGINES} buckets within 90 s${daemonEnded ? ' (the daemon ended)' : ''}:\n${lab.daemon?.output.join('').slice(-3000) ?? ''}`,
      );
    settled = true;
    const table0 = last()?.table ?? [];

    // The client starts just after a window of the daemon's ends (they are aligned to the wall clock), so its first
    // window with traffic is a whole one.
    await sleep(W - (Date.now() % W) + 200);
    const cpuStart = lab.cpu();
    lab.startClient({ rate: RATE, seconds: boundS - 60, seed: SEED, exponent: EXPONENT });
    const clientStart = Date.now();

    // Before: the window up to the last poll before the first move (shorter when that came sooner after the start).
    await waitUntil(() => moves.length > 0, FIRST_MOVE_WINDOWS * W + 2000);
    let beforeEnd: Poll;
    let afterStart: Poll;
    let afterEnd: Poll;
    if (moves.length > 0) {
      const firstSeen = polls.findIndex((p) => p.t === moves[0]?.t);
      beforeEnd = polls[firstSeen - 1] as Poll;
      // After: the first whole window after the last move; a move within it starts it again (bounded).
      const settleBy = (moves[0]?.t ?? 0) + SETTLE_WINDOWS * W;
      for (;;) {
        const lastMove = moves.at(-1)?.t ?? 0;
        if (Date.now() >= lastMove + W + 1500 || Date.now() >= settleBy) break;
        await sleep(500);
      }
      afterStart = pollFrom(moves.at(-1)?.t ?? 0);
      afterEnd = pollFrom(afterStart.t + W);
      if (afterEnd.t < afterStart.t + W - 1500) {
        await waitUntil(() => (last()?.t ?? 0) >= afterStart.t + W, W);
        afterEnd = pollFrom(afterStart.t + W);
      }
    } else {
      beforeEnd = last() as Poll;
      afterStart = beforeEnd;
      await waitUntil(() => (last()?.t ?? 0) >= afterStart.t + W, W + 5000);
      afterEnd = pollFrom(afterStart.t + W);
    }
    const beforeStart = pollFrom(Math.max(clientStart, beforeEnd.t - W));
    const movedToAfter = moves.filter((m) => m.t <= afterEnd.t);

    // Steady: the same mix for --steady-minutes more; every bucket seen to change engine counts.
    const steadyStart = afterEnd;
    await waitUntil(() => (last()?.t ?? 0) >= steadyStart.t + STEADY_MIN * 60_000, STEADY_MIN * 60_000 + 10_000);
    const steadyEnd = last() as Poll;
    const steadyMoves = moves.filter((m) => m.t > steadyStart.t && m.t <= steadyEnd.t);
    const cpuEnd = lab.cpu();
    polling = false;
    await pollLoop;
    const events = safeJson(await lab.api('/api/v1/events?limit=1000'));
    await lab.stopClient();
    const load1 = loadavg();

    const engineLoads = (a: Poll, b: Poll): number[] =>
      engines.map((e) => {
        const s = lab.engineSamples.get(e) ?? [];
        return countAt(s, b.t) - countAt(s, a.t);
      });
    /** The daemon's view of the same window: the kernel's per-bucket counts, each to the bucket's engine at its end. */
    const daemonLoads = (a: Poll, b: Poll): number[] | null => {
      if (a.counters === null || b.counters === null) return null;
      const loads = engines.map(() => 0);
      b.table.forEach((e, i) => {
        const k = e === null ? -1 : engines.indexOf(e);
        if (k >= 0) loads[k]! += (b.counters?.[i] ?? 0) - (a.counters?.[i] ?? 0);
      });
      return loads;
    };
    /** What the mix itself gives a table: each engine's expected share of the load, as max/mean. */
    const expected = (table: readonly (string | null)[]): number =>
      maxOverMean(engines.map((e) => table.reduce((s, x, b) => s + (x === e ? (mix.buckets[b] ?? 0) : 0), 0)));

    const before = engineLoads(beforeStart, beforeEnd);
    const after = engineLoads(afterStart, afterEnd);
    const dBefore = daemonLoads(beforeStart, beforeEnd);
    const dAfter = daemonLoads(afterStart, afterEnd);
    const B = maxOverMean(before);
    const A = maxOverMean(after);
    const steadyWindows: { t: number; ratio: number; loads: number[] }[] = [];
    for (let t = steadyStart.t; t + W <= steadyEnd.t + 1500; t += W) {
      const a = pollFrom(t);
      const b = pollFrom(t + W);
      const loads = engineLoads(a, b);
      steadyWindows.push({ t: a.t, ratio: maxOverMean(loads), loads });
    }
    const steadyRatios = steadyWindows.map((w) => w.ratio).sort((x, y) => x - y);
    const client = lab.clientSamples.at(-1);
    const secs = (a: Poll, b: Poll): string => `${((b.t - a.t) / 1000).toFixed(1)} s`;
    const hot = [...mix.buckets].sort((x, y) => y - x);

    say(
      `bench/load-aware, ${started.toISOString()}: wccpd (nft backend, ` +
        `${OFF ? 'no loadAware: the control' : `loadAware window ${WINDOW_S} s, defaults otherwise`}), ` +
        `${ENGINES} engines, ${cpus().length} cores, load ${load0.map((l) => l.toFixed(1)).join(' ')} at start`,
    );
    say(
      `client: ${RATE} new connections/s, Zipf s=${EXPONENT} (seed ${SEED}) over ${mix.addresses.length} TEST-NET destinations; ` +
        `hottest bucket ${f2(hot[0]! * 256)}x the mean bucket, top 4 ${f2(hot.slice(0, 4).reduce((a, b) => a + b, 0) * 100)} % of all`,
    );
    say(
      (moves.length > 0
        ? `windows: before ${secs(beforeStart, beforeEnd)} up to the first move, after ${secs(afterStart, afterEnd)} from the last; `
        : `windows: no move came; before ${secs(beforeStart, beforeEnd)}, after the next ${secs(afterStart, afterEnd)}; `) +
        `load = connections each engine received (its own count); daemon = the API's kernel per-bucket counters x table; gauge = its wccpd_engine_load_ratio at the after window's end`,
    );
    // The daemon's columns are shares (/mean), not counts: the API reads the counters at most once a second, so its
    // windows may sit up to a second off the engines'.
    say('engine         before  /mean  daemon/mean |  after  /mean  daemon/mean  gauge');
    const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
    const share = (xs: readonly number[] | null, i: number): string =>
      xs === null ? '-' : f2((xs[i] ?? 0) / mean(xs));
    engines.forEach((e, i) => {
      say(
        `${e.padEnd(13)} ${String(Math.round(before[i]!)).padStart(7)}  ${f2(before[i]! / mean(before)).padStart(5)}  ` +
          `${share(dBefore, i).padStart(11)} | ${String(Math.round(after[i]!)).padStart(6)}  ` +
          `${f2(after[i]! / mean(after)).padStart(5)}  ${share(dAfter, i).padStart(11)}  ` +
          `${f2(afterEnd.ratios[e] ?? NaN).padStart(5)}`,
      );
    });
    say(
      `expected from the mix and the table: max/mean ${f2(expected(table0))} -> ${f2(expected(afterStart.table))}; ` +
        `daemon's counters: ${f2(dBefore === null ? NaN : maxOverMean(dBefore))} -> ${f2(dAfter === null ? NaN : maxOverMean(dAfter))}`,
    );
    const metricDelta = (a: Poll, b: Poll): string =>
      // The counter appears with the service's first move.
      b.movesMetric === null ? 'not exported' : `+${b.movesMetric - (a.movesMetric ?? 0)}`;
    say(`load-aware: max/mean ${f2(B)} -> ${f2(A)}, ${movedToAfter.length} buckets moved`);
    const firstAt =
      moves.length > 0
        ? `, the first ${((moves[0]!.t - clientStart) / 1000).toFixed(0)} s after the client started`
        : '';
    say(
      `  (buckets seen to change engine in the polled table; the daemon's wccpd_load_moves_total ` +
        `${metricDelta(polls[0] as Poll, afterEnd)}${firstAt})`,
    );
    const byPair = new Map<string, Move[]>();
    for (const m of movedToAfter)
      byPair.set(`${m.from ?? '-'} -> ${m.to ?? '-'}`, [
        ...(byPair.get(`${m.from ?? '-'} -> ${m.to ?? '-'}`) ?? []),
        m,
      ]);
    for (const [pair, ms] of byPair)
      say(
        `  ${pair}  ${ms.length}: bucket (its share of the mix x the mean bucket's) ${ms.map((m) => `${m.bucket} (${f2((mix.buckets[m.bucket] ?? 0) * 256)})`).join(', ')}`,
      );
    if (moves.some((m) => m.t > afterStart.t && m.t <= afterEnd.t))
      say(`  the moves had not ended within ${SETTLE_WINDOWS} windows of the first: some fall in the after window`);
    const stranger = moves.filter((m) => ![m.from, m.to].every((e) => e !== null && engines.includes(e)));
    if (stranger.length > 0) say(`  ${stranger.length} of the table's changes were not between two engines (not load)`);
    for (const reason of loadReasons(events)) say(`  daemon: ${reason}`);
    say(
      `steady ${STEADY_MIN} min: ${steadyMoves.length} buckets moved (wccpd_load_moves_total ` +
        `${metricDelta(steadyStart, steadyEnd)}); ` +
        `max/mean per ${WINDOW_S} s window: median ${f2(steadyRatios[Math.floor(steadyRatios.length / 2)] ?? NaN)}, ` +
        `max ${f2(steadyRatios.at(-1) ?? NaN)} over ${steadyRatios.length} windows`,
    );
    const core = (k: 'daemon' | 'engines' | 'client'): string =>
      `${f2(((cpuEnd[k] - cpuStart[k]) / ((cpuEnd.t - cpuStart.t) / 1000)) * 100)} %`;
    say(
      `client: ${client?.started ?? 0} connections, ${client?.failed ?? 0} failed, ${client?.skipped ?? 0} skipped ` +
        `(over ${client === undefined ? 0 : ((client.t - clientStart) / 1000).toFixed(0)} s); CPU (of one core): ` +
        `daemon ${core('daemon')}, ${ENGINES} engines ${core('engines')}, client ${core('client')}; ` +
        `load ${load1.map((l) => l.toFixed(1)).join(' ')} at the end`,
    );
    const met = {
      before: B >= TARGET.before,
      after: A <= TARGET.after,
      moves: movedToAfter.length <= TARGET.moves,
      steady: steadyMoves.length <= TARGET.steady,
    };
    say(
      `targets (issue 35): B >= ${TARGET.before} ${met.before ? 'met' : 'MISSED'}, A <= ${TARGET.after} ` +
        `${met.after ? 'met' : 'MISSED'}, N <= ${TARGET.moves} ${met.moves ? 'met' : 'MISSED'}, ` +
        `${TARGET.steady} steady moves ${met.steady ? 'met' : 'MISSED'}`,
    );
    if (WRITE) {
      const stamp = started.toISOString().slice(0, 16).replace('T', '-').replace(':', '');
      const file = `${RESULTS}${stamp}-load-aware.json`;
      const raw = {
        command: `node --import tsx bench/load-aware.ts ${process.argv.slice(2).join(' ')}`.trim(),
        started: started.toISOString(),
        report: out,
        windows: { beforeStart: beforeStart.t, beforeEnd: beforeEnd.t, afterStart: afterStart.t, afterEnd: afterEnd.t },
        steady: { start: steadyStart.t, end: steadyEnd.t, windows: steadyWindows },
        moves,
        mix: { addresses: mix.addresses, weights: mix.weights, buckets: mix.buckets },
        clientBuckets: lab.clientBuckets,
        engines: Object.fromEntries(lab.engineSamples),
        client: lab.clientSamples,
        polls: polls.map((p) => ({ t: p.t, movesMetric: p.movesMetric, ratios: p.ratios })),
        tables: [table0, afterStart.table, steadyEnd.table],
        counters: { beforeStart: beforeStart.counters, beforeEnd: beforeEnd.counters, afterEnd: afterEnd.counters },
        events,
      };
      writeFileSync(file, JSON.stringify(raw));
      say(`raw: bench/results/${basename(file)}`);
    }
    await lab.down();
    if (!Object.values(met).every(Boolean)) process.exitCode = 1;
  } finally {
    polling = false;
    await pollLoop;
    lab.stopNow();
  }
}

/** The reasons of the daemon's load moves, from its events (GET /api/v1/events), oldest first. */
function loadReasons(events: unknown): string[] {
  const list = (events as { events?: { time: number; reason?: unknown }[] } | null)?.events ?? [];
  return list
    .filter((e) => typeof e.reason === 'string' && e.reason.startsWith('load'))
    .sort((a, b) => a.time - b.time)
    .map((e) => `${new Date(e.time).toISOString().slice(11, 19)} ${String(e.reason)}`);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

main().catch((e: unknown) => {
  console.error(
    `${CLI.name}: ${e instanceof BenchError ? e.message : e instanceof Error ? (e.stack ?? e.message) : String(e)}`,
  );
  process.exitCode = 1;
});
