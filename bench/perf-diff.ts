// Where two data paths' CPU time differs, from bench/dataplane's `--perf DIR` profiles: per unit of work (a
// connection, a request), on one CPU, by kernel function (self and inclusive), path B minus path A, largest first.
//
// Run as root: npx tsx bench/perf-diff.ts [--cpu N] [--top N] A_UNITS:a1.data[,A_UNITS:a2.data...]
//   B_UNITS:b1.data[,...]   (UNITS: the work the profile covers, e.g. connections/s x seconds of that run)
// Example (new connections, 3 rounds of 3 s; the rates are in bench/dataplane's stderr lines):
//   npx tsx bench/perf-diff.ts 63999:/tmp/p/r1-cps-static.data 62883:/tmp/p/r1-cps-ingress.data
import { execFileSync } from 'node:child_process';
import { checkArgs, cleanUpOnClosedOutput } from './cli.js';
import { BenchError, PERF_PERIOD_NS, intFlag } from './dataplane-measure.js';

interface Profile {
  readonly self: Map<string, number>;
  readonly inclusive: Map<string, number>;
  /** ns per unit on the CPU. */
  readonly total: number;
}

const add = (m: Map<string, number>, k: string, v: number): void => void m.set(k, (m.get(k) ?? 0) + v);

/** Samples of `cpu` in each profile of the list, as ns per unit of work, by function. */
function load(spec: string, cpu: number): Profile {
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  let units = 0;
  let samples = 0;
  const parts = spec.split(',').map((item) => {
    const at = item.indexOf(':');
    const n = Number(item.slice(0, at));
    if (at < 0 || !(n > 0)) throw new BenchError(`expected UNITS:FILE.data, got "${item}"`);
    units += n;
    return item.slice(at + 1);
  });
  for (const file of parts) {
    const text = execFileSync('perf', ['script', '-i', file, '-F', 'cpu,ip,sym'], {
      encoding: 'utf8',
      maxBuffer: 1 << 30,
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let stack: string[] | null = null;
    let onCpu = false;
    const flush = (): void => {
      if (stack === null || !onCpu) return;
      samples++;
      if (stack[0] !== undefined) add(self, stack[0], 1);
      for (const f of new Set(stack)) add(inclusive, f, 1);
    };
    for (const line of text.split('\n')) {
      if (line.startsWith('\t')) {
        stack?.push(line.trim().split(/\s+/)[1] ?? '?');
      } else if (/^\s*\[\d+\]/.test(line)) {
        flush();
        onCpu = Number(/\[(\d+)\]/.exec(line)?.[1]) === cpu;
        stack = [];
      }
    }
    flush();
  }
  const k = PERF_PERIOD_NS / units;
  const scale = (m: Map<string, number>): Map<string, number> => new Map([...m].map(([f, v]) => [f, v * k]));
  return { self: scale(self), inclusive: scale(inclusive), total: samples * k };
}

function main(): void {
  const cli = {
    name: 'bench/perf-diff',
    usage: 'usage: bench/perf-diff.ts [--cpu N] [--top N] A_UNITS:a.data[,...] B_UNITS:b.data[,...]',
    values: ['--cpu', '--top'],
    operands: true,
  };
  const argv = checkArgs(cli, process.argv.slice(2));
  // Nothing to clean up: a closed output (`| head`) just ends it, without a stack trace.
  cleanUpOnClosedOutput(cli, () => undefined);
  if (argv.length < 2) {
    console.log(cli.usage);
    process.exit(2);
  }
  const cpu = intFlag(argv, '--cpu', 0, 1023) ?? 0;
  const top = intFlag(argv, '--top', 1, 1000) ?? 25;
  const specs = argv.filter((a, i) => !a.startsWith('--') && !cli.values.includes(argv[i - 1] ?? ''));
  if (specs.length !== 2) throw new BenchError('expected two profile lists, A and B');
  const a = load(specs[0] as string, cpu);
  const b = load(specs[1] as string, cpu);
  console.log(
    `CPU ${cpu}, ns per unit: A ${a.total.toFixed(0)}, B ${b.total.toFixed(0)}, B - A ${(b.total - a.total).toFixed(0)}`,
  );
  for (const [name, x, y] of [
    ['self', a.self, b.self],
    ['inclusive', a.inclusive, b.inclusive],
  ] as const) {
    const keys = [...new Set([...x.keys(), ...y.keys()])];
    const d = (f: string): number => (y.get(f) ?? 0) - (x.get(f) ?? 0);
    keys.sort((p, q) => Math.abs(d(q)) - Math.abs(d(p)));
    console.log(`\n${name}: B - A, A, B (ns per unit)`);
    for (const f of keys.slice(0, top))
      console.log(
        `${d(f) >= 0 ? '+' : ''}${d(f).toFixed(0).padStart(7)} ${(x.get(f) ?? 0).toFixed(0).padStart(7)} ` +
          `${(y.get(f) ?? 0).toFixed(0).padStart(7)}  ${f}`,
      );
  }
}

try {
  main();
} catch (e) {
  console.error(e instanceof BenchError ? `bench/perf-diff: ${e.message}` : e);
  process.exit(1);
}
