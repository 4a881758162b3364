// Tells the nft backend when links or addresses change (`ip monitor link address`), so the slots' routes that a link
// going down took with it are put back as soon as the link is up again, not at the next periodic check; and
// tells the userland backend which of its links went down (`onLine`), to reopen their pcap sessions once up. The kernel
// sends no route deletion for those routes, but it does announce the link coming back and its addresses. Events only
// trigger a check (debounced, at most one per `minGapMs`), so a host whose links churn (containers, VPNs) costs one
// check a second at most; what the monitor prints is never parsed for more than "something changed", and a line is
// never kept beyond `MAX_LINE` characters. The monitor is started again, with a growing delay, if it ends.
import { spawn } from 'node:child_process';
import type { SessionChild } from './line-session.js';

export interface LinkWatchOptions {
  readonly netns?: string;
  /** Called (debounced) after links or addresses changed. */
  readonly onChange: () => void;
  /** Called with every complete line at once, before the debounce (the userland backend: which links went down). */
  readonly onLine?: (line: string) => void;
  /** Starts the monitor (tests: a fake). */
  readonly spawnChild?: () => SessionChild;
  readonly debounceMs?: number;
  readonly minGapMs?: number;
  /** The monitor ended (it is started again after `restartInMs`). */
  readonly onExit?: (why: string, restartInMs: number) => void;
}

export interface LinkWatch {
  stop(): void;
  /** The monitor's process id while one runs. */
  pid(): number | undefined;
}

const MAX_LINE = 4096;
const FIRST_RESTART_MS = 1000;
const MAX_RESTART_MS = 30_000;

function defaultSpawn(netns: string | undefined): () => SessionChild {
  const argv = ['ip', ...(netns !== undefined ? ['-n', netns] : []), 'monitor', 'link', 'address'];
  return () => spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'ignore'] });
}

export function watchLinks(o: LinkWatchOptions): LinkWatch {
  const debounceMs = o.debounceMs ?? 200;
  const minGapMs = o.minGapMs ?? 1000;
  const spawnChild = o.spawnChild ?? defaultSpawn(o.netns);
  let child: SessionChild | null = null;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let restartTimer: ReturnType<typeof setTimeout> | null = null;
  let restartMs = FIRST_RESTART_MS;
  let lastCall = -Infinity;

  const schedule = (): void => {
    if (timer !== null || stopped) return;
    const wait = Math.max(debounceMs, lastCall + minGapMs - Date.now());
    timer = setTimeout(() => {
      timer = null;
      lastCall = Date.now();
      o.onChange();
    }, wait);
    timer.unref();
  };

  const start = (): void => {
    const c = spawnChild();
    child = c;
    let partial = '';
    c.stdout.setEncoding('utf8');
    c.stdout.on('data', (chunk: string) => {
      if (child !== c) return;
      // Any complete line is an event; a partial one is kept only up to MAX_LINE characters.
      const text = partial + chunk;
      const end = text.lastIndexOf('\n');
      partial = text.slice(end + 1).slice(0, MAX_LINE);
      if (end >= 0) {
        if (o.onLine !== undefined) for (const line of text.slice(0, end).split('\n')) o.onLine(line);
        restartMs = FIRST_RESTART_MS;
        schedule();
      }
    });
    const gone = (why: string): void => {
      if (child !== c) return;
      child = null;
      if (stopped) return;
      o.onExit?.(why, restartMs);
      restartTimer = setTimeout(() => {
        restartTimer = null;
        if (!stopped) start();
      }, restartMs);
      restartTimer.unref();
      restartMs = Math.min(restartMs * 2, MAX_RESTART_MS);
      // Whatever changed while no monitor ran is looked at once it runs again.
      schedule();
    };
    c.on('exit', (code, signal) => gone(signal !== null ? `signal ${signal}` : `exit ${code}`));
    c.on('error', (e) => gone(`cannot run ip monitor: ${e.message}`));
    c.stdin.on('error', () => undefined);
    c.unref?.();
    (c.stdout as NodeJS.ReadableStream & { unref?: () => void }).unref?.();
  };

  start();
  return {
    pid: () => child?.pid,
    stop(): void {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      if (restartTimer !== null) clearTimeout(restartTimer);
      const c = child;
      child = null;
      c?.kill('SIGTERM');
    },
  };
}
