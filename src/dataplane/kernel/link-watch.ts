// Tells the nft backend when links or addresses change (`ip monitor link address`), so the slots' routes that a link
// going down took with it are put back as soon as the link is up again, not at the next periodic check; and
// tells the userland backend which of its links went down (`onLine`), to reopen their pcap sessions once up. The kernel
// sends no route deletion for those routes, but it does announce the link coming back and its addresses. Events only
// trigger a check (debounced, at most one per `minGapMs`), so a host whose links churn (containers, VPNs) costs one
// check a second at most; what the monitor prints is never parsed for more than "something changed". The monitor
// (monitor.ts: lines cut at 4 KiB) is started again, with a growing delay from 1 s to 30 s, if it ends.
// With `routes`, IPv4 route changes are watched too (`ip -4 monitor link address route`): an admin's `ip route` change
// can move an engine to another interface with no link or address event (docs/dataplane/nft.md, "An engine that
// moves"); our own slots' routing tables' lines are passed over, so a change of ours never triggers a check.
import { spawn } from 'node:child_process';
import { startMonitor, type MonitorChild } from './monitor.js';
import { isOurRouteTable } from './names.js';

export interface LinkWatchOptions {
  readonly netns?: string;
  /** Called (debounced) after links or addresses changed. */
  readonly onChange: () => void;
  /** Called with every complete line at once, before the debounce (the userland backend: which links went down). */
  readonly onLine?: (line: string) => void;
  /** Watch IPv4 route changes too (default false: links and addresses of every family). */
  readonly routes?: boolean;
  /**
   * With `routes`, watch IPv4 neighbour (ARP) entries too: a neighbour line asks for a check only where this says it is
   * one that matters (the ingress backend: an engine's, whose MAC address its IPv6 chains hold).
   */
  readonly neighbours?: (line: string) => boolean;
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

function defaultSpawn(netns: string | undefined, routes: boolean, neighbours: boolean): () => MonitorChild {
  const argv = [
    'ip',
    ...(netns !== undefined ? ['-n', netns] : []),
    ...(routes ? ['-4', 'monitor', 'link', 'address', 'route'] : ['monitor', 'link', 'address']),
    ...(routes && neighbours ? ['neigh'] : []),
  ];
  return () => spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'ignore'] });
}

/** A route line of one of our slots' routing tables (names.ts): our own change, nothing to check. */
export function isOurRouteLine(line: string): boolean {
  const m = /\btable (\d+)\b/.exec(line);
  return m !== null && isOurRouteTable(Number(m[1]));
}

/** A neighbour line of `ip monitor` (`192.0.2.11 dev br0 lladdr 02:.. REACHABLE`, `Deleted 192.0.2.11 dev br0 ...`). */
export function isNeighbourLine(line: string): boolean {
  return / lladdr |\b(INCOMPLETE|REACHABLE|STALE|DELAY|PROBE|FAILED|NOARP|PERMANENT|NONE)\s*$/.test(line);
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

  // Any complete line is an event, but for our own routes' lines.
  let events = 0;
  const monitor = startMonitor({
    spawnChild: o.spawnChild ?? defaultSpawn(o.netns, o.routes === true, o.neighbours !== undefined),
    what: 'ip monitor',
    onLine: (line) => {
      if (o.neighbours !== undefined && isNeighbourLine(line)) {
        if (o.neighbours(line)) events += 1;
      } else if (!isOurRouteLine(line)) events += 1;
      o.onLine?.(line);
    },
    onLines: () => {
      if (events === 0) return;
      events = 0;
      schedule();
    },
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
