// The nft backend: the kernel does the packets. start() loads our table with the small static hash maps (~0.1 s);
// applyAll() rewrites the changed services' bucket maps and chains in ONE nft transaction however many changed
// (through one persistent `nft -i`, nft-session.ts) and keeps one policy route per engine slot, made in one `ip`
// batch; a slot released by a change is parked for its key's return (docs/dataplane/nft.md, "Parked slots"); stop()
// removes everything but the closed table (fail-closed services stay closed while wccpd is down).
// A failed nft call leaves the previous ruleset in force (transactions are atomic) and throws a DataplaneError with
// nft's stderr. Every ip object is recorded in the ownership record before it is created (ownership.ts).
import type { EngineAddress } from '../../buckets/table.js';
import { monotonicNow } from '../../clock.js';
import { DataplaneError } from '../errors.js';
import { probeFlowtable } from './flowtable-probe.js';
import type { FastPathStatus } from '../redirector.js';
import { kernelHasIpGre } from './gre-probe.js';
import { readServiceCounters } from '../kernel/counters.js';
import { tablesUsingConntrack } from '../kernel/conntrack-users.js';
import type { Log } from '../../log.js';
import type { ConntrackScope } from '../settings.js';
import { createExec } from '../kernel/exec.js';
import type { Exec, ExecOptions } from '../kernel/exec.js';
import { createIpSession } from '../kernel/ip-session.js';
import type { IpBatches } from '../kernel/ip-session.js';
import { createNftReader, createNftSession } from '../kernel/nft-session.js';
import type { NftListings, NftTransactions } from '../kernel/nft-session.js';
import { CLOSED_TABLE, MAX_SLOT, MIN_SLOT, NFT_FAMILY, NFT_TABLE, greDevice } from '../kernel/names.js';
import { OwnershipRecord } from '../kernel/ownership.js';
import { byServiceId } from '../redirector.js';
import type {
  BackendDescriptor,
  CounterScope,
  ForwardingMethod,
  RedirectCounters,
  Redirector,
  ServiceRedirect,
  RestoredObjects,
} from '../redirector.js';
import {
  NO_ROUTE_CHANGE,
  changeRoutes,
  execBatch,
  missingIpObjects,
  offLinkError,
  removeAllRoutes,
  removeSlotRoutes,
} from '../kernel/routes.js';
import type { GreTunnel, MissingIp, RunBatch, SlotRoute } from '../kernel/routes.js';
import { watchLinks, type LinkWatch } from '../kernel/link-watch.js';
import { RateLimitedLog } from '../../rate-limited-log.js';
import { parseSlotKey, placeSlots, slotKeyText, type DisplacedSlot, type SlotKey } from '../kernel/engine-slots.js';
import { baseRuleset, releaseSlotLines, removeTableRuleset, servicesRuleset } from './ruleset.js';
import { maskMapIndexes, planService, removeClosedTableRuleset } from '../kernel/rules.js';
import type { ClosedPlan, ServicePlan } from '../kernel/rules.js';
import { TableGuard } from '../kernel/table-guard.js';
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

export { DEFAULT_RESTORE_BACKOFF, type RestoreBackoff } from '../kernel/table-watch.js';

/** What the table watch saw and did (status and metrics). */
export interface TableRestores {
  /** Times our tables were put back after someone else deleted them. */
  readonly restored: number;
  /** The last one: when, and what was gone. */
  readonly last: { readonly at: string; readonly tables: readonly string[] } | null;
  /** The watch's monitor process runs (false: not watching, or restarting after it ended). */
  readonly watching: boolean;
}

const PREROUTING = 'prerouting';
const OURS = `${NFT_FAMILY} ${NFT_TABLE}`;

/**
 * Follows what a transaction of ours (it succeeded: transactions are atomic) did to our table's chains: which exist,
 * and how many rules each has (-1 when a statement makes that unknown).
 */
export function trackChains(text: string, chains: Map<string, number>): void {
  for (const raw of text.split('\n')) {
    const line = raw.trimStart();
    if (line === `delete table ${OURS}`) {
      chains.clear();
      continue;
    }
    const m = /^(add|delete|flush|insert|replace) (chain|rule|table) (\S+) (\S+)(?: (\S+))?/.exec(line);
    if (m === null || `${m[3]} ${m[4]}` !== OURS) continue;
    const [, verb, object, , , name] = m;
    if (object === 'table') {
      if (verb === 'flush') for (const c of chains.keys()) chains.set(c, 0);
      if (verb === 'delete') chains.clear();
      continue;
    }
    if (name === undefined) continue;
    if (object === 'chain') {
      if (verb === 'add' && !chains.has(name)) chains.set(name, 0);
      else if (verb === 'delete') chains.delete(name);
      else if (verb === 'flush' && chains.has(name)) chains.set(name, 0);
    } else {
      const n = chains.get(name);
      if (n === undefined) continue;
      chains.set(name, verb === 'add' && n >= 0 ? n + 1 : -1);
    }
  }
}

/** A released slot's objects stay this long (docs/dataplane/nft.md, "Parked slots"). */
export const DEFAULT_PARK_MS = 10 * 60_000;
/** Each parked slot keeps an ip rule that a redirected packet may walk past: few. */
export const DEFAULT_MAX_PARKED = 64;
/** The periodic read-back of the slots' ip objects: what a link event cannot tell (an `ip rule flush`). */
export const DEFAULT_IP_CHECK_MS = 10_000;

const realTimer = (fn: () => void, ms: number): { cancel(): void } => {
  const t = setTimeout(fn, ms);
  t.unref();
  return { cancel: () => clearTimeout(t) };
};

