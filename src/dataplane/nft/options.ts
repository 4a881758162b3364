// The nft backend's options (the daemon passes its config's share; tests replace the kernel's parts) and their
// defaults.
import type { Log } from '../../log.js';
import type { ConntrackScope } from '../settings.js';
import type { Exec, ExecOptions } from '../kernel/exec.js';
import type { IpBatches } from '../kernel/ip-session.js';
import type { NftListings, NftTransactions } from '../kernel/nft-session.js';
import type { DisplacedSlot } from '../kernel/engine-slots.js';
import type { RestoreBackoff, TableWatch, TableWatchOptions } from '../kernel/table-watch.js';

export interface NftRedirectorOptions extends ExecOptions {
  /**
   * Replaces the real command runner (tests). Transactions then go through it too (`nft -f -`, one process each),
   * unless `session` is given.
   */
  readonly exec?: Exec;
  /** Where transactions go; default one persistent `nft -i` (nft-session.ts), unless `exec` is given. */
  readonly session?: NftTransactions;
  /** Where a change's ip batch goes; default one persistent `ip -batch` (ip-session.ts), unless `exec` is given. */
  readonly ipSession?: IpBatches;
  /** Where counter listings go; default one persistent `nft -j -i` (nft-session.ts), unless `exec` is given. */
  readonly reader?: NftListings;
  /** Replaces the ip_gre probe (tests). */
  readonly probeGre?: () => Promise<boolean>;
  /**
   * Where the ownership record lives (`<stateDir>/kernel-objects`); without it the record is kept in memory only and
   * does not survive a crash (tests).
   */
  readonly stateDir?: string;
  /**
   * The service ids of the config. A fail-closed refusal left by an earlier run stays until its service is applied;
   * one of a service no longer listed here goes at the first transaction. Without it, such refusals stay.
   */
  readonly configuredServices?: readonly number[];
  /**
   * Told of every engine slot placed away from its home (a collision, docs/ha.md): a peer gateway may have placed that
   * key elsewhere, so its connections replicated there could lose their engine.
   */
  readonly onSlotDisplaced?: (d: DisplacedSlot) => void;
  /**
   * `services`: packets no service can claim skip conntrack (docs/dataplane/nft.md, "Unrelated traffic"). Default
   * `all`.
   */
  readonly conntrack?: ConntrackScope;
  /**
   * The daemon's logger: which way transactions reach the kernel, the conntrack scope at start, and other tables it
   * would break. Default: silent.
   */
  readonly log?: Log;
  /**
   * How long a slot released by a change stays parked: its ip rule, route and nft chains kept, not live (no packet is
   * steered by it, its connections are reset as an engine's that is gone), so the key's return costs no `ip` process
   * and no record write. 0: removed at once. Default DEFAULT_PARK_MS.
   */
  readonly parkMs?: number;
  /** At most this many parked slots; beyond it the oldest go. Default DEFAULT_MAX_PARKED. */
  readonly maxParked?: number;
  /** The clock (monotonic ms) and the timer that removes expired parked slots (tests). */
  readonly now?: () => number;
  readonly setTimer?: (fn: () => void, ms: number) => { cancel(): void };
  /**
   * How often the slots' ip rules and routes are read back and put back where someone else removed them
   * (checkIpObjects). 0: never on a timer. Default DEFAULT_IP_CHECK_MS, unless `exec` is given (unit tests: 0).
   */
  readonly ipCheckMs?: number;
  /** Check them after every link or address change too (`ip monitor link address`). Default: unless `exec` is given. */
  readonly watchLinks?: boolean;
  /**
   * Watch for our tables being deleted by someone else (a firewall reload) and put them back (docs/dataplane.md, "A
   * firewall reload"): true (default unless `exec` or `session` is given) runs `nft -j monitor destroy`; a function
   * replaces it.
   */
  readonly watchTables?: boolean | ((o: TableWatchOptions) => TableWatch);
  /** How restores in a row are slowed down (tests shorten it); default DEFAULT_RESTORE_BACKOFF. */
  readonly restoreBackoff?: RestoreBackoff;
}

/** A released slot's objects stay this long (docs/dataplane/nft.md, "Parked slots"). */
export const DEFAULT_PARK_MS = 10 * 60_000;
/** Each parked slot keeps an ip rule that a redirected packet may walk past: few. */
export const DEFAULT_MAX_PARKED = 64;
/** The periodic read-back of the slots' ip objects: what a link event cannot tell (an `ip rule flush`). */
export const DEFAULT_IP_CHECK_MS = 10_000;

/** Runs `fn` once after `ms` (an unref'd timer: it never keeps a stopping daemon alive). */
export type SetTimer = (fn: () => void, ms: number) => { cancel(): void };
