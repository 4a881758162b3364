// Tells a backend at once when one of its tables, or part of one, is deleted: an admin's `systemctl reload nftables`
// (or any `nft -f` whose file starts with `flush ruleset`, firewalld, a config-management run) deletes every table,
// ours among them; `nft flush table` empties every chain of one; `nft delete chain` or `delete rule` take one object.
// Nothing else would say so (docs/dataplane.md, "A firewall reload"). One long-lived `nft -j monitor destroy`: the
// kernel sends it every nftables change, nft itself drops all but deletions, and of those this reads only the
// deletions of tables, chains and rules of the named tables (a set element's is passed over at its first bytes), so
// nothing is read while nothing is deleted. Only a hint: the caller checks the kernel (its own changes delete chains
// and rules too). The monitor ending is restarted with a growing delay. Each start is reported shortly after it (nft
// subscribes a moment after it is spawned), since a deletion before that was not seen.
import { spawn } from 'node:child_process';
import { startMonitor, type MonitorChild } from './monitor.js';

export interface TableWatchOptions {
  /** Watch inside this network namespace (`ip netns exec NAME nft ...`). */
  readonly netns?: string;
  readonly family: string;
  /** The table names (of `family`) whose deletion is reported. */
  readonly tables: readonly string[];
  /** A named table, one of its chains or one of their rules was deleted (by anyone: wccpd's own changes too). */
  readonly onDeleted: (deleted: DeletedObject) => void;
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

/** Restores in a row: `free` within `windowMs` at once, then each waits `firstMs`, doubling up to `maxMs`. */
export interface RestoreBackoff {
  readonly free: number;
  readonly windowMs: number;
  readonly firstMs: number;
  readonly maxMs: number;
}
export const DEFAULT_RESTORE_BACKOFF: RestoreBackoff = { free: 3, windowMs: 60_000, firstMs: 1000, maxMs: 60_000 };

/**
 * How long the next check waits, given when the recent restores (and failed checks) were: `times` keeps only those
 * within the window (so it stays bounded).
 */
export function restoreWait(times: number[], now: number, b: RestoreBackoff): number {
  const recent = times.filter((t) => now - t < b.windowMs);
  times.splice(0, times.length, ...recent);
  const over = times.length - b.free;
  return over < 0 ? 0 : Math.min(b.maxMs, b.firstMs * 2 ** Math.min(over, 30));
}

/** A monitor that ran this long had a good run: the next restart starts from the shortest delay again. */
const GOOD_RUN_MS = 60_000;

function defaultSpawn(netns: string | undefined): () => MonitorChild {
  // Not under `setpriv --pdeathsig`: setpriv calls capset, which the unit's SystemCallFilter refuses. Should wccpd
  // die without stop(), the unit's cgroup ends the monitor; elsewhere it ends at its next event (a closed pipe).
  const argv = ['nft', '-j', 'monitor', 'destroy'];
  return () =>
    netns !== undefined
      ? spawn('ip', ['netns', 'exec', netns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn(argv[0] as string, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
}

/** What a monitor line says was deleted of `tables`: the table, one of its chains, or a rule of one of its chains. */
export interface DeletedObject {
  readonly table: string;
  readonly kind: 'table' | 'chain' | 'rule';
  /** The chain deleted, or the one the rule was in. */
  readonly chain?: string;
}

// nft prints an object's family, table and name (a rule: its chain) first, in this order; the rest of a rule event
// (its expressions) may be long and cut (monitor.ts), so only this head is read.
const DELETION =
  /^\{"delete": \{"(table|chain|rule)": \{"family": "([^"\\]*)", "(?:name|table)": "([^"\\]*)"(?:, "(?:name|chain)": "([^"\\]*)")?/;

/** The deletion `line` reports of one of `tables` in `family` (or of something in it), else null. */
export function deletedObject(line: string, family: string, tables: readonly string[]): DeletedObject | null {
  // Element deletions (a map flushed: one line per element) are the most frequent: passed over at the first test.
  if (!line.startsWith('{"delete": {"t') && !line.startsWith('{"delete": {"c') && !line.startsWith('{"delete": {"r'))
    return null;
  const m = DELETION.exec(line);
  if (m === null || m[2] !== family || !tables.includes(m[3]!)) return null;
  const kind = m[1] as DeletedObject['kind'];
  if (kind === 'table') return { table: m[3]!, kind };
  return m[4] !== undefined ? { table: m[3]!, kind, chain: m[4] } : null;
}

export function watchTables(o: TableWatchOptions): TableWatch {
  let settled: NodeJS.Timeout | null = null;
  let stopped = false;
  const monitor = startMonitor({
    spawnChild: o.spawnChild ?? defaultSpawn(o.netns),
    what: 'nft',
    onLine: (line) => {
      const d = deletedObject(line, o.family, o.tables);
      if (d !== null) o.onDeleted(d);
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
