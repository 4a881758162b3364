// The ingress backend's options (the daemon passes its config's share; tests replace the kernel's parts) and the
// bounds of its flow maps.
import type { Log } from '../../log.js';
import type { Exec } from '../kernel/exec.js';
import type { MonitorChild } from '../kernel/monitor.js';
import type { NftListings, NftTransactions } from '../kernel/nft-session.js';
import type { RestoreBackoff, TableWatch, TableWatchOptions } from '../kernel/table-watch.js';
import { FLOWS_IDLE_RANGE_MS, FLOWS_MAX_RANGE } from '../settings.js';
import { DEFAULT_FLOW_LIMITS } from './names.js';
import type { FlowLimits } from './names.js';

export interface IngressRedirectorOptions {
  /** Run every command inside this network namespace (tests; the daemon runs in the gateway's namespace). */
  readonly netns?: string;
  /** Per nft or ip command; default 10 s. */
  readonly timeoutMs?: number;
  readonly log?: Log;
  /** Flow map entries per service; default 262,143 (FLOWS_MAX_DEFAULT: why that number). */
  readonly flowMax?: number;
  /** Seconds an idle flow keeps its engine; default 600. */
  readonly flowIdleSeconds?: number;
  /** start() removes the nft and userland backends' closed table (`inet wccpd_closed`), as the daemon's does. */
  readonly dropClosedTable?: boolean;
  /** Replaces the command runner for `ip route get` (tests). */
  readonly exec?: Exec;
  /** Where transactions go; default one persistent `nft -i` (nft-session.ts). */
  readonly session?: NftTransactions;
  /** Where counter listings go; default one persistent `nft -j -i`. */
  readonly reader?: NftListings;
  /**
   * Put the table back when someone else deletes it (a firewall reload): true (default without an injected exec or
   * session) watches with `nft monitor`, false not at all; a function makes the watch (tests).
   */
  readonly watchTables?: boolean | ((o: TableWatchOptions) => TableWatch);
  /** How restores in a row slow down (default: 3 a minute at once, then 1 s doubling up to 60 s). */
  readonly restoreBackoff?: RestoreBackoff;
  /**
   * Look the engines up again when links, addresses or IPv4 routes change (`ip -4 monitor link address route`), so an
   * engine that moves to another interface keeps receiving its traffic: true (default without an injected exec or
   * session), false not at all; a function starts the monitor (tests).
   */
  readonly watchLinks?: boolean | (() => MonitorChild);
  /** The link watch's debounce and least gap between two checks, ms (default 200 and 1000). */
  readonly linkDebounceMs?: number;
  readonly linkMinGapMs?: number;
  /** Monotonic milliseconds (tests); default performance.now(). */
  readonly now?: () => number;
}

/** The largest flow map and idle timeout (the config's bounds; a shorter idle timeout than its least is taken). */
const FLOW_MAX_LIMIT = FLOWS_MAX_RANGE[1];
const FLOW_IDLE_LIMIT_SECONDS = FLOWS_IDLE_RANGE_MS[1] / 1000;

/** The flow maps' bounds the options ask for (defaults: the config's); a RangeError beyond FLOW_*_LIMIT. */
export function flowLimits(options: IngressRedirectorOptions): FlowLimits {
  const max = options.flowMax ?? DEFAULT_FLOW_LIMITS.max;
  const idle = options.flowIdleSeconds ?? DEFAULT_FLOW_LIMITS.idleSeconds;
  if (!Number.isInteger(max) || max < 1 || max > FLOW_MAX_LIMIT)
    throw new RangeError(`ingress flowMax ${max}: must be an integer from 1 to ${FLOW_MAX_LIMIT}`);
  if (!Number.isInteger(idle) || idle < 1 || idle > FLOW_IDLE_LIMIT_SECONDS)
    throw new RangeError(
      `ingress flowIdleSeconds ${idle}: must be an integer from 1 to ${FLOW_IDLE_LIMIT_SECONDS} seconds`,
    );
  return { max, idleSeconds: idle };
}
