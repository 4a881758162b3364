// What an ip rule leaves behind: direct forwarding (no redirect, no conntrack) through a gateway that once had one
// policy rule, added and deleted, against an identical gateway that never had one. The kernel keeps walking the rules
// (local and main tables apart, a full lookup to check the source) once any rule was added to a namespace, which is
// why bench/dataplane measures "no wccpd" in a lab of its own. Pairs alternate which lab goes first; prints each
// pair's ratios and their medians. See docs/performance.md.
// Run as root: npx tsx bench/rule-residue.ts [--pairs 10] [--seconds 2]
import { join } from 'node:path';
import { createLab, type Lab } from '../test/lab/lab.js';
import { checkArgs, cleanUpOnClosedOutput, exitOnSignals } from './cli.js';
import type { Cli } from './cli.js';
import { BenchError, intFlag, runIperf, runWrk, type NsExec } from './dataplane-measure.js';
import { median } from './dataplane-report.js';
import { nginxCommand } from './servers/nginx.js';

const CLI: Cli = {
  name: 'bench/rule-residue',
  usage: `usage (root): npx tsx bench/rule-residue.ts [--pairs N] [--seconds S]
Direct forwarding through a gateway that once had one ip rule against one that never had one, in pairs that alternate
which goes first: requests/s, new connections/s, one TCP flow and their ratios. --pairs 1..100 (10), --seconds 1..60
(2) per measure.`,
  values: ['--pairs', '--seconds'],
};
const TARGET = '198.51.100.80';
const HTTP_PORT = 8080;
const IPERF_PORT = 5202;
const LOAD_CPU = 0;
const SERVER_CPU = 1;

async function startOrigin(lab: Lab): Promise<NsExec> {
  await lab.exec(lab.ns.client, 'sysctl', ['-q', '-w', 'net.ipv4.ip_local_port_range=1024 65000']);
  const n = nginxCommand({ name: 'origin', port: HTTP_PORT, dir: join(lab.dir, 'nginx-origin') });
  lab.spawn(lab.ns.origin, 'taskset', ['-c', String(SERVER_CPU), n.cmd, ...n.args]);
  lab.spawn(lab.ns.origin, 'taskset', ['-c', String(SERVER_CPU), 'iperf3', '-s', '-p', String(IPERF_PORT)]);
  for (let i = 0; i < 100; i++) {
    const ss = await lab.exec(lab.ns.origin, 'ss', ['-Htln'], { allowFail: true });
    if (ss.stdout.includes(`:${HTTP_PORT}`) && ss.stdout.includes(`:${IPERF_PORT}`))
      return (ns, cmd, args, opts) => lab.exec(ns, cmd, args, opts);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new BenchError(`the origin in ${lab.ns.origin} did not listen within 5 s`);
}

type Figures = { rps: number; cps: number; gbps: number };

async function measure(lab: Lab, exec: NsExec, seconds: number): Promise<Figures> {
  const base = { ns: lab.ns.client, cpu: LOAD_CPU, url: `http://${TARGET}:${HTTP_PORT}/`, seconds, connections: 32 };
  const w = await runWrk(exec, { ...base, close: false });
  const c = await runWrk(exec, { ...base, close: true });
  const g = await runIperf(exec, { ns: lab.ns.client, cpu: LOAD_CPU, host: TARGET, port: IPERF_PORT, seconds });
  return { rps: w.requestsPerSecond, cps: c.requestsPerSecond, gbps: g.gbitPerSecond };
}

async function main(): Promise<void> {
  const argv = checkArgs(CLI, process.argv.slice(2));
  const pairs = intFlag(argv, '--pairs', 1, 100) ?? 10;
  const seconds = intFlag(argv, '--seconds', 1, 60) ?? 2;
  if (process.getuid?.() !== 0) throw new BenchError('bench/rule-residue needs root (network namespaces, ip rule)');
  // The labs' exit handlers remove them (process.exit runs them).
  cleanUpOnClosedOutput(CLI, () => undefined);
  exitOnSignals();
  const once = await createLab({ engines: 1, name: 'onerule' });
  const never = await createLab({ engines: 1, name: 'norule' }).catch(async (e: unknown) => {
    await once.destroy();
    throw e;
  });
  try {
    const execOnce = await startOrigin(once);
    const execNever = await startOrigin(never);
    await once.exec(once.ns.gw, 'ip', ['rule', 'add', 'fwmark', '0x1', 'lookup', '200', 'priority', '100']);
    await once.exec(once.ns.gw, 'ip', ['rule', 'del', 'priority', '100']);
    const ratios: Figures[] = [];
    for (let i = 0; i < pairs; i++) {
      // Alternate which gateway goes first, so neither always runs after the other.
      const a = i % 2 === 0;
      const first = a ? await measure(once, execOnce, seconds) : await measure(never, execNever, seconds);
      const second = a ? await measure(never, execNever, seconds) : await measure(once, execOnce, seconds);
      const [o, n] = a ? [first, second] : [second, first];
      const r = { rps: o.rps / n.rps, cps: o.cps / n.cps, gbps: o.gbps / n.gbps };
      ratios.push(r);
      console.error(
        `pair ${i + 1}/${pairs}: once had a rule / never: requests/s ${r.rps.toFixed(3)}, ` +
          `new connections/s ${r.cps.toFixed(3)}, one flow ${r.gbps.toFixed(3)}`,
      );
    }
    const row = (k: keyof Figures, label: string): string => {
      const v = ratios.map((r) => r[k]);
      return `| ${label} | ${median(v).toFixed(3)} | ${Math.min(...v).toFixed(3)}..${Math.max(...v).toFixed(3)} |`;
    };
    console.log(`bench/rule-residue ${new Date().toISOString()}: ${pairs} pairs of ${seconds} s, direct forwarding`);
    console.log('');
    console.log('| measure (unrelated port, no redirect) | once had a rule / never had one (median) | min..max |');
    console.log('|---|---|---|');
    console.log(row('rps', `requests/s, keep-alive (port ${HTTP_PORT})`));
    console.log(row('cps', 'new connections/s, Connection: close'));
    console.log(row('gbps', `1 TCP flow (iperf3 ${IPERF_PORT})`));
  } finally {
    await once.destroy();
    await never.destroy();
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof BenchError ? `bench/rule-residue: ${e.message}` : e);
  process.exit(1);
});
