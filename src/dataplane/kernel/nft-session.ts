// One persistent `nft -i` process for the nft backend's transactions. A new `nft` loads its cache of our table (8,192
// static map entries) before it does anything, every time; a process that stays up keeps that cache and refetches it
// only when the ruleset's generation changed (an admin's `nft` command meanwhile just makes the next transaction
// refetch). What that saves: docs/dataplane/nft.md, "How a change reaches the kernel".
//
// Each transaction is written to a file in a private directory (mkdtemp, mode 0700: no one else can put a symlink or
// another file there; made for the transaction and removed after it) and sent as `include "<file>"`: nft applies an
// included file as ONE batch, so an error anywhere in it (syntax, or the kernel refusing a command) applies nothing.
// The line after it is `describe ct mark`, whose fixed output marks the end of the transaction's output; nft's stderr
// is merged into stdout (`2>&1`), so an error's text arrives, in order, before that line. One transaction at a time
// (the redirector serialises them); one that does not finish within the timeout kills the process, and the next
// transaction starts a new one.
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DataplaneError } from '../errors.js';
import type { ExecOptions } from './exec.js';
import { createLineSession, type SessionChild } from './line-session.js';

/** What `describe ct mark` prints (nftables 0.9 to 1.x): the end of a transaction's output. */
export const SENTINEL_COMMAND = 'describe ct mark';
export const SENTINEL_LINE = 'ct expression, datatype mark (packet mark) (basetype integer), 32 bits';

export type { SessionChild } from './line-session.js';

export interface NftSessionOptions extends ExecOptions {
  /** Starts the `nft -i` process (tests: a fake). Default: `nft -i`, in `netns` when set, stderr into stdout. */
  readonly spawnChild?: () => SessionChild;
  /** Where the private directories are made; default the system's temporary directory (nft backend: its state dir). */
  readonly parentDir?: string;
}

/** Applies ruleset texts, one at a time, through one long-lived `nft -i`. */
export interface NftTransactions {
  /** Applies `text` as one atomic transaction; rejects with a DataplaneError carrying nft's message. */
  run(text: string): Promise<void>;
  /** Ends the process; a later run() starts again. */
  stop(): Promise<void>;
  /** The nft process's id while one runs (the bench reads its CPU time). */
  pid(): number | undefined;
  /** How transactions reach the kernel, for the start-up log line. */
  readonly describe: string;
}

function defaultSpawn(netns: string | undefined, flags: readonly string[]): () => SessionChild {
  // `exec` so the process killed on a timeout is nft itself (ip netns exec execs too).
  const argv = [...(netns !== undefined ? ['ip', 'netns', 'exec', netns] : []), 'nft', ...flags];
  // nft -i reads ~/.editrc and ~/.nft.history and writes the history at exit: with /dev/null as its home (a file, so
  // no path under it can exist) it reads and writes none of them.
  return () =>
    spawn('sh', ['-c', 'exec "$@" 2>&1', 'sh', ...argv], {
      stdio: ['pipe', 'pipe', 'ignore'],
      env: { ...process.env, HOME: '/dev/null' },
    });
}

/** One long-lived `nft <flags>` (in `netns` when set) whose exchanges end at the sentinel's line. */
function nftLineSession(options: NftSessionOptions, flags: readonly string[], exchangeName: string) {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const where = `${options.netns !== undefined ? `ip netns exec ${options.netns} ` : ''}nft ${flags.join(' ')}`;
  const session = createLineSession({
    spawnChild: options.spawnChild ?? defaultSpawn(options.netns, flags),
    where,
    isEnd: (line) => line === SENTINEL_LINE,
    exchangeName,
    cannotRun: (e) => `cannot run nft: ${e.message} (is nft installed?)`,
    timeoutMs,
  });
  return { session, where, timeoutMs };
}

