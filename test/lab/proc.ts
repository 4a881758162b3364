// Running commands with a bound, and knowing when a process is really gone.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { LabError } from './errors.js';

export interface RunResult {
  stdout: string;
  stderr: string;
  code: number;
}

export interface RunOptions {
  timeoutMs?: number;
  /** Resolve with the non-zero exit code instead of throwing. */
  allowFail?: boolean;
  input?: string;
}

/** Runs a command (no shell) with a timeout; throws LabError naming the command on failure unless allowFail. */
export function run(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  return new Promise((resolve, reject) => {
    const child = execFile(
      cmd,
      args,
      { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        if (err && !opts.allowFail) {
          const why = err.killed ? `timed out after ${timeoutMs} ms` : `exit ${String(err.code ?? err.signal)}`;
          reject(
            new LabError(`${cmd} ${args.join(' ')}: ${why}: ${stderr.trim() || err.message}`, {
              cmd: `${cmd} ${args.join(' ')}`,
              code,
              stderr,
            }),
          );
          return;
        }
        resolve({ stdout, stderr, code });
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/**
 * True when the process no longer runs: no /proc entry, or a zombie (state Z) or dead (X). On this VM PID 1 reaps
 * orphans only every ~2 s, so `kill -0` would still succeed on a zombie.
 */
export function isGone(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return true;
  }
  // "pid (comm) S ..." - comm may contain spaces or parentheses: the state follows the LAST ')'.
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state === 'Z' || state === 'X';
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls until every pid is gone or the bound passes; returns the pids still running. */
export async function waitGone(pids: readonly number[], timeoutMs: number, pollMs = 20): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let alive = pids.filter((p) => !isGone(p));
  while (alive.length > 0 && Date.now() < deadline) {
    await sleep(pollMs);
    alive = alive.filter((p) => !isGone(p));
  }
  return alive;
}

export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/** SIGTERM, wait up to graceMs, then SIGKILL and wait up to killMs. Returns pids that survived both (should be []). */
export async function terminate(pids: readonly number[], graceMs: number, killMs = 2000): Promise<number[]> {
  const alive = pids.filter((p) => !isGone(p));
  for (const p of alive) signal(p, 'SIGTERM');
  const stubborn = await waitGone(alive, graceMs);
  for (const p of stubborn) signal(p, 'SIGKILL');
  return waitGone(stubborn, killMs);
}
