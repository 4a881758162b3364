// One long-running monitor process (`ip monitor`, `nft monitor`) read line by line, the part the link and table
// watches share (link-watch.ts, table-watch.ts): started at once, started again with a growing delay whenever it ends
// (the delay goes back to the first after a good run), ended by its process at stop(), which waits for it to be gone.
// A line is never kept beyond `MAX_LINE` characters: a longer one is passed on cut, the rest of it dropped.
import { endChild, type ChildLike } from './child-process.js';

/** The part of a child process a monitor uses (a real one, or a fake in tests). */
export type MonitorChild = ChildLike;

export interface MonitorOptions {
  readonly spawnChild: () => MonitorChild;
  /** The command as a failure to start it names it: `cannot run <what>: ...`. */
  readonly what: string;
  /** Every complete line, in order. */
  readonly onLine: (line: string) => void;
  /** After the complete lines of one read were passed to onLine. */
  readonly onLines?: () => void;
  /** A monitor process was started (`restarted`: not the first); `alive()` says whether that one still runs. */
  readonly onStart?: (restarted: boolean, alive: () => boolean) => void;
  /** The monitor ended (its last stderr line appended to `why`); the next starts in `restartInMs`. Not after stop(). */
  readonly onExit?: (why: string, restartInMs: number) => void;
  /** The first delay before a restart; it doubles per restart up to maxRetryMs. Default 1 s and 30 s. */
  readonly retryMs?: number;
  readonly maxRetryMs?: number;
  /** The delay goes back to the first after a run this long (default: never by time)... */
  readonly goodRunMs?: number;
  /** ...or after any complete line (default false). */
  readonly lineIsGoodRun?: boolean;
}

export interface Monitor {
  /** The running monitor's process id, if one runs. */
  pid(): number | undefined;
  /** Ends the monitor for good: SIGTERM, SIGKILL after a second; resolves once the process is gone. */
  stop(): Promise<void>;
}

/** Longer lines are cut: memory stays bounded whatever a monitor prints. */
export const MAX_LINE = 4096;
const STOP_GRACE_MS = 1000;

export function startMonitor(o: MonitorOptions): Monitor {
  const minRetry = o.retryMs ?? 1000;
  const maxRetry = o.maxRetryMs ?? 30_000;
  let retry = minRetry;
  let child: MonitorChild | null = null;
  let restartTimer: NodeJS.Timeout | null = null;
  let stopped = false;

  const start = (restarted: boolean): void => {
    restartTimer = null;
    if (stopped) return;
    const c = o.spawnChild();
    child = c;
    const began = performance.now();
    let partial = '';
    let err = '';
    c.stdout?.setEncoding('utf8');
    c.stdout?.on('data', (chunk: string) => {
      if (child !== c) return;
      // `partial` is at most MAX_LINE long, so a line's first MAX_LINE characters are always its own.
      const lines = (partial + chunk).split('\n');
      partial = (lines.pop() ?? '').slice(0, MAX_LINE);
      if (lines.length === 0) return;
      if (o.lineIsGoodRun === true) retry = minRetry;
      for (const line of lines) o.onLine(line.slice(0, MAX_LINE));
      o.onLines?.();
    });
    c.stderr?.setEncoding('utf8');
    c.stderr?.on('data', (chunk: string) => {
      err = (err + chunk).slice(-300);
    });
    const gone = (why: string): void => {
      if (child !== c) return;
      child = null;
      if (stopped) return;
      if (o.goodRunMs !== undefined && performance.now() - began >= o.goodRunMs) retry = minRetry;
      const wait = retry;
      retry = Math.min(maxRetry, retry * 2);
      const said = err.trim().split('\n').pop();
      restartTimer = setTimeout(() => start(true), wait);
      restartTimer.unref();
      o.onExit?.(said !== undefined && said !== '' ? `${why}: ${said}` : why, wait);
    };
    c.on('exit', (code, signal) => gone(signal !== null ? `signal ${signal}` : `exit ${code}`));
    c.on('error', (e) => gone(`cannot run ${o.what}: ${e.message}`));
    c.stdin?.on('error', () => undefined);
    // Idle, the monitor must not keep Node running.
    c.unref?.();
    for (const s of [c.stdout, c.stderr, c.stdin]) (s as { unref?: () => void } | null | undefined)?.unref?.();
    o.onStart?.(restarted, () => child === c && !stopped);
  };

  start(false);

  return {
    pid: () => child?.pid,
    async stop(): Promise<void> {
      stopped = true;
      if (restartTimer !== null) clearTimeout(restartTimer);
      restartTimer = null;
      const c = child;
      child = null;
      if (c === null) return;
      await endChild(c, () => c.kill('SIGTERM'), STOP_GRACE_MS);
    },
  };
}