export function createNftSession(options: NftSessionOptions = {}): NftTransactions {
  const { session, where, timeoutMs } = nftLineSession(options, ['-i'], 'transaction');
  let serial = 0;

  return {
    describe: `one persistent \`${where}\` process (transactions as included files in a private directory)`,
    pid: () => session.pid(),
    async run(text: string): Promise<void> {
      if (session.busy()) throw new DataplaneError('command-failed', 'nft session: a transaction is already running');
      // The state directory may not exist yet at the first transaction (start() comes before any state is saved).
      if (options.parentDir !== undefined) await mkdir(options.parentDir, { recursive: true, mode: 0o750 });
      const dir = await mkdtemp(join(options.parentDir ?? tmpdir(), 'wccpd-nft-'));
      const file = join(dir, `transaction-${++serial}.nft`);
      const line = `nft -f ${file} (${where})`;
      try {
        if (/["\n\\]/.test(dir)) throw new DataplaneError('command-failed', `nft session: unusable directory ${dir}`);
        await writeFile(file, text, { mode: 0o600, flag: 'wx' });
        const { lines } = await session.exchange(
          `include "${file}"\n${SENTINEL_COMMAND}\n`,
          () => new DataplaneError('command-timeout', `${line} did not finish within ${timeoutMs} ms`, line),
        );
        const output = lines.join('\n');
        if (/\bError:/.test(output)) {
          // "In file included from <cmdline>:1:1-60:" says nothing the file's own position does not.
          const text = output
            .split('\n')
            .filter((l) => !l.startsWith('In file included from '))
            .join('\n')
            .trim();
          throw new DataplaneError('command-failed', `${line} failed: ${firstLines(text)}`, line, text);
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    stop: () => session.stop(),
  };
}

function firstLines(s: string, n = 3): string {
  return s.split('\n').slice(0, n).join(' | ');
}

/** Listings (`list counters ...`, `list set ...`) as nft's JSON, through one long-lived `nft -j -i`. */
export interface NftListings {
  /** The JSON nft prints for `args` (e.g. `list counters table inet wccpd`); rejects with nft's message. */
  list(args: readonly string[]): Promise<string>;
  /** Ends the process; a later list() starts again. */
  stop(): Promise<void>;
  pid(): number | undefined;
}

// Only names reach this process (no strings, no newlines): a listing is one line of words.
const LISTING_WORD = /^[A-Za-z0-9_.-]+$/;

/**
 * A second persistent `nft`, for reads: the admin views and metrics read the counters about once a second while
 * someone watches, and each `nft -j list` process costs a start and a fetch of the whole table. A listing fetches
 * what it lists again every time (counters are never read from a stale cache), so only the start is saved. Kept
 * apart from the transaction session so a read never waits for a change, nor a change for a read. Listings queue
 * here, one at a time.
 */
export function createNftReader(options: NftSessionOptions = {}): NftListings {
  const { session, where, timeoutMs } = nftLineSession(options, ['-j', '-i'], 'listing');
  // Never rejects: each listing's failure is its caller's alone.
  let tail: Promise<unknown> = Promise.resolve();

  const listOnce = async (args: readonly string[]): Promise<string> => {
    const line = `nft -j ${args.join(' ')} (${where})`;
    if (args.length === 0 || !args.every((a) => LISTING_WORD.test(a)))
      throw new DataplaneError('command-failed', `nft reader: not a listing: ${JSON.stringify(args)}`);
    const { lines } = await session.exchange(
      `${args.join(' ')}\n${SENTINEL_COMMAND}\n`,
      () => new DataplaneError('command-timeout', `${line} did not finish within ${timeoutMs} ms`, line),
    );
    const output = lines.join('\n');
    if (/\bError:/.test(output))
      throw new DataplaneError('command-failed', `${line} failed: ${firstLines(output.trim())}`, line, output);
    return output;
  };

  return {
    list(args: readonly string[]): Promise<string> {
      const run = tail.then(() => listOnce(args));
      tail = run.catch(() => undefined);
      return run;
    },
    stop: () => session.stop(),
    pid: () => session.pid(),
  };
}
