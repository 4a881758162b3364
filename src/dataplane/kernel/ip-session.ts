// One persistent `ip -j -force -batch -` process for the nft backend's route changes: starting `ip` from Node (the fork
// of a large process, then ip itself) costs about as much as everything else a change does (docs/dataplane/nft.md, "How
// a change reaches the kernel"). ip's stdout is unbuffered (`stdbuf -o0`) and its stderr merged into it, so each
// batch's output arrives whole and in order; after a batch's lines comes `link show dev lo` (lo exists in every
// namespace), whose JSON line marks the end. `-force` goes on after a failed line and says `Command failed -:N` with N
// counted over the process's life, so each failed line is known. A batch that does not finish within the timeout kills
// the process; the next batch (or ip exiting on its own) starts a new one.
import { spawn } from 'node:child_process';
import { DataplaneError } from '../errors.js';
import type { ExecOptions } from './exec.js';
import { createLineSession, type SessionChild } from './line-session.js';

/** What a batch printed (route answers, as JSON lines) and the error text of each failed line, by its 1-based index. */
export interface BatchResult {
  readonly out: string;
  readonly failed: ReadonlyMap<number, string>;
}

/** Runs `ip -batch` lines, one batch at a time. */
export interface IpBatches {
  run(lines: readonly string[]): Promise<BatchResult>;
  stop(): Promise<void>;
  /** The ip process's id while one runs (the bench reads its CPU time). */
  pid(): number | undefined;
}

const SENTINEL = 'link show dev lo';
const isSentinelAnswer = (line: string): boolean => line.startsWith('[{') && line.includes('"ifname":"lo"');

export interface IpSessionOptions extends ExecOptions {
  /** Starts the ip process (tests: a fake). */
  readonly spawnChild?: () => SessionChild;
}

function defaultSpawn(netns: string | undefined): () => SessionChild {
  const ip = ['stdbuf', '-o0', 'ip', '-j', '-force', '-batch', '-'];
  const argv = netns !== undefined ? ['ip', 'netns', 'exec', netns, ...ip] : ip;
  return () => spawn('sh', ['-c', 'exec "$@" 2>&1', 'sh', ...argv], { stdio: ['pipe', 'pipe', 'ignore'] });
}

export function createIpSession(options: IpSessionOptions = {}): IpBatches {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const where = `${options.netns !== undefined ? `ip netns exec ${options.netns} ` : ''}ip -j -force -batch -`;
  const session = createLineSession({
    spawnChild: options.spawnChild ?? defaultSpawn(options.netns),
    where,
    isEnd: isSentinelAnswer,
    exchangeName: 'batch',
    cannotRun: (e) => `cannot run ip: ${e.message}`,
    timeoutMs,
  });
  /** Lines sent to the current process so far (ip numbers them from 1 over its life). */
  let sent = 0;

  return {
    pid: () => session.pid(),
    async run(lines: readonly string[]): Promise<BatchResult> {
      if (session.busy()) throw new DataplaneError('command-failed', 'ip session: a batch is already running');
      if (lines.some((l) => l.includes('\n'))) throw new DataplaneError('command-failed', 'ip session: a line break');
      const { lines: output, fresh } = await session.exchange(
        `${[...lines, SENTINEL].join('\n')}\n`,
        () => new DataplaneError('command-timeout', `${where} did not finish a batch within ${timeoutMs} ms`, where),
      );
      if (fresh) sent = 0;
      const base = sent;
      sent += lines.length + 1;
      const failed = new Map<number, string>();
      const out: string[] = [];
      let text: string[] = [];
      for (const l of output) {
        const m = /^Command failed -:(\d+)$/.exec(l.trim());
        if (m !== null) {
          failed.set(Number(m[1]) - base, text.join(' '));
          text = [];
        } else if (l.startsWith('[')) out.push(l);
        else if (l.trim() !== '') text.push(l.trim());
      }
      return { out: out.join('\n'), failed };
    },
    stop: () => session.stop(),
  };
}
