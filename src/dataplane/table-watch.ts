// Tells the nft backend at once when one of its tables is deleted: an admin's `systemctl reload nftables` (or any
// `nft -f` whose file starts with `flush ruleset`, firewalld, a config-management run) deletes every table, ours
// among them, and nothing else would say so (docs/dataplane.md, "A firewall reload"). One long-lived
// `nft -j monitor tables`: the kernel sends it every nftables change, and nft itself drops all but the table events,
// so this process reads one short line per table added or deleted and nothing while nothing happens. Only deletions
// of the named tables are reported, and only as a hint: the caller checks the kernel (its own stop() and the closed
// table's deletion also show here). The monitor ending is restarted with a growing delay. Each start is reported
// shortly after it (nft subscribes a moment after it is spawned), since a deletion before that was not seen.
import { spawn } from 'node:child_process';
import { startMonitor, type MonitorChild } from './monitor.js';

export interface TableWatchOptions {
  /** Watch inside this network namespace (`ip netns exec NAME nft ...`). */
  readonly netns?: string;
  readonly family: string;
  /** The table names (of `family`) whose deletion is reported. */
  readonly tables: readonly string[];
  /** A named table was deleted (by anyone). */
  readonly onDeleted: (table: string) => void;
  /** The monitor has run for `settleMs` since it (re)started: a deletion before or meanwhile may not have been seen. */
  readonly onStarted: (restarted: boolean) => void;
  /** The monitor ended and starts again in `retryMs` (for the log). */
  readonly onEnded: (why: string, retryMs: number) => void;
  /** Starts the monitor (tests: a fake). */
  readonly spawnChild?: () => MonitorChild;
  /** First delay before a restart; doubles per restart up to maxRetryMs, back to this after a minute's run. */
  readonly retryMs?: number;
  readonly maxRetryMs?: number;
  /** How long after its start the monitor counts as listening; default 500 ms. */
  readonly settleMs?: number;
}

export interface TableWatch {
  /** Ends the monitor for good; resolves once the process is gone. */
  stop(): Promise<void>;
  /** The monitor process's id while one runs. */
  pid(): number | undefined;
}

/** A monitor that ran this long had a good run: the next restart starts from the shortest delay again. */
const GOOD_RUN_MS = 60_000;

function defaultSpawn(netns: string | undefined): () => MonitorChild {
  // Not under `setpriv --pdeathsig`: setpriv calls capset, which the unit's SystemCallFilter refuses. Should wccpd
  // die without stop(), the unit's cgroup ends the monitor; elsewhere it ends at its next event (a closed pipe).
  const argv = ['nft', '-j', 'monitor', 'tables'];
  return () =>
    netns !== undefined
      ? spawn('ip', ['netns', 'exec', netns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn(argv[0] as string, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
}

/** The deleted table's name when `line` is the deletion of one of `tables` in `family`, else null. */
export function deletedTable(line: string, family: string, tables: readonly string[]): string | null {
  if (!line.startsWith('{"delete"')) return null;
  let event: unknown;
  try {
    event = JSON.parse(line);
  } catch {
    return null;
  }
  const t = (event as { delete?: { table?: { family?: unknown; name?: unknown } } }).delete?.table;
  if (t === undefined || t.family !== family || typeof t.name !== 'string') return null;
  return tables.includes(t.name) ? t.name : null;
}

export function watchTables(o: TableWatchOptions): TableWatch {
  let settled: NodeJS.Timeout | null = null;
  let stopped = false;
  const monitor = startMonitor({
    spawnChild: o.spawnChild ?? defaultSpawn(o.netns),
    what: 'nft',
    // A table event line is ~70 bytes; a longer one (cut by the monitor) is not one.
    onLine: (line) => {
      const name = deletedTable(line, o.family, o.tables);
      if (name !== null) o.onDeleted(name);
    },
    onStart: (restarted, alive) => {
      settled = setTimeout(() => {
        settled = null;
        if (alive() && !stopped) o.onStarted(restarted);
      }, o.settleMs ?? 500);
      settled.unref();
    },
    onExit: (why, retryMs) => o.onEnded(why, retryMs),
    retryMs: o.retryMs ?? 1000,
    maxRetryMs: o.maxRetryMs ?? 60_000,
    goodRunMs: GOOD_RUN_MS,
  });

  return {
    pid: () => monitor.pid(),
    stop(): Promise<void> {
      stopped = true;
      if (settled !== null) clearTimeout(settled);
      settled = null;
      return monitor.stop();
    },
  };
}
