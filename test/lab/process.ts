// A process started inside a namespace: its PID (the command's own, since `ip netns exec` execs), its output
// (bounded), and a way to wait for a line it prints.
import { spawn as spawnChild, type ChildProcess } from 'node:child_process';
import { LabError } from './errors.js';
import { isGone, terminate } from './proc.js';

const MAX_OUTPUT = 256 * 1024;
const MAX_LINES = 10_000;

export interface LabProcess {
  readonly pid: number;
  readonly ns: string;
  readonly command: string;
  readonly child: ChildProcess;
  /** Resolves with the exit code (or null after a signal) once the process has exited. */
  readonly exited: Promise<number | null>;
  /** The last 256 KiB of stdout and stderr, interleaved. */
  output(): string;
  /** Complete stdout lines seen so far (at most the last 10,000). */
  lines(): readonly string[];
  /** Resolves with the first stdout line (past or future) matching; rejects after timeoutMs or if the process exits. */
  waitForLine(match: (line: string) => boolean, timeoutMs: number): Promise<string>;
  running(): boolean;
  /** SIGTERM, then SIGKILL after graceMs; resolves when the process is really gone. */
  stop(graceMs?: number): Promise<void>;
}

export function spawnInNs(ns: string, cmd: string, args: readonly string[], env?: NodeJS.ProcessEnv): LabProcess {
  const child = spawnChild('ip', ['netns', 'exec', ns, cmd, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: env ?? process.env,
  });
  if (child.pid === undefined) throw new LabError(`could not start ${cmd} in ${ns}`);
  const pid = child.pid;
  const command = `${cmd} ${args.join(' ')}`;
  let output = '';
  let partial = '';
  const lineBuf: string[] = [];
  const waiters = new Set<(line: string | null) => void>();
  let hasExited = false;
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => {
      hasExited = true;
      for (const w of waiters) w(null);
      resolve(code);
    });
  });
  const append = (s: string): void => {
    output = (output + s).slice(-MAX_OUTPUT);
  };
  child.stdout?.setEncoding('utf8').on('data', (s: string) => {
    append(s);
    partial += s;
    const parts = partial.split('\n');
    partial = parts.pop() ?? '';
    for (const line of parts) {
      lineBuf.push(line);
      if (lineBuf.length > MAX_LINES) lineBuf.shift();
      for (const w of waiters) w(line);
    }
  });
  child.stderr?.setEncoding('utf8').on('data', append);
  child.on('error', (e) => append(`\n[spawn error] ${e.message}\n`));

  return {
    pid,
    ns,
    command,
    child,
    exited,
    output: () => output,
    lines: () => lineBuf,
    running: () => !hasExited && !isGone(pid),
    waitForLine(match, timeoutMs) {
      const seen = lineBuf.find(match);
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const done = (err: Error | null, line?: string): void => {
          clearTimeout(timer);
          waiters.delete(waiter);
          if (err) reject(err);
          else resolve(line ?? '');
        };
        const waiter = (line: string | null): void => {
          if (line === null)
            done(
              new LabError(
                `${command} (in ${ns}) exited before printing the expected line; output:\n${output.slice(-2000)}`,
              ),
            );
          else if (match(line)) done(null, line);
        };
        const timer = setTimeout(
          () =>
            done(
              new LabError(
                `${command} (in ${ns}) printed no expected line within ${timeoutMs} ms; output:\n${output.slice(-2000)}`,
              ),
            ),
          timeoutMs,
        );
        waiters.add(waiter);
        if (hasExited) waiter(null);
      });
    },
    async stop(graceMs = 2000) {
      const left = await terminate([pid], graceMs);
      if (left.length > 0) throw new LabError(`${command} (pid ${pid}, in ${ns}) survived SIGKILL`);
    },
  };
}