/**
 * A slot is one (service, forwarding method, engine) with its own field value, ip rule and routing table: the value
 * names the service that claimed a connection as well as its engine, so overlapping services never count or steer
 * each other's connections (docs/dataplane.md). The value is derived from the key (engine-slots.ts), so two gateways
 * give it the same one (docs/ha.md).
 */
const slotKey = (serviceId: number, forwarding: ForwardingMethod, engine: EngineAddress): string =>
  slotKeyText({ serviceId, forwarding, engine });

export class NftRedirector implements Redirector {
  readonly name = 'nft';
  readonly inIpHooks = true;
  private readonly exec: Exec;
  /** The persistent `nft -i`, or null: each transaction is one `nft -f -` through exec. */
  private readonly session: NftTransactions | null;
  /** The persistent `ip -batch`, or null: each change's batch is one `ip` process through exec. */
  private readonly ipSession: IpBatches | null;
  /** The persistent `nft -j -i` for counter listings, or null: each listing is one `nft -j` process through exec. */
  private readonly reader: NftListings | null;
  private readonly batch: RunBatch;
  private readonly probeGre: () => Promise<boolean>;
  private started = false;
  private greAvailable = false;
  private fast: FastPathStatus | null = null;
  private services = new Map<number, ServiceRedirect>();
  private slots = new Map<string, number>();
  private readonly onSlotDisplaced: ((d: DisplacedSlot) => void) | undefined;
  /** `dataplane.conntrack: services`: the untrack chain keeps unrelated traffic out of conntrack. */
  private readonly untrack: boolean;
  private readonly log: Log | undefined;
  /** GRE engine -> the number of its tunnel device (greDevice(n)), shared by all its slots. */
  private tunnels = new Map<EngineAddress, number>();
  readonly record: OwnershipRecord;
  private readonly configured: ReadonlySet<number> | null;
  /** Fail-closed refusals of an earlier run whose service has not been applied yet in this one. */
  private closedLeftover = new Set<number>();
  /** Services that have a refusal chain in the closed table now. */
  private closedInTable = new Set<number>();
  /** Per service: its engine slots as of the last transaction (its objects and bucket counters are in the kernel). */
  private countedSlots = new Map<number, number[]>();
  /** The guard pair around the slots' ip rules is installed (routes.ts changeRoutes). */
  private guarded = false;
  /** Slots whose ip rule and route exist (recorded), with the key whose engine the route names. */
  private routed = new Map<number, string>();
  /** Slots whose own nft objects (claim and slot chains, counter) are in the table, with the key they were made for. */
  private chains = new Map<number, string>();
  /** Released slots kept for their key's return: slot -> its key, and when it goes. */
  private parked = new Map<number, { key: string; until: number }>();
  private parkTimer: { cancel(): void } | null = null;
  private readonly parkMs: number;
  private readonly maxParked: number;
  private readonly now: () => number;
  private readonly setTimer: (fn: () => void, ms: number) => { cancel(): void };
  /** Per service: the mask maps (set indexes) its last transaction left in the kernel. */
  private maskMaps = new Map<number, number[]>();
  /** The slots' ip objects put back after someone else removed them, and the checks that could not put them back. */
  private ipRestored = { rules: 0, routes: 0, guard: 0, failures: 0, moved: 0 };
  /**
   * Each L2 engine with a routed slot: the device its routes were made on (its `route get` at the change that made
   * them, or at the last check). A check that finds the engine on another device now moves them there.
   */
  private engineDevices = new Map<EngineAddress, string>();
  private readonly ipCheckMs: number;
  private ipCheckTimer: { cancel(): void } | null = null;
  private readonly watchLinks: boolean;
  private linkWatch: LinkWatch | null = null;
  private readonly netns: string | undefined;
  private readonly ipLog: RateLimitedLog | null;
  /** Serializes operations: two transactions never interleave. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Odd while a change is being written; a counter read that saw it change is done again (see counters()). */
  private generation = 0;
  /** The table watch, its checks, their backoff and counts (table-guard.ts). */
  private readonly guard: TableGuard;
  /** Our table is gone: the next transaction writes it from scratch (restore(), or any apply meanwhile). */
  private rebuild = false;
  /**
   * Our table's chains as our own transactions left them, each with its rule count (-1: not known): what a check holds
   * the kernel against (trackChains), so our own changes never count as someone else's removals.
   */
  private expected = new Map<string, number>();
  private lastRestore: TableRestores['last'] = null;

  constructor(options: NftRedirectorOptions = {}) {
    this.exec = options.exec ?? createExec(options);
    // Transaction files in the state directory when there is one: under the unit's ProtectSystem=strict it is the only
    // writable place.
    this.session =
      options.session ??
      (options.exec !== undefined
        ? null
        : createNftSession(options.stateDir !== undefined ? { ...options, parentDir: options.stateDir } : options));
    this.ipSession = options.ipSession ?? (options.exec !== undefined ? null : createIpSession(options));
    this.reader = options.reader ?? (options.exec !== undefined ? null : createNftReader(options));
    const ip = this.ipSession;
    this.batch = ip !== null ? (lines) => ip.run(lines) : execBatch(this.exec);
    this.record = OwnershipRecord.inStateDir(options.stateDir);
    this.probeGre = options.probeGre ?? (() => kernelHasIpGre(this.exec, this.record));
    this.configured = options.configuredServices !== undefined ? new Set(options.configuredServices) : null;
    const log = options.log;
    this.onSlotDisplaced =
      options.onSlotDisplaced ?? (log !== undefined ? (d: DisplacedSlot) => logDisplacedSlot(log, d) : undefined);
    this.untrack = options.conntrack === 'services';
    this.log = options.log;
    this.parkMs = options.parkMs ?? DEFAULT_PARK_MS;
    this.maxParked = options.maxParked ?? DEFAULT_MAX_PARKED;
    this.now = options.now ?? monotonicNow;
    this.setTimer = options.setTimer ?? realTimer;
    this.ipCheckMs = options.ipCheckMs ?? (options.exec === undefined ? DEFAULT_IP_CHECK_MS : 0);
    this.watchLinks = options.watchLinks ?? options.exec === undefined;
    this.netns = options.netns;
    this.ipLog = options.log !== undefined ? new RateLimitedLog(options.log, { now: this.now }, 60_000) : null;
    this.guard = new TableGuard({
      subject: 'nft data plane',
      checking: 'our tables',
      log: options.log,
      netns: options.netns,
      family: NFT_FAMILY,
      tables: [NFT_TABLE, CLOSED_TABLE],
      watch: options.watchTables ?? (options.exec === undefined && options.session === undefined),
      backoff: options.restoreBackoff,
      now: this.now,
      setTimer: this.setTimer,
      // Our changes flush and refill every other chain's rules; only the prerouting chain's are written once. A table
      // deleted, or a rule of prerouting: the check counts that chain's rules too.
      onDeleted: (d) =>
        d.kind === 'chain'
          ? 'chains'
          : d.kind === 'rule' && (d.table !== NFT_TABLE || d.chain !== PREROUTING)
            ? null
            : 'rules',
      serial: (job) => this.serial(job),
      check: (rules) => this.checkTables(rules),
    });
  }

