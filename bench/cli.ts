// What every bench's command line shares: --help (the usage, exit 0, before anything is built or set up), a clear
// error for an argument it does not take, and a clean stop when its output is closed under it (`... | head`).
import { BenchError } from './dataplane-measure.js';

export interface Cli {
  /** The bench's name in messages, e.g. `bench/packet-cost`. */
  readonly name: string;
  /** What --help prints: the usage line(s) and what the options mean. */
  readonly usage: string;
  /** Options that take a value (`--rounds 3`). */
  readonly values?: readonly string[];
  /** Options that take none (`--quick`). */
  readonly switches?: readonly string[];
  /** Whether it takes operands (anything not starting with `-`) besides its options. */
  readonly operands?: boolean;
}

/**
 * Checks `argv` against the options `cli` names: `--help` or `-h` prints the usage and exits 0; an unknown argument,
 * or an option without its value, is a BenchError that names it. Returns `argv` for the bench's own parsing.
 */
export function checkArgs(cli: Cli, argv: readonly string[]): readonly string[] {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${cli.usage.trimEnd()}\n`);
    process.exit(0);
  }
  const values = new Set(cli.values ?? []);
  const switches = new Set(cli.switches ?? []);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (switches.has(a) || (cli.operands === true && !a.startsWith('-'))) continue;
    if (values.has(a)) {
      const v = argv[i + 1];
      if (v === undefined || v.startsWith('--')) throw new BenchError(`${a} needs a value; --help lists the arguments`);
      i++;
      continue;
    }
    throw new BenchError(`unknown argument "${a}"; --help lists the arguments`);
  }
  return argv;
}

/** `f()`, or its BenchError printed as `name: message` and exit 1 (for a bench that parses outside a main()). */
export function orExit<T>(cli: Pick<Cli, 'name'>, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (!(e instanceof BenchError)) throw e;
    console.error(`${cli.name}: ${e.message}`);
    process.exit(1);
  }
}

/**
 * The number after option `name` in `argv` (`dflt` without the option); otherwise as orExit, a message and exit 1,
 * unless it is finite and above 0 (with `zero`, at least 0).
 */
export function numberOption(
  cli: Pick<Cli, 'name'>,
  argv: readonly string[],
  name: string,
  dflt: number,
  zero = false,
): number {
  return orExit(cli, () => {
    const i = argv.indexOf(name);
    if (i < 0) return dflt;
    const v = Number(argv[i + 1]);
    if (!Number.isFinite(v) || v < 0 || (v === 0 && !zero))
      throw new BenchError(`${name} takes a number ${zero ? '>= 0' : '> 0'}; got "${argv[i + 1] ?? ''}"`);
    return v;
  });
}

/**
 * Runs `cleanup` and exits 141 (as a writer killed by SIGPIPE would) when stdout or stderr is closed under the bench,
 * say by `| head`: the next write fails with EPIPE, and unhandled that error ends the process without its `finally`
 * blocks, leaving its namespaces and processes behind. SIGINT and SIGTERM are each bench's own to handle.
 */
export function cleanUpOnClosedOutput(cli: Pick<Cli, 'name'>, cleanup: () => void): void {
  let done = false;
  const onError = (stream: NodeJS.WriteStream) => (err: NodeJS.ErrnoException) => {
    if (done) return;
    done = true;
    cleanup();
    if (stream !== process.stderr) {
      try {
        process.stderr.write(`${cli.name}: output closed (${err.code ?? err.message}): cleaned up and stopped\n`);
      } catch {
        // stderr is gone too
      }
    }
    process.exit(141);
  };
  process.stdout.on('error', onError(process.stdout));
  process.stderr.on('error', onError(process.stderr));
}

/**
 * SIGINT and SIGTERM exit 130 and 143 instead of ending the process at once, so that exit handlers run (the lab's,
 * test/lab/lab.ts, kills its processes and deletes its namespaces): for a bench with no handler of its own.
 */
export function exitOnSignals(): void {
  process.on('SIGINT', () => process.exit(130));
  process.on('SIGTERM', () => process.exit(143));
}
