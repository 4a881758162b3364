// How long a busy Squid leaves the HTTP probe's connection unanswered, against the probe's silence budget
// (docs/health.md, "A busy engine"). The namespace lab with two Debian Squid engines and wccpd (nft backend, its
// default probe): first idle, then phases of the load test/e2e/rebalance runs (the client opens new connections,
// keep-alive off, to all 256 buckets, round after round), every other phase with drains and undrains through the API.
// In each phase a separate client in the gateway namespace sends the probe's request (OPTIONS, Max-Forwards: 0) to
// engine 1's port 3128 every 50 ms and times the answer; beside it the time Squid logged for those requests (from
// reading them), and the engines wccpd itself turned suspect (its log).
//   sudo node --import tsx bench/busy-engine.ts [--phases 4] [--seconds 15]
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { createLab, originAddresses, type Lab } from '../test/lab/lab.js';
import {
  getBuckets,
  http,
  shares,
  startDaemon,
  TOKEN,
  waitUntil,
  writeConfig,
  type Daemon,
} from '../test/e2e/harness.js';
import { checkArgs, cleanUpOnClosedOutput, exitOnSignals, numberOption, orExit, type Cli } from './cli.js';

const CLI: Cli = {
  name: 'bench/busy-engine',
  usage: [
    'usage: sudo node --import tsx bench/busy-engine.ts [--phases 4] [--seconds 15]',
    '  --phases N   load phases after the idle one (every other one with drains; default 4)',
    '  --seconds S  length of each phase (default 15)',
  ].join('\n'),
  values: ['--phases', '--seconds'],
};
const args = orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));
const PHASES = numberOption(CLI, args, '--phases', 4);
const SECONDS = numberOption(CLI, args, '--seconds', 15);
/** The default probe's silence budget: interval x fall + timeout (docs/health.md). */
const SILENCE_BUDGET_MS = 50 * 16 + 400;
const PROBE_TIMEOUT_MS = 400;

interface Phase {
  readonly what: string;
  readonly answersMs: number[];
  readonly requests: number;
  readonly suspect: number;
}

/** Probe-like requests from the gateway to engine 1 every 50 ms for `seconds`: each answer's time (ms). */
async function probeTimes(lab: Lab, seconds: number): Promise<number[]> {
  const engine = lab.engineAddress(1);
  const loop =
    `end=$((SECONDS+${Math.ceil(seconds)})); while [ $SECONDS -lt $end ]; do ` +
    `curl -s -o /dev/null --max-time 3 -w '%{time_starttransfer}\\n' -X OPTIONS -H 'Max-Forwards: 0' ` +
    `http://${engine}:3128/; sleep 0.05; done`;
  const r = await lab.exec(lab.ns.gw, 'bash', ['-c', loop], { timeoutMs: (seconds + 15) * 1000, allowFail: true });
  return r.stdout
    .trim()
    .split('\n')
    .map((l) => Number(l) * 1000)
    .filter((v) => Number.isFinite(v) && v > 0);
}

/** wccpd's own verdicts so far: lines of its log that turned an engine suspect. */
function suspectVerdicts(daemon: Daemon): number {
  return daemon.proc.lines().filter((l) => /"event":"table"/.test(l) && /usable -> suspect/.test(l)).length;
}

