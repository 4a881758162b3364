// The cost of a change and of scale (docs/performance.md): how long a membership change takes to reach the kernel,
// what 32 engines and 8 services cost in rules and kernel memory, new connections/s with 100,000 established flows in
// the gateway's conntrack table, and unrelated traffic (not a service's port) through the gateway with and without
// wccpd. Every traffic figure is measured side by side in one run, with its ratio.
// Run as root: npx tsx bench/dataplane-scale.ts [--quick] [--changes-only]   (--changes-only: the change timings alone)
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, release } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLab, type Lab, type LabProcess } from '../test/lab/lab.js';
import { checkArgs, cleanUpOnClosedOutput, exitOnSignals } from './cli.js';
import type { Cli } from './cli.js';
import { BenchError, runIperf, runWrk, type NsExec } from './dataplane-measure.js';
import { nftPath, type DataPath } from './dataplane-paths.js';
import { renderTable, type Cell } from './dataplane-report.js';
import { measureChanges, type ChangeResult, type ChangeRow } from './dataplane-scale-change.js';
import { nginxCommand } from './servers/nginx.js';

const TARGET = '198.51.100.80';
const SERVICE_PORT = 80; // the bench service (id 90) redirects 80 and 5201
const UNRELATED_PORT = 8080; // nginx on the origin, not a service port
const UNRELATED_IPERF = 5202;
const LOAD_CPU = 0;
const SERVER_CPU = 1;
const FLOWS = 100_000;
// Where the filler's ACKs go: an address on the client segment with a static neighbour nobody answers to.
const SINK = '203.0.113.250';
const SINK_MAC = '02:00:00:00:00:fe';
const FILL = fileURLToPath(new URL('./conntrack-fill.ts', import.meta.url));

const CLI: Cli = {
  name: 'bench/dataplane-scale',
  usage: `usage (root): npx tsx bench/dataplane-scale.ts [--quick] [--changes-only]
The nft backend with 32 engines in 8 services: time from a membership change to the kernel, rules and kernel memory,
new connections/s with 100,000 established flows, unrelated traffic with and without wccpd, counter reads
(docs/performance.md). --quick: one round of 3 s per measure; --changes-only: the change timings alone.`,
  switches: ['--quick', '--changes-only'],
};

interface Settings {
  rounds: number;
  seconds: number;
  changes: number;
  quick: boolean;
  changesOnly: boolean;
}

function parseArgs(argv: readonly string[]): Settings {
  checkArgs(CLI, argv);
  const quick = argv.includes('--quick');
  const changesOnly = argv.includes('--changes-only');
  return quick
    ? { rounds: 1, seconds: 3, changes: 200, quick, changesOnly }
    : { rounds: 3, seconds: 5, changes: 200, quick, changesOnly };
}

const loadAverage = (): number => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

function cellOf(cells: Map<string, Map<string, Cell>>, measure: string, path: string): Cell {
  let byPath = cells.get(measure);
  if (byPath === undefined) cells.set(measure, (byPath = new Map()));
  let c = byPath.get(path);
  if (c === undefined) byPath.set(path, (c = { values: [], errors: 0 }));
  return c;
}

