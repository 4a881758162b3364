// Tells the nft backend when links or addresses change (`ip monitor link address`), so the slots' routes that a link
// going down took with it are put back as soon as the link is up again, not at the next periodic check; and
// tells the userland backend which of its links went down (`onLine`), to reopen their pcap sessions once up. The kernel
// sends no route deletion for those routes, but it does announce the link coming back and its addresses. Events only
// trigger a check (debounced, at most one per `minGapMs`), so a host whose links churn (containers, VPNs) costs one
// check a second at most; what the monitor prints is never parsed for more than "something changed". The monitor
// (monitor.ts: lines cut at 4 KiB) is started again, with a growing delay from 1 s to 30 s, if it ends.
import { spawn } from 'node:child_process';
import { startMonitor, type MonitorChild } from './monitor.js';

export interface LinkWatchOptions {
  readonly netns?: string;
  /** Called (debounced) after links or addresses changed. */
  readonly onChange: () => void;
  /** Called with every complete line at once, before the debounce (the userland backend: which links went down). */
  readonly onLine?: (line: string) => void;
  /** Starts the monitor (tests: a fake). */
  readonly spawnChild?: () => MonitorChild;
  readonly debounceMs?: number;
  readonly minGapMs?: number;
  /** The monitor ended (it is started again after `restartInMs`). */
  readonly onExit?: (why: string, restartInMs: number) => void;
}

export interface LinkWatch {
  /** Ends the monitor; resolves once its process is gone. */
  stop(): Promise<void>;
  /** The monitor's process id while one runs. */
  pid(): number | undefined;
}

function defaultSpawn(netns: string | undefined): () => MonitorChild {
  const argv = ['ip', ...(netns !== undefined ? ['-n', netns] : []), 'monitor', 'link', 'address'];
  return () => spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'ignore'] });
}

export function watchLinks(o: LinkWatchOptions): LinkWatch {
  const debounceMs = o.debounceMs ?? 200;
  const minGapMs = o.minGapMs ?? 1000;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let lastCall = -Infinity;

  const schedule = (): void => {
    if (timer !== null || stopped) return;
    const wait = Math.max(debounceMs, lastCall + minGapMs - performance.now());
    timer = setTimeout(() => {
      timer = null;
      lastCall = performance.now();
      o.onChange();
    }, wait);
    timer.unref();
  };

  const monitor = startMonitor({
    spawnChild: o.spawnChild ?? defaultSpawn(o.netns),
    what: 'ip monitor',
    onLine: (line) => o.onLine?.(line),
    // Any complete line is an event.
    onLines: schedule,
    lineIsGoodRun: true,
    onExit: (why, restartInMs) => {
      o.onExit?.(why, restartInMs);
      // Whatever changed while no monitor ran is looked at once it runs again.
      schedule();
    },
  });

  return {
    pid: () => monitor.pid(),
    stop(): Promise<void> {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      return monitor.stop();
    },
  };
}