  start(): Promise<void> {
    return this.serial(async () => {
      this.rebuild = false;
      await this.record.load();
      this.log?.info(
        { nftTransactions: this.session !== null ? 'session' : 'process' },
        `nft data plane: transactions go through ${this.session?.describe ?? 'one `nft -f -` process each'}`,
      );
      await this.removeEverything();
      this.closedLeftover = await this.closedServicesInKernel();
      this.closedInTable = new Set(this.closedLeftover);
      if (this.untrack) await this.warnConntrackUsers();
      await this.transact(baseRuleset({ untrack: this.untrack }));
      this.greAvailable = await this.probeGre();
      this.fast = await probeFlowtable(this.exec);
      this.started = true;
      this.watchIpObjects();
      this.guard.start();
    });
  }

  apply(service: ServiceRedirect): Promise<void> {
    return this.applyAll([service]);
  }

  /** Every listed service in ONE transaction and ONE ip batch; the others keep their objects (docs/dataplane.md). */
  applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    return this.serial(async () => {
      this.mustBeStarted();
      const given = byServiceId(services);
      if (given.size === 0) return;
      for (const service of given.values())
        if (service.forwarding === 'gre' && !this.greAvailable) {
          throw new DataplaneError(
            'missing-kernel-feature',
            `service ${service.serviceId}: forwarding gre needs GRE tunnel devices, and this kernel has no ip_gre ` +
              '(built in or as a module); use `dataplane.backend: userland`, which sends GRE from userland, or ' +
              'forwarding: l2',
          );
        }
      const next = new Map(this.services);
      for (const [id, service] of given) next.set(id, service);
      await this.commit(next, [], new Set(given.keys()));
    });
  }

  removeService(serviceId: number): Promise<void> {
    return this.serial(async () => {
      this.mustBeStarted();
      if (!this.services.has(serviceId)) return;
      const next = new Map(this.services);
      next.delete(serviceId);
      await this.commit(next, [serviceId]);
    });
  }

  /** Removes everything but the closed table: a fail-closed service stays closed while wccpd is down. */
  stop(): Promise<void> {
    this.unwatchIpObjects();
    // No restore from now on: what stop() deletes is meant.
    const watchStopped = this.guard.stop();
    return this.serial(async () => {
      try {
        await watchStopped;
        await this.removeEverything();
      } finally {
        this.started = false;
        await this.session?.stop();
        await this.ipSession?.stop();
        await this.reader?.stop();
      }
    });
  }

  /** Removes the closed table too (what `wccpd-cleanup --all` does): every service flows direct. */
  removeClosed(): Promise<void> {
    return this.serial(async () => {
      await this.transact(removeClosedTableRuleset());
      this.closedLeftover = new Set();
      this.closedInTable = new Set();
    });
  }

  /**
   * Counter reads do not wait in the queue: a table change after an engine failed must not wait behind the page's
   * or a scrape's read (the named counters and a bucket set per service, through the persistent reader). A read that
   * overlapped a change (or failed: a listing can be interrupted by one) is done again in the queue, so slots and sets
   * are from one state.
   */
  counters(scope: CounterScope = {}): Promise<RedirectCounters> {
    const seen = this.generation;
    const again = () => this.serial(() => this.readCounters(scope));
    if (seen % 2 === 1) return again();
    return this.readCounters(scope).then((c) => (this.generation === seen ? c : again()), again);
  }

  private async readCounters(scope: CounterScope): Promise<RedirectCounters> {
    this.mustBeStarted();
    const { buckets, engines, services } = await readServiceCounters(
      (args) => this.listJson(args),
      { family: NFT_FAMILY, name: NFT_TABLE },
      this.services.values(),
      (s, e) => this.slots.get(slotKey(s.serviceId, s.forwarding, e)),
      scope,
    );
    return { buckets, engines, services };
  }

  /** The software fast path (nftables flowtable) as start() found it; null before start(). */
  fastPath(): FastPathStatus | null {
    return this.fast;
  }

  /** The slot of each `<service> <forwarding> <engine>` now in force; for tests and the admin views. */
  slotsInUse(): ReadonlyMap<string, number> {
    return new Map(this.slots);
  }

  /** Resolves once every operation queued so far (a change, a parked slot's expiry) is done; for tests. */
  settled(): Promise<void> {
    return this.queue.then(() => undefined);
  }

  /** Parked slots (released, objects kept, not live): slot -> its key; for tests. */
  parkedSlots(): ReadonlyMap<number, string> {
    return new Map([...this.parked].map(([slot, p]) => [slot, p.key]));
  }

  private listJson(args: readonly string[]): Promise<string> {
    return this.reader !== null ? this.reader.list(args) : this.exec('nft', ['-j', ...args]);
  }

  /** The services whose refusal the closed table holds (from its chain names). */
  private async closedServicesInKernel(): Promise<Set<number>> {
    let text: string;
    try {
      text = await this.exec('nft', ['list', 'table', NFT_FAMILY, CLOSED_TABLE]);
    } catch {
      return new Set();
    }
    return new Set([...text.matchAll(/^\s*chain closed_(\d+) \{/gm)].map((m) => Number(m[1])));
  }

  /** What the closed table holds after a transaction; `leftover` is what stays of an earlier run's refusals. */
  private closedPlan(
    plans: readonly ServicePlan[],
    removed: readonly number[],
  ): ClosedPlan & { leftover: Set<number> } {
    const write = plans.filter((p) => p.failClosed);
    const leftover = new Set(
      [...this.closedLeftover].filter(
        (id) => !plans.some((p) => p.serviceId === id) && !removed.includes(id) && (this.configured?.has(id) ?? true),
      ),
    );
    const keep = [...leftover];
    const staying = new Set([...write.map((p) => p.serviceId), ...keep]);
    const drop = [...this.closedInTable].filter((id) => !staying.has(id));
    return { write, keep, drop, leftover };
  }

  /** `changed`: the services whose objects are rewritten; every other one keeps its maps, sets and chain. */
  private async commit(
    next: Map<number, ServiceRedirect>,
    removed: number[],
    changed: ReadonlySet<number> = new Set(),
  ): Promise<void> {
    this.generation += 1;
    const rebuilt = this.rebuild;
    try {
      await this.write(next, removed, changed);
      if (rebuilt) this.rebuild = false;
    } catch (e) {
      // A change naming objects that someone else deleted fails: is our table still there?
      if (!this.rebuild) this.guard.hint();
      throw e;
    } finally {
      this.generation += 1;
    }
  }

  private async write(
    next: Map<number, ServiceRedirect>,
    removed: number[],
    changed: ReadonlySet<number>,
  ): Promise<void> {
    // Slots: derived from the key (the same on every gateway), those held kept, those no service needs released.
    const wanted: SlotKey[] = [];
    for (const s of next.values())
      for (const e of s.engines) wanted.push({ serviceId: s.serviceId, forwarding: s.forwarding, engine: e });
    let placement;
    try {
      placement = placeSlots(this.slots, wanted, { min: MIN_SLOT, max: MAX_SLOT });
    } catch (e) {
      throw new DataplaneError(
        'unsupported-service',
        `more than ${MAX_SLOT - MIN_SLOT + 1} engine slots at once: ${(e as Error).message}`,
      );
    }
    const slots = placement.slots;
    for (const d of placement.displaced) this.onSlotDisplaced?.(d);
    const now = this.now();
    const live = new Set(slots.values());
    const wasLive = new Set(this.slots.values());
    // Released slots are parked; a slot placed again (for its key, or for another whose home it is) is not. Placement
    // ignores parked slots, so every key gets the slot it would get without parking (the same on every gateway).
    const parked = new Map(this.parked);
    for (const [key, slot] of this.slots) if (!slots.has(key)) parked.set(slot, { key, until: now + this.parkMs });
    for (const slot of live) parked.delete(slot);
    const evicted = this.evictable(parked, now);
    for (const slot of evicted) parked.delete(slot);
    // An evicted slot that was live until this transaction loses its route after it; a parked one at once.
    const removeNow = evicted.filter((slot) => this.routed.has(slot) && !wasLive.has(slot));
    const removeAfter = evicted.filter((slot) => this.routed.has(slot) && wasLive.has(slot));
    const { tunnels, created, gone } = this.placeTunnels([...slots.keys(), ...[...parked.values()].map((p) => p.key)]);
    const create: (SlotRoute & { serviceId: number })[] = [];
    const retarget: (SlotRoute & { serviceId: number })[] = [];
    for (const [key, slot] of slots) {
      const had = this.routed.get(slot);
      if (had === key) continue;
      (had === undefined ? create : retarget).push(this.slotRoute(key, slot, tunnels));
    }
    const routedAfter = new Set([...this.routed.keys(), ...live].filter((slot) => !evicted.includes(slot)));
    // The guard pair exists while any slot's rule does: unredirected packets then skip every slot's rule.
    const dropGuard = this.guarded && routedAfter.size === 0;
    // A slot's nft objects are made when it comes; a parked slot's are reused by its own key, and made again (its
    // counter from zero) for another key, deleted first in the same transaction.
    const renewed = [...slots].filter(([key, slot]) => (this.chains.get(slot) ?? key) !== key).map(([, s]) => s);
    const addedChains = [...live].filter((slot) => !this.chains.has(slot) || renewed.includes(slot));
    // Chains of evicted slots (and of any slot whose routes an earlier failure removed) go in this transaction.
    const deadChains = [...this.chains.keys()].filter((slot) => !live.has(slot) && !parked.has(slot));
    const plans = [...next.values()]
      .sort((a, b) => a.serviceId - b.serviceId)
      .map((s) => {
        const mine = new Map<EngineAddress, number>();
        for (const e of s.engines) {
          const slot = slots.get(slotKey(s.serviceId, s.forwarding, e));
          if (slot !== undefined) mine.set(e, slot);
        }
        const counted = this.countedSlots.get(s.serviceId);
        // A service not in `changed` cannot differ from its last transaction's plan: its slots are its own and kept
        // while its engines are, so its objects stay and only its hook rule is written again.
        return {
          ...planService(s, mine),
          countersExist: counted !== undefined,
          unchanged: counted !== undefined && !changed.has(s.serviceId),
          previousMaskMaps: this.maskMaps.get(s.serviceId) ?? [],
        };
      });
    const closed = this.closedPlan(plans, removed);

    // Routes first, in one ip process, so a slot is never live without its route; undone if anything fails.
    const made = [...create, ...retarget];
    let routesDone = false;
    try {
      const devices = await changeRoutes(
        this.exec,
        this.record,
        {
          create,
          retarget,
          tunnels: created,
          addGuard: !this.guarded && create.length > 0,
          remove: removeNow,
          removeDevices: removeAfter.length === 0 ? gone : [],
          removeGuard: removeAfter.length === 0 && dropGuard,
        },
        this.batch,
      );
      routesDone = true;
      for (const [engine, device] of devices) this.engineDevices.set(engine, device);
      if (create.length > 0) this.guarded = true;
      await this.transact(
        (this.rebuild ? baseRuleset({ untrack: this.untrack }) : '') +
          releaseSlotLines(renewed).join('\n') +
          (renewed.length > 0 ? '\n' : '') +
          servicesRuleset(
            plans,
            this.rebuild ? [] : removed,
            { added: addedChains, released: deadChains },
            closed,
            (id) => this.maskMaps.get(id) ?? [],
            { untrack: this.untrack },
          ),
      );
    } catch (e) {
      await removeSlotRoutes(
        this.exec,
        this.record,
        made.map((r) => r.slot),
        created.map((t) => t.device),
      ).catch(() => undefined);
      for (const r of made) {
        this.routed.delete(r.slot);
        this.parked.delete(r.slot);
      }
      if (routesDone) for (const slot of removeNow) this.routed.delete(slot);
      this.scheduleParkTimer();
      throw e;
    }
    if (removeAfter.length > 0)
      await changeRoutes(
        this.exec,
        this.record,
        {
          ...NO_ROUTE_CHANGE,
          remove: removeAfter,
          removeDevices: gone,
          removeGuard: dropGuard,
        },
        this.batch,
      );
    for (const slot of evicted) this.routed.delete(slot);
    for (const r of made) this.routed.set(r.slot, slotKey(r.serviceId, r.forwarding, r.engine));
    if (dropGuard) this.guarded = false;
    for (const slot of deadChains) this.chains.delete(slot);
    for (const [key, slot] of slots) this.chains.set(slot, key);
    this.parked = parked;
    this.slots = slots;
    this.tunnels = tunnels;
    this.services = next;
    this.countedSlots = new Map(plans.map((p) => [p.serviceId, [...p.engineSlots.values()]]));
    this.maskMaps = new Map(plans.map((p) => [p.serviceId, maskMapIndexes(p)]));
    this.closedLeftover = closed.leftover;
    this.closedInTable = new Set([...closed.write.map((p) => p.serviceId), ...closed.keep]);
    this.scheduleParkTimer();
  }

  private slotRoute(
    key: string,
    slot: number,
    tunnels: ReadonlyMap<EngineAddress, number>,
  ): SlotRoute & {
    serviceId: number;
  } {
    const { serviceId, forwarding, engine } = parseSlotKey(key);
    const n = tunnels.get(engine);
    return forwarding === 'gre' && n !== undefined
      ? { serviceId, slot, engine, forwarding, device: greDevice(n) }
      : { serviceId, slot, engine, forwarding };
  }

  /** Checks the slots' ip objects every ipCheckMs and after link or address changes, until stop(). */
  private watchIpObjects(): void {
    this.unwatchIpObjects();
    const check = (): void => {
      void this.checkIpObjects().catch((e: Error) => {
        this.ipRestored.failures += 1;
        if (e instanceof DataplaneError && e.reason === 'engine-not-attached')
          this.ipLog?.warn('ip', 'engine-off-link', { error: e.message }, `nft data plane: ${e.message}`);
        else
          this.ipLog?.warn(
            'ip',
            'ip-objects-not-restored',
            { error: e.message },
            `cannot put back wccpd's ip rules and routes yet: ${e.message}`,
          );
      });
    };
    if (this.ipCheckMs > 0) {
      const tick = (): void => {
        this.ipCheckTimer = this.setTimer(() => {
          check();
          tick();
        }, this.ipCheckMs);
      };
      tick();
    }
    if (this.watchLinks)
      this.linkWatch = watchLinks({
        ...(this.netns !== undefined ? { netns: this.netns } : {}),
        // An admin's `ip route` change may move an engine to another interface (our own routes' lines are ignored).
        routes: true,
        onChange: check,
        onExit: (why, ms) => this.log?.warn({ why }, `ip monitor ended (${why}); started again in ${ms} ms`),
      });
  }

  private unwatchIpObjects(): void {
    this.ipCheckTimer?.cancel();
    this.ipCheckTimer = null;
    void this.linkWatch?.stop();
    this.linkWatch = null;
  }

  /**
   * Puts back the slots' ip rules and routes and the guard pair where someone else removed them: a link that went
   * down takes every route through it along (the kernel announces nothing), `ip rule flush` the rules. Redirection
   * through them stops silently meanwhile (packets find no route in the slot's table and go on to the main one).
   * Throws when something could not be put back (the link is still down): the next check tries again.
   */
  checkIpObjects(): Promise<MissingIp | null> {
    return this.serial(() => this.repairIpObjects());
  }

  /** checkIpObjects() in the queue (also a table restore's first step). */
  private async repairIpObjects(): Promise<MissingIp | null> {
    if (!this.started || this.routed.size === 0) return null;
    const wanted = new Map([...this.routed].map(([slot, key]) => [slot, this.slotRoute(key, slot, this.tunnels)]));
    const l2 = [...new Set([...wanted.values()].filter((r) => r.forwarding === 'l2').map((r) => r.engine))];
    const missing = await missingIpObjects(this.batch, [...wanted.values()], this.guarded, l2);
    // An engine on another device than its routes (an `ip route` change, a renumbering: docs/dataplane/nft.md, "An
    // engine that moves"), or no longer on-link (its routes cannot be made again; said below, after the others are
    // repaired).
    const moved = new Map<EngineAddress, { from: string; to: string; slots: number[] }>();
    const offLink = new Map<EngineAddress, DataplaneError>();
    for (const [engine, segment] of missing.segments) {
      if ('error' in segment) {
        offLink.set(engine, segment.error);
        continue;
      }
      const slots = [...wanted.values()].filter((r) => r.forwarding === 'l2' && r.engine === engine).map((r) => r.slot);
      const on = slots.map((slot) => missing.routeDevices.get(slot)).find((d) => d !== undefined && d !== segment.dev);
      const from = on ?? this.engineDevices.get(engine);
      if (from !== undefined && from !== segment.dev) moved.set(engine, { from, to: segment.dev, slots });
    }
    const reachable = (slot: number): boolean => {
      const r = wanted.get(slot);
      return r !== undefined && !(r.forwarding === 'l2' && offLink.has(r.engine));
    };
    const rules = missing.rules.filter(reachable);
    const routesOnly = missing.routes.filter((s) => !missing.rules.includes(s) && reachable(s));
    const movedSlots = new Set([...moved.values()].flatMap((m) => m.slots));
    const removedRoutes = missing.routes.filter((s) => !movedSlots.has(s));
    if (rules.length + routesOnly.length > 0 || missing.guard) {
      if (removedRoutes.length + rules.length > 0 || missing.guard) {
        const what =
          `${removedRoutes.length} route(s) [slots ${removedRoutes.join(' ')}], ` +
          `${rules.length} rule(s) [slots ${rules.join(' ')}]${missing.guard ? ', the guard pair' : ''}`;
        this.log?.warn(
          { routes: removedRoutes, rules, guard: missing.guard },
          `wccpd's ip objects were removed by someone else (a link that went down, an ip rule flush?): ${what}; putting them back`,
        );
      }
      await changeRoutes(
        this.exec,
        this.record,
        {
          ...NO_ROUTE_CHANGE,
          create: rules.flatMap((s) => wanted.get(s) ?? []),
          retarget: routesOnly.flatMap((s) => wanted.get(s) ?? []),
          addGuard: missing.guard,
        },
        this.batch,
      );
      this.ipRestored.rules += rules.length;
      this.ipRestored.routes += removedRoutes.filter(reachable).length;
      if (missing.guard) this.ipRestored.guard += 1;
    }
    for (const [engine, m] of moved) {
      this.ipRestored.moved += 1;
      this.log?.warn(
        { engine, from: m.from, to: m.to, slots: m.slots, enginesMoved: this.ipRestored.moved },
        `engine ${engine} moved from ${m.from} to ${m.to}: its redirected traffic follows it ` +
          `(the routes of slot${m.slots.length > 1 ? 's' : ''} ${m.slots.join(' ')} now go out ${m.to})`,
      );
    }
    this.engineDevices = new Map(
      [...missing.segments].flatMap(([e, seg]) =>
        'dev' in seg
          ? [[e, seg.dev] as const]
          : this.engineDevices.has(e)
            ? [[e, this.engineDevices.get(e)!] as const]
            : [],
      ),
    );
    if (offLink.size > 0) throw offLinkError(offLink, this.engineDevices);
    return missing;
  }

  /** The `ip monitor` process's id while one runs (tests check stop() ends it). */
  ipMonitorPid(): number | undefined {
    return this.linkWatch?.pid();
  }

  /** The ip objects (checkIpObjects) and nft tables (a firewall reload) put back so far, and failed checks. */
  restored(): RestoredObjects {
    const r = this.ipRestored;
    return {
      ipRules: r.rules,
      ipRoutes: r.routes,
      ipGuard: r.guard,
      enginesMoved: r.moved,
      nftTables: this.guard.restores(),
      failedChecks: r.failures + this.guard.failedChecks(),
    };
  }

  /** The parked slots to remove now: all when parking is off, the expired, and the oldest beyond the bound. */
  private evictable(parked: ReadonlyMap<number, { until: number }>, now: number): number[] {
    if (this.parkMs <= 0) return [...parked.keys()];
    const byAge = [...parked].sort(([, a], [, b]) => a.until - b.until);
    const over = Math.max(0, byAge.length - this.maxParked);
    return byAge.filter(([, p], i) => i < over || p.until <= now).map(([slot]) => slot);
  }

  /** Wakes up when the first parked slot expires, and removes what has (through the queue). */
  private scheduleParkTimer(): void {
    this.parkTimer?.cancel();
    this.parkTimer = null;
    if (this.parked.size === 0) return;
    const first = Math.min(...[...this.parked.values()].map((p) => p.until));
    this.parkTimer = this.setTimer(
      () => {
        this.parkTimer = null;
        this.serial(() => this.expireParked()).catch((e: unknown) =>
          this.log?.warn({ err: (e as Error).message }, `nft data plane: removing expired parked slots failed`),
        );
      },
      Math.max(0, first - this.now()),
    );
  }

  /** Removes the parked slots that expired: their chains (one small transaction), then their rule and route. */
  private async expireParked(): Promise<void> {
    if (!this.started) return;
    const evicted = this.evictable(this.parked, this.now());
    if (evicted.length === 0) {
      this.scheduleParkTimer();
      return;
    }
    const parked = new Map(this.parked);
    for (const slot of evicted) parked.delete(slot);
    const { tunnels, gone } = this.placeTunnels([...this.slots.keys(), ...[...parked.values()].map((p) => p.key)]);
    const chains = evicted.filter((slot) => this.chains.has(slot));
    try {
      if (chains.length > 0) {
        await this.transact(`${releaseSlotLines(chains).join('\n')}\n`);
        for (const slot of chains) this.chains.delete(slot);
      }
      const routedAfter = [...this.routed.keys()].filter((slot) => !evicted.includes(slot));
      const dropGuard = this.guarded && routedAfter.length === 0;
      await changeRoutes(
        this.exec,
        this.record,
        {
          ...NO_ROUTE_CHANGE,
          remove: evicted.filter((slot) => this.routed.has(slot)),
          removeDevices: gone,
          removeGuard: dropGuard,
        },
        this.batch,
      );
      for (const slot of evicted) this.routed.delete(slot);
      if (dropGuard) this.guarded = false;
      this.tunnels = tunnels;
      this.parked = parked;
    } catch (e) {
      // Tried again later, not at once (the timer would fire straight away).
      for (const slot of evicted) {
        const p = this.parked.get(slot);
        if (p !== undefined) this.parked.set(slot, { key: p.key, until: this.now() + Math.max(this.parkMs, 1000) });
      }
      throw e;
    } finally {
      this.scheduleParkTimer();
    }
  }

  /**
   * One tunnel device per GRE engine, whatever the number of its slots (one per service): kept while any of its slots
   * is, numbered from 1 up (the lowest free number). Returns the devices now, those to create and those to delete.
   */
  private placeTunnels(keys: Iterable<string>): {
    tunnels: Map<EngineAddress, number>;
    created: GreTunnel[];
    gone: string[];
  } {
    const engines = new Set<EngineAddress>();
    for (const key of keys) {
      const k = parseSlotKey(key);
      if (k.forwarding === 'gre') engines.add(k.engine);
    }
    const tunnels = new Map<EngineAddress, number>();
    for (const [e, n] of this.tunnels) if (engines.has(e)) tunnels.set(e, n);
    // A device going in this change is deleted after the new ones are created: its number is not reused yet.
    const used = new Set(this.tunnels.values());
    const created: GreTunnel[] = [];
    let n = 1;
    for (const e of [...engines].sort()) {
      if (tunnels.has(e)) continue;
      while (used.has(n)) n++;
      used.add(n);
      tunnels.set(e, n);
      created.push({ device: greDevice(n), engine: e });
    }
    const gone = [...this.tunnels].filter(([e]) => !tunnels.has(e)).map(([, k]) => greDevice(k));
    return { tunnels, created, gone };
  }

  private async removeEverything(): Promise<void> {
    this.generation += 1;
    try {
      await this.transact(removeTableRuleset());
      await removeAllRoutes(this.exec, this.record);
      this.guarded = false;
      this.services = new Map();
      this.slots = new Map();
      this.routed = new Map();
      this.chains = new Map();
      this.parked = new Map();
      this.parkTimer?.cancel();
      this.parkTimer = null;
      this.tunnels = new Map();
      this.countedSlots = new Map();
      this.maskMaps = new Map();
    } finally {
      this.generation += 1;
    }
  }

  /** Says, once at start, that unrelated traffic skips conntrack, and which other tables that would break. */
  private async warnConntrackUsers(): Promise<void> {
    let users: string[] = [];
    try {
      users = tablesUsingConntrack(await this.exec('nft', ['-t', 'list', 'ruleset']));
    } catch (e) {
      this.log?.warn(
        { err: (e as Error).message },
        'dataplane.conntrack services: cannot list the ruleset to check it',
      );
    }
    this.log?.info(
      { conntrack: 'services' },
      "dataplane.conntrack services: packets no service can claim skip conntrack (not the gateway's own)",
    );
    if (users.length > 0)
      this.log?.warn(
        { tables: users },
        `dataplane.conntrack services: table${users.length > 1 ? 's' : ''} ${users.join(', ')} use${users.length > 1 ? '' : 's'} ` +
          'conntrack (NAT or state matches); their forwarded packets that no service can claim are now untracked, so ' +
          'those rules no longer see them: use `dataplane.conntrack: all` on this gateway (docs/dataplane.md)',
      );
  }

  // ---- a firewall reload: our table deleted by someone else (docs/dataplane.md, "A firewall reload") ------------

  /** How often our tables were put back, and whether the watch runs. */
  tableRestores(): TableRestores {
    return { restored: this.guard.restores(), last: this.lastRestore, watching: this.guard.pid() !== undefined };
  }

  /** The watch's monitor process id while one runs; for tests. */
  watchPid(): number | undefined {
    return this.guard.pid();
  }

  /**
   * In the queue: which of our tables are gone, or which chain of ours, or a rule of the prerouting chain (after such
   * a hint: that listing costs nft a fetch of the whole table, ~80 ms of CPU here); if any, restore().
   */
  private async checkTables(rules: boolean): Promise<void> {
    if (!this.started) return;
    // Chain names alone (a table of ours has chains while it exists): ~2 ms of nft's CPU, `list tables` ~80.
    const chains = await this.chainsInKernel();
    const mine = chains.get(NFT_TABLE);
    const main = mine === undefined;
    const closed = this.closedInTable.size > 0 && !chains.has(CLOSED_TABLE);
    let damage: string | null = null;
    if (mine !== undefined) {
      const lost = [...this.expected.keys()].filter((c) => !mine.has(c));
      if (lost.length > 0) damage = `lost its chain${lost.length > 1 ? 's' : ''} ${lost.join(', ')}`;
      else if (rules) {
        const want = this.expected.get(PREROUTING) ?? -1;
        const have = await this.rulesInKernel(PREROUTING);
        if (have < want) damage = `emptied (its prerouting chain has ${have} of its ${want} rules)`;
      }
    }
    if (!main && !closed && damage === null) return;
    await this.restore(main || damage !== null, closed, damage);
  }

  /** Per table of our family, its chains' names (`list chains`: no rules, no sets). */
  private async chainsInKernel(): Promise<Map<string, Set<string>>> {
    const out = JSON.parse(await this.listJson(['list', 'chains', NFT_FAMILY])) as {
      nftables?: { chain?: { family?: string; table?: string; name?: string } }[];
    };
    const tables = new Map<string, Set<string>>();
    for (const o of out.nftables ?? []) {
      const c = o.chain;
      if (c?.family !== NFT_FAMILY || c.table === undefined || c.name === undefined) continue;
      const names = tables.get(c.table) ?? new Set<string>();
      names.add(c.name);
      tables.set(c.table, names);
    }
    return tables;
  }

  /** How many rules one chain of our table has now. */
  private async rulesInKernel(chain: string): Promise<number> {
    const out = JSON.parse(await this.listJson(['list', 'chain', NFT_FAMILY, NFT_TABLE, chain])) as {
      nftables?: { rule?: unknown }[];
    };
    return (out.nftables ?? []).filter((o) => o.rule !== undefined).length;
  }

  /**
   * Puts back what someone else deleted, in ONE transaction with the current state of every applied service: our
   * table from scratch when it went (every slot's chains and counters went with it), the closed table's refusals when
   * that went. Slots' ip rules and routes normally survive an nft reload; any that did not are put back first
   * (repairIpObjects); one that cannot be yet (a link still down) does not hold up the table: the periodic ip check
   * tries it again.
   */
  private async restore(main: boolean, closed: boolean, damage: string | null = null): Promise<void> {
    const gone = [...(main ? [NFT_TABLE] : []), ...(closed ? [CLOSED_TABLE] : [])].map((t) => `${NFT_FAMILY} ${t}`);
    if (main) {
      this.rebuild = true;
      this.chains = new Map();
      this.countedSlots = new Map();
      this.maskMaps = new Map();
    }
    if (closed) {
      if (this.closedLeftover.size > 0)
        this.log?.warn(
          { services: [...this.closedLeftover] },
          `nft data plane: the earlier run's fail-closed refusals of service ${[...this.closedLeftover].join(', ')} ` +
            'went with the closed table; they come back when the service is applied',
        );
      this.closedLeftover = new Set();
      this.closedInTable = new Set();
    }
    // The slots' ip rules and routes normally outlive an nft reload; any that went are put back first.
    let ipRedone: boolean | string = false;
    try {
      const missing = await this.repairIpObjects();
      ipRedone = missing !== null && (missing.rules.length > 0 || missing.routes.length > 0 || missing.guard);
    } catch (e) {
      this.ipRestored.failures += 1;
      ipRedone = `not yet: ${(e as Error).message}`;
    }
    await this.commit(new Map(this.services), []);
    const restored = this.guard.restored();
    this.lastRestore = { at: new Date().toISOString(), tables: gone };
    const applied = [...this.services.values()]
      .sort((a, b) => a.serviceId - b.serviceId)
      .map((s) => `service ${s.serviceId} change ${s.table.changeNumber}`);
    const what =
      damage !== null
        ? `nftables table ${NFT_FAMILY} ${NFT_TABLE} ${damage} by someone else (nft flush table, delete chain or ` +
          `delete rule?)${closed ? ` and table ${NFT_FAMILY} ${CLOSED_TABLE} was deleted` : ''}`
        : `nftables table${gone.length > 1 ? 's' : ''} ${gone.join(' and ')} ${gone.length > 1 ? 'were' : 'was'} deleted ` +
          `by someone else (a firewall reload's flush ruleset?)`;
    this.log?.warn(
      {
        deleted: gone,
        ...(damage !== null ? { damage } : {}),
        restored,
        services: Object.fromEntries([...this.services.values()].map((s) => [s.serviceId, s.table.changeNumber])),
        ipRedone,
      },
      `${what}; restored with ` +
        `${applied.length > 0 ? applied.join(', ') : 'no service applied yet'}` +
        (main ? '; per-bucket and per-engine counters start again from zero' : '') +
        (ipRedone === true ? '; ip rules or routes of ours were gone too, and were made again' : '') +
        (typeof ipRedone === 'string'
          ? `; ip rules or routes of ours are gone too and cannot be put back yet (${ipRedone})`
          : ''),
    );
  }

  /** One atomic nft transaction. */
  private async transact(text: string): Promise<void> {
    if (this.session !== null) await this.session.run(text);
    else await this.exec('nft', ['-f', '-'], text);
    trackChains(text, this.expected);
  }

  private mustBeStarted(): void {
    if (!this.started) throw new DataplaneError('not-started', 'the nft data plane is not started: call start() first');
  }

  private serial<T>(job: () => Promise<T>): Promise<T> {
    const run = this.queue.then(job, job);
    this.queue = run.catch(() => undefined);
    return run;
  }
}

/** A slot that is not its engine's home one (docs/ha.md: a peer gateway may have placed that engine elsewhere). */
function logDisplacedSlot(log: Log, d: DisplacedSlot): void {
  log.warn(
    { service: d.key.serviceId, engine: d.key.engine, forwarding: d.key.forwarding, home: d.home, slot: d.slot },
    `engine slot collision: service ${d.key.serviceId} ${d.key.forwarding} engine ${d.key.engine} got slot ${d.slot}, not its home ${d.home}; a peer ` +
      'gateway may have placed it elsewhere, and its connections replicated there would then lose their engine (docs/ha.md)',
  );
}

export const nftBackend: BackendDescriptor<NftRedirectorOptions> = {
  name: 'nft',
  create: (options) => new NftRedirector(options),
};