async function waitListening(
  lab: Lab,
  ns: string,
  ports: readonly number[],
  who: readonly LabProcess[],
): Promise<void> {
  for (let i = 0; i < 100; i++) {
    for (const p of who)
      if (!p.running()) throw new BenchError(`${p.command} exited at start:\n${p.output().slice(-1000)}`);
    const ss = await lab.exec(ns, 'ss', ['-Htln'], { allowFail: true, timeoutMs: 2000 });
    if (ports.every((port) => new RegExp(`:${port}\\b`).test(ss.stdout))) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new BenchError(`servers in ${ns} did not listen on ${ports.join(', ')} within 5 s`);
}

/** nginx on the origin (80 and 8080) and on engine 1 (3129, where the lab's engine rule sends port 80); iperf3 5202. */
async function startServers(lab: Lab): Promise<void> {
  const pin = ['-c', String(SERVER_CPU)];
  const sites = [
    {
      ns: lab.ns.origin,
      ...nginxCommand({ name: 'origin', port: SERVICE_PORT, dir: join(lab.dir, 'nginx-o80') }),
      port: SERVICE_PORT,
    },
    {
      ns: lab.ns.origin,
      ...nginxCommand({ name: 'origin', port: UNRELATED_PORT, dir: join(lab.dir, 'nginx-o8080') }),
      port: UNRELATED_PORT,
    },
    {
      ns: lab.engineNs(1),
      ...nginxCommand({ name: 'engine1', port: 3129, dir: join(lab.dir, 'nginx-e1') }),
      port: 3129,
    },
  ];
  const procs = sites.map((s) => lab.spawn(s.ns, 'taskset', [...pin, s.cmd, ...s.args]));
  const iperf = lab.spawn(lab.ns.origin, 'taskset', [...pin, 'iperf3', '-s', '-p', String(UNRELATED_IPERF)]);
  await waitListening(
    lab,
    lab.ns.origin,
    [SERVICE_PORT, UNRELATED_PORT, UNRELATED_IPERF],
    [...procs.slice(0, 2), iperf],
  );
  await waitListening(lab, lab.engineNs(1), [3129], procs.slice(2));
}

/** Conntrack on, nothing else: what any stateful firewall or NAT on the gateway already costs. */
function conntrackOnlyPath(lab: Lab): DataPath {
  return {
    key: 'static-ct',
    lab,
    label: 'no wccpd, conntrack on',
    servedBy: 'origin',
    async install() {
      await lab.exec(lab.ns.gw, 'nft', ['-f', '-'], {
        input:
          'table inet wccpbench_ct {\n chain forward {\n  type filter hook forward priority filter; policy accept;\n' +
          '  ct state new counter\n }\n}\n',
      });
    },
    async remove() {
      await lab.exec(lab.ns.gw, 'nft', ['delete', 'table', 'inet', 'wccpbench_ct'], { allowFail: true });
    },
    notes: () => [],
  };
}

/** In a lab of its own whose gateway never had a policy rule (the kernel keeps the rule walk once one was added). */
const noWccpd = (lab: Lab): DataPath => ({
  key: 'direct',
  lab,
  label: 'no wccpd',
  servedBy: 'origin',
  install: async () => {},
  remove: async () => {},
  notes: () => [],
});

async function conntrackCount(lab: Lab): Promise<number> {
  const r = await lab.exec(lab.ns.gw, 'conntrack', ['-C'], { allowFail: true });
  return Number(r.stdout.trim());
}

async function fillConntrack(lab: Lab): Promise<number> {
  const r = await lab.exec(lab.ns.gw, process.execPath, ['--import', 'tsx', FILL, '203.0.113.1', SINK, String(FLOWS)], {
    timeoutMs: 120_000,
    allowFail: true,
  });
  const j = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as { sent?: number; errors?: number; error?: string };
  if (j.sent !== FLOWS) throw new BenchError(`conntrack filler: ${j.error ?? `sent ${j.sent}, errors ${j.errors}`}`);
  return conntrackCount(lab);
}

function printChanges(c: ChangeResult): void {
  const kb = (b: number | null): string => (b === null ? 'not measured' : `${(b / 1024).toFixed(0)} KiB`);
  console.log(
    `## change to rules applied (${c.engines} engines, ${c.services} services, each engine in every service)`,
  );
  console.log('');
  console.log('| change | changes | median (ms) | p99 (ms) | max (ms) | CPU per change (ms) |');
  console.log('|---|---|---|---|---|---|');
  for (const r of c.rows) {
    console.log(
      `| ${r.label} | ${r.count} | ${r.medianMs.toFixed(1)} | ${r.p99Ms.toFixed(1)} | ${r.maxMs.toFixed(1)} | ` +
        `${r.cpuMs.toFixed(1)} |`,
    );
  }
  const turns = c.rows.find((r) => r.batch === 'turns');
  const once = c.rows.find((r) => r.batch === 'once');
  if (turns !== undefined && once !== undefined) {
    console.log('');
    console.log(
      `an engine leaving all ${c.services} groups, one applyAll / ${c.services} applies in turn: median ` +
        `${(once.medianMs / turns.medianMs).toFixed(3)}, p99 ${(once.p99Ms / turns.p99Ms).toFixed(3)}, ` +
        `CPU ${(once.cpuMs / turns.cpuMs).toFixed(3)} (${turns.count} and ${once.count} changes, interleaved)`,
    );
  }
  const byRead = (w: ChangeRow['read']): ChangeRow | undefined => c.rows.find((r) => r.read === w);
  const before = byRead('processes');
  for (const [now, what] of [
    [byRead('reader'), 'the same listings through the persistent reader'],
    [byRead('status'), 'a status read now'],
  ] as const) {
    if (before === undefined || now === undefined) continue;
    console.log('');
    console.log(
      `counter read, ${what} / a process per listing: median ${(now.medianMs / before.medianMs).toFixed(3)}, ` +
        `CPU ${(now.cpuMs / before.cpuMs).toFixed(3)} (${before.count} reads each, interleaved)`,
    );
  }
  console.log('');
  console.log(
    'time: from the call to apply() (or applyAll(), or the first of the applies in turn) to nft and ip having returned (the kernel has the rules), in a process in the ' +
      'namespace as the daemon runs; CPU: nft, ip and that process, mean per change (what the change costs whatever the load)',
  );
  console.log('');
  console.log(`## size (${c.engines} engines, ${c.services} services)`);
  console.log('');
  console.log(
    `- nft rules: ${c.rules} in ${c.chains} chains; set and map elements: ${c.setElements} ` +
      `(8,192 of them the static hash maps); \`nft list table\`: ${(c.rulesetBytes / 1024).toFixed(0)} KiB of text`,
  );
  console.log(
    `- ip rules: ${c.ipRules} (one per engine slot: a slot per service and engine), routing tables: ${c.ipRules}`,
  );
  console.log(
    `- kernel memory: static part ${kb(c.kmemBaseBytes)}, the ${c.services} services and ${c.engines} engines ` +
      `on top ${kb(c.kmemServicesBytes)} (${c.kmemNote})`,
  );
  console.log('');
}

async function main(): Promise<void> {
  const s = parseArgs(process.argv.slice(2));
  if (process.getuid?.() !== 0)
    throw new BenchError('bench/dataplane-scale needs root (network namespaces, nft, policy routes)');
  // The labs' and measureChanges' exit handlers remove what they made (process.exit runs them).
  cleanUpOnClosedOutput(CLI, () => undefined);
  exitOnSignals();
  for (const t of s.changesOnly ? ['nft', 'ip'] : ['wrk', 'iperf3', 'taskset', 'nft', 'ip', 'nginx', 'conntrack']) {
    try {
      execFileSync('sh', ['-c', `command -v ${t}`], { stdio: 'ignore' });
    } catch {
      throw new BenchError(`missing tool: ${t}`);
    }
  }
  const t0 = Date.now();
  const loads: number[] = [loadAverage()];
  console.log(
    `bench/dataplane-scale ${s.changesOnly ? '--changes-only' : s.quick ? '--quick' : '(full)'} ` +
      new Date().toISOString(),
  );
  console.log(
    `machine: ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), Linux ${release()}, Node ${process.version}`,
  );
  console.log('');

  const changes = await measureChanges({ engines: 32, services: 8, changes: s.changes, tag: 'scale' });
  loads.push(loadAverage());
  printChanges(changes);
  if (s.changesOnly) {
    console.log(`note: 1-min load average during the run: ${loads.join(' ')} (${cpus().length} CPUs)`);
    console.log(`total ${((Date.now() - t0) / 1000).toFixed(0)} s`);
    return;
  }

  const lab = await createLab({ engines: 1, name: 'scale' });
  const pristine = await createLab({ engines: 1, name: 'nowccpd' }).catch(async (e: unknown) => {
    await lab.destroy();
    throw e;
  });
  const exec: NsExec = (ns, cmd, args, opts) => lab.exec(ns, cmd, args, opts);
  const cells = new Map<string, Map<string, Cell>>();
  const notes: string[] = [];
  const nft = nftPath(lab);
  try {
    for (const l of [lab, pristine]) {
      await l.exec(l.ns.client, 'sysctl', ['-q', '-w', 'net.ipv4.ip_local_port_range=1024 65000']);
      await startServers(l);
    }
    // The filler's flows are unreplied mid-stream pick-ups: keep them for the whole run (default 300 s).
    await lab.exec(lab.ns.gw, 'sysctl', ['-q', '-w', 'net.netfilter.nf_conntrack_tcp_timeout_unacknowledged=7200']);
    await lab.exec(lab.ns.gw, 'ip', ['neigh', 'replace', SINK, 'lladdr', SINK_MAC, 'dev', 'c0', 'nud', 'permanent']);
    const base = { ns: lab.ns.client, cpu: LOAD_CPU, seconds: s.seconds, connections: 32 };

    // New connections/s through wccpd's nft redirect, with an empty conntrack table and with 100,000 flows in it.
    await nft.install();
    const check = await lab.curl(`http://${TARGET}/`, { timeoutMs: 3000 });
    if (check.headers['x-served-by'] !== 'engine1')
      throw new BenchError(`nft redirect check failed: ${check.status} ${check.error ?? ''}`);
    const ctRows = [
      { key: 'empty', label: 'nft redirect, conntrack empty' },
      { key: 'full', label: `nft redirect, +${FLOWS.toLocaleString('en-US')} established flows` },
    ];
    for (let round = 0; round < s.rounds; round++) {
      await lab.exec(lab.ns.gw, 'conntrack', ['-F'], { allowFail: true });
      await new Promise((r) => setTimeout(r, 500));
      const w0 = await runWrk(exec, { ...base, url: `http://${TARGET}/`, close: true });
      cellOf(cells, 'cps-ct', 'empty').values.push(w0.requestsPerSecond);
      cellOf(cells, 'cps-ct', 'empty').errors += w0.errors;
      const before = await fillConntrack(lab);
      const w1 = await runWrk(exec, { ...base, url: `http://${TARGET}/`, close: true });
      const after = await conntrackCount(lab);
      cellOf(cells, 'cps-ct', 'full').values.push(w1.requestsPerSecond);
      cellOf(cells, 'cps-ct', 'full').errors += w1.errors;
      notes.push(
        `round ${round + 1}: conntrack entries in the gateway ${before} before the filled run, ${after} after`,
      );
      loads.push(loadAverage());
      console.error(`round ${round + 1}/${s.rounds}: conntrack scale done`);
    }
    await nft.remove();
    await lab.exec(lab.ns.gw, 'conntrack', ['-F'], { allowFail: true });

    // Unrelated traffic (port 8080 and iperf3 on 5202: not the service's ports) with and without wccpd.
    const paths = [
      noWccpd(pristine),
      conntrackOnlyPath(lab),
      { ...nft, key: 'nft' as const, label: 'wccpd (nft, service on 80 + 5201)', servedBy: 'origin' },
    ];
    for (let round = 0; round < s.rounds; round++) {
      const order = paths.map((_, i) => paths[(i + round) % paths.length] as DataPath);
      for (const p of order) {
        const on = p.lab;
        const exec: NsExec = (ns, cmd, args, opts) => on.exec(ns, cmd, args, opts);
        const base = { ns: on.ns.client, cpu: LOAD_CPU, seconds: s.seconds, connections: 32 };
        await p.install();
        try {
          const url = `http://${TARGET}:${UNRELATED_PORT}/`;
          const c = await on.curl(url, { timeoutMs: 3000 });
          if (c.headers['x-served-by'] !== 'origin')
            throw new BenchError(`${p.label}: port ${UNRELATED_PORT} not served by the origin`);
          const rps = await runWrk(exec, { ...base, url, close: false });
          cellOf(cells, 'u-rps', p.key).values.push(rps.requestsPerSecond);
          cellOf(cells, 'u-rps', p.key).errors += rps.errors;
          const cps = await runWrk(exec, { ...base, url, close: true });
          cellOf(cells, 'u-cps', p.key).values.push(cps.requestsPerSecond);
          cellOf(cells, 'u-cps', p.key).errors += cps.errors;
          const ip = await runIperf(exec, {
            ns: on.ns.client,
            cpu: LOAD_CPU,
            host: TARGET,
            port: UNRELATED_IPERF,
            seconds: s.seconds,
          });
          cellOf(cells, 'u-gbps', p.key).values.push(ip.gbitPerSecond);
        } finally {
          await p.remove();
        }
        loads.push(loadAverage());
        console.error(`round ${round + 1}/${s.rounds}: unrelated traffic, ${p.label} done`);
      }
    }
    console.log(
      `## new connections/s with ${FLOWS.toLocaleString('en-US')} established flows in the gateway's conntrack table`,
    );
    console.log('');
    console.log(
      `wrk -t1 -c32 -d${s.seconds}s -H 'Connection: close' to ${TARGET}:80 through wccpd's nft redirect (engine 1), ` +
        `${s.rounds} round(s); the flows are mid-stream TCP pick-ups from the gateway (bench/conntrack-fill.ts)`,
    );
    console.log('');
    console.log(
      renderTable({
        measures: [{ key: 'cps-ct', label: 'new connections/s', unit: 'conn/s', digits: 0, higherIsBetter: true }],
        paths: ctRows,
        cells,
        baseline: 'empty',
        direct: 'empty',
      })
        .replace('vs static', 'vs empty ')
        .replace('vs direct', 'vs empty '),
    );
    console.log('');
    console.log(
      `## unrelated traffic through the gateway (${TARGET}:${UNRELATED_PORT} and iperf3 on ${UNRELATED_IPERF}; ` +
        'the service redirects 80 and 5201)',
    );
    console.log('');
    console.log(
      renderTable({
        measures: [
          { key: 'u-rps', label: 'requests/s, keep-alive', unit: 'req/s', digits: 0, higherIsBetter: true },
          { key: 'u-cps', label: 'new connections/s', unit: 'conn/s', digits: 0, higherIsBetter: true },
          { key: 'u-gbps', label: 'throughput, 1 TCP flow', unit: 'Gbit/s', digits: 2, higherIsBetter: true },
        ],
        paths,
        cells,
        baseline: 'static-ct',
        direct: 'direct',
      })
        .replace('vs static', 'vs ct on  ')
        .replace('vs direct', 'vs none  '),
    );
    console.log('');
    console.log('ratios: vs ct on = path / "no wccpd, conntrack on"; vs none = path / "no wccpd" (medians)');
  } finally {
    await nft.remove().catch(() => undefined);
    for (const l of [lab, pristine]) {
      const d = await l.destroy();
      if (d.strays.length > 0) notes.push(`lab.destroy killed stray processes ${d.strays.join(', ')}`);
    }
  }
  for (const n of notes) console.log(`note: ${n}`);
  console.log(
    `note: 1-min load average during the run: ${loads.map((l) => l.toFixed(1)).join(' ')} (${cpus().length} CPUs)`,
  );
  console.log(`total ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

main().catch((e: unknown) => {
  console.error(e instanceof BenchError ? `bench/dataplane-scale: ${e.message}` : e);
  process.exit(1);
});