/** One phase: the probe-like requests' answer times while the client's rounds (and the drains) run. */
async function phase(lab: Lab, what: string, load: boolean, drains: boolean): Promise<Omit<Phase, 'suspect'>> {
  const addrs = [lab.engineAddress(1), lab.engineAddress(2)];
  const urls = originAddresses().map((a) => `http://${a}/nocache/busy-engine/${process.pid}/${a}`);
  let stop = false;
  let requests = 0;
  const client = (async () => {
    for (let round = 0; load && !stop && round < 1000; round++)
      requests += (await lab.curlMany(urls, { timeoutMs: 5000 })).length;
  })();
  const churn = (async () => {
    for (let c = 0; drains && !stop && c < 1000; c++) {
      const target = addrs[c % 2] ?? '';
      await http(lab, 'POST', `services/0/engines/${target}/drain`, TOKEN);
      await new Promise((r) => setTimeout(r, 120));
      await http(lab, 'POST', `services/0/engines/${target}/undrain`, TOKEN);
      await new Promise((r) => setTimeout(r, 120));
    }
  })();
  let answersMs: number[];
  try {
    answersMs = await probeTimes(lab, SECONDS);
  } finally {
    stop = true;
    await Promise.all([client, churn]);
  }
  // After the client's last round: `requests` counts it too.
  return { what, answersMs, requests };
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

async function main(): Promise<void> {
  exitOnSignals();
  cleanUpOnClosedOutput(CLI, () => undefined); // the lab's exit handler removes its namespaces
  const lab = await createLab({ engines: 2, name: 'busyeng' });
  try {
    await lab.startOrigin();
    const daemon = await startDaemon(lab, writeConfig(lab, 'wccpd'));
    await Promise.all([lab.startSquid(1), lab.startSquid(2)]);
    const addrs = [lab.engineAddress(1), lab.engineAddress(2)];
    await waitUntil(
      () => getBuckets(lab),
      (v) => addrs.every((a) => shares(v.buckets).get(a) === 128),
      { timeoutMs: 25_000, intervalMs: 200, what: 'both Squids registered' },
    );
    const phases: Phase[] = [];
    const run = async (what: string, load: boolean, drains: boolean): Promise<void> => {
      const before = suspectVerdicts(daemon);
      const p = await phase(lab, what, load, drains);
      phases.push({ ...p, suspect: suspectVerdicts(daemon) - before });
    };
    await run('idle', false, false);
    for (let i = 0; i < PHASES; i++) await run(i % 2 === 0 ? 'load' : 'load + drains', true, i % 2 === 1);

    const logged = readFileSync(join(lab.squidDir(1), 'access.log'), 'utf8')
      .split('\n')
      .filter((l) => l.includes(' OPTIONS '))
      .map((l) => Number(l.trim().split(/\s+/)[1]))
      .filter(Number.isFinite)
      .sort((a, b) => a - b);

    console.log(
      `${new Date().toISOString()}, 2 Debian Squid engines, ${SECONDS} s phases, probe every 50 ms, ` +
        `load average ${loadavg()[0]?.toFixed(2)} (1 min)`,
    );
    console.log(
      'phase           client requests  answers  median ms  p99 ms   max ms  >400 ms  wccpd suspect verdicts',
    );
    let idleMax = NaN;
    let loadMax = 0;
    for (const p of phases) {
      const s = [...p.answersMs].sort((a, b) => a - b);
      const max = s.at(-1) ?? NaN;
      if (p.what === 'idle') idleMax = max;
      else loadMax = Math.max(loadMax, max);
      console.log(
        `${p.what.padEnd(15)} ${String(p.requests).padStart(15)} ${String(s.length).padStart(8)} ` +
          `${quantile(s, 0.5).toFixed(1).padStart(10)} ${quantile(s, 0.99).toFixed(1).padStart(7)} ` +
          `${max.toFixed(1).padStart(8)} ${String(s.filter((v) => v > PROBE_TIMEOUT_MS).length).padStart(8)} ` +
          `${String(p.suspect).padStart(23)}`,
      );
    }
    console.log(
      `Squid's own time for those requests (access.log, from reading them): ${logged.length} logged, ` +
        `p99 ${quantile(logged, 0.99)} ms, max ${logged.at(-1) ?? NaN} ms`,
    );
    console.log(
      `longest answer under load ${loadMax.toFixed(0)} ms = ${(loadMax / idleMax).toFixed(0)} x idle's longest ` +
        `(${idleMax.toFixed(1)} ms) = ${(loadMax / SILENCE_BUDGET_MS).toFixed(2)} x the default silence budget ` +
        `(${SILENCE_BUDGET_MS} ms)`,
    );
  } finally {
    await lab.destroy();
  }
}

await main();
