// The nft backend: the kernel does the packets. start() loads our table with the small static hash maps (~0.1 s);
// apply() rewrites the services' bucket maps and chains in ONE `nft -f -` transaction and keeps one policy route
// per engine; stop() removes everything but the closed table (fail-closed services stay closed while wccpd is down).
// A failed nft call leaves the previous ruleset in force (transactions are atomic) and throws a DataplaneError with
// nft's stderr. Every ip object is recorded in the ownership record before it is created (ownership.ts).
import type { EngineAddress } from '../buckets/table.js';
import { DataplaneError } from './errors.js';
import { probeFlowtable } from './flowtable-probe.js';
import type { FastPathStatus } from './flowtable-probe.js';
import { kernelHasIpGre } from './gre-probe.js';
import { parseCounterSet, parseNamedCounters } from './counters.js';
import { tablesUsingConntrack } from './conntrack-users.js';
import type { Log } from '../log.js';
import type { ConntrackScope } from '../config/types.js';
import { createExec } from './nft-exec.js';
import type { Exec, ExecOptions } from './nft-exec.js';
import { createNftSession } from './nft-session.js';
import type { NftTransactions } from './nft-session.js';
import { CLOSED_TABLE, MAX_SLOT, MIN_SLOT, NFT_FAMILY, NFT_TABLE, greDevice } from './names.js';
import { OwnershipRecord } from './ownership.js';
import { BUCKET_COUNT } from '../buckets/table.js';
import type { BucketCounters, ForwardingMethod, RedirectCounters, Redirector, ServiceRedirect } from './redirector.js';
import { installGuard, installSlotRoutes, removeAllRoutes, removeGuard, removeSlotRoutes } from './routes.js';
import type { GreTunnel } from './routes.js';
import { parseSlotKey, placeSlots, slotKeyText, type DisplacedSlot, type SlotKey } from './engine-slots.js';
import {
  baseRuleset,
  bucketCounterSet,
  deniedCounter,
  engineCounter,
  maskMapIndexes,
  planService,
  removeClosedTableRuleset,
  removeTableRuleset,
  servicesRuleset,
  unassignedCounter,
} from './ruleset.js';
import type { ClosedPlan, ServicePlan } from './ruleset.js';

export interface NftRedirectorOptions extends ExecOptions {
  /**
   * Replaces the real command runner (tests). Transactions then go through it too (`nft -f -`, one process each),
   * unless `session` is given.
   */
  readonly exec?: Exec;
  /** Where transactions go; default one persistent `nft -i` (nft-session.ts), unless `exec` is given. */
  readonly session?: NftTransactions;
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
   * `services`: packets no service can claim skip conntrack (docs/dataplane.md, "Unrelated traffic"). Default `all`.
   */
  readonly conntrack?: ConntrackScope;
  /**
   * The daemon's logger: which way transactions reach the kernel, the conntrack scope at start, and other tables it
   * would break. Default: silent.
   */
  readonly log?: Log;
}

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
  private readonly exec: Exec;
  /** The persistent `nft -i`, or null: each transaction is one `nft -f -` through exec. */
  private readonly session: NftTransactions | null;
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
  /** The guard pair around the slots' ip rules is installed (routes.ts installGuard). */
  private guarded = false;
  /** Per service: the mask maps (set indexes) its last transaction left in the kernel. */
  private maskMaps = new Map<number, number[]>();
  /** Serializes operations: two transactions never interleave. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Odd while a change is being written; a counter read that saw it change is done again (see counters()). */
  private generation = 0;

  constructor(options: NftRedirectorOptions = {}) {
    this.exec = options.exec ?? createExec(options);
    this.session = options.session ?? (options.exec !== undefined ? null : createNftSession(options));
    this.record = OwnershipRecord.inStateDir(options.stateDir);
    this.probeGre = options.probeGre ?? (() => kernelHasIpGre(this.exec, this.record));
    this.configured = options.configuredServices !== undefined ? new Set(options.configuredServices) : null;
    this.onSlotDisplaced = options.onSlotDisplaced;
    this.untrack = options.conntrack === 'services';
    this.log = options.log;
  }

  start(): Promise<void> {
    return this.serial(async () => {
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
    });
  }

  apply(service: ServiceRedirect): Promise<void> {
    return this.serial(async () => {
      this.mustBeStarted();
      if (service.forwarding === 'gre' && !this.greAvailable) {
        throw new DataplaneError(
          'missing-kernel-feature',
          `service ${service.serviceId}: forwarding gre needs GRE tunnel devices, and this kernel has no ip_gre ` +
            '(built in or as a module); use `dataplane.backend: userland`, which sends GRE from userland, or ' +
            'forwarding: l2',
        );
      }
      const next = new Map(this.services);
      next.set(service.serviceId, service);
      await this.commit(next, [], service.serviceId);
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
    return this.serial(async () => {
      try {
        await this.removeEverything();
      } finally {
        this.started = false;
        await this.session?.stop();
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
   * or a scrape's read (two nft listings, up to a second on a loaded gateway). A read that overlapped a change
   * (or failed: a listing can be interrupted by one) is done again in the queue, so slots and sets are from one state.
   */
  counters(): Promise<RedirectCounters> {
    const seen = this.generation;
    const again = () => this.serial(() => this.readCounters());
    if (seen % 2 === 1) return again();
    return this.readCounters().then((c) => (this.generation === seen ? c : again()), again);
  }

  private async readCounters(): Promise<RedirectCounters> {
    this.mustBeStarted();
    const buckets = new Map<number, readonly BucketCounters[]>();
    const engines = new Map<number, ReadonlyMap<EngineAddress, BucketCounters>>();
    const services = new Map<number, { denied: BucketCounters; unassigned: BucketCounters }>();
    // All named counters in one call: nft loads as much of the table for one counter as for all of them.
    const named =
      this.services.size > 0 ? parseNamedCounters(await this.listCounters()) : new Map<string, BucketCounters>();
    const zero = { packets: 0, bytes: 0 };
    for (const s of this.services.values()) {
      const id = s.serviceId;
      const seen = parseCounterSet(await this.listSet(bucketCounterSet(id)));
      buckets.set(
        id,
        Array.from({ length: BUCKET_COUNT }, (_, b) => seen.get(b) ?? { packets: 0, bytes: 0 }),
      );
      const perEngine = new Map<EngineAddress, BucketCounters>();
      for (const e of s.engines) {
        const slot = this.slots.get(slotKey(id, s.forwarding, e));
        const c = slot !== undefined ? named.get(engineCounter(slot)) : undefined;
        if (c !== undefined) perEngine.set(e, c);
      }
      engines.set(id, perEngine);
      services.set(id, {
        denied: named.get(deniedCounter(id)) ?? zero,
        unassigned: named.get(unassignedCounter(id)) ?? zero,
      });
    }
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

  private listCounters(): Promise<string> {
    return this.exec('nft', ['-j', 'list', 'counters', 'table', NFT_FAMILY, NFT_TABLE]);
  }

  private listSet(name: string): Promise<string> {
    return this.exec('nft', ['-j', 'list', 'set', NFT_FAMILY, NFT_TABLE, name]);
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

  /** `changed`: the one service whose objects are rewritten; every other one keeps its maps, sets and chain. */
  private async commit(next: Map<number, ServiceRedirect>, removed: number[], changed?: number): Promise<void> {
    this.generation += 1;
    try {
      await this.write(next, removed, changed);
    } finally {
      this.generation += 1;
    }
  }

  private async write(next: Map<number, ServiceRedirect>, removed: number[], changed?: number): Promise<void> {
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
    const added = [...slots].filter(([key]) => !this.slots.has(key));
    for (const d of placement.displaced) this.onSlotDisplaced?.(d);
    const released = [...this.slots].filter(([key]) => !slots.has(key)).map(([, slot]) => slot);
    const { tunnels, created, gone } = this.placeTunnels(slots.keys());
    const plans = [...next.values()]
      .sort((a, b) => a.serviceId - b.serviceId)
      .map((s) => {
        const mine = new Map<EngineAddress, number>();
        for (const e of s.engines) {
          const slot = slots.get(slotKey(s.serviceId, s.forwarding, e));
          if (slot !== undefined) mine.set(e, slot);
        }
        const counted = this.countedSlots.get(s.serviceId);
        // Another service's plan cannot differ from its last transaction's: its slots are its own and kept while its
        // engines are, so its objects stay and only its hook rule is written again.
        return {
          ...planService(s, mine),
          countersExist: counted !== undefined,
          unchanged: counted !== undefined && s.serviceId !== changed,
          previousMaskMaps: this.maskMaps.get(s.serviceId) ?? [],
        };
      });
    const closed = this.closedPlan(plans, removed);

    // Routes first, so a slot is never live without its route; undo them if anything fails.
    try {
      await installSlotRoutes(
        this.exec,
        this.record,
        added.map(([key, slot]) => {
          const { forwarding, engine } = parseSlotKey(key);
          const n = tunnels.get(engine);
          return forwarding === 'gre' && n !== undefined
            ? { slot, engine, forwarding, device: greDevice(n) }
            : { slot, engine, forwarding };
        }),
        created,
      );
      // The guard pair exists while any slot does: unredirected packets then skip every slot's rule.
      if (slots.size > 0 && !this.guarded) await installGuard(this.exec, this.record);
      await this.transact(
        servicesRuleset(
          plans,
          removed,
          { added: added.map(([, slot]) => slot), released },
          closed,
          (id) => this.maskMaps.get(id) ?? [],
          { untrack: this.untrack },
        ),
      );
    } catch (e) {
      await removeSlotRoutes(
        this.exec,
        this.record,
        added.map(([, slot]) => slot),
        created.map((t) => t.device),
      ).catch(() => undefined);
      throw e;
    }
    await removeSlotRoutes(this.exec, this.record, released, gone);
    if (slots.size === 0 && this.guarded) await removeGuard(this.exec, this.record);
    this.guarded = slots.size > 0;
    this.slots = slots;
    this.tunnels = tunnels;
    this.services = next;
    this.countedSlots = new Map(plans.map((p) => [p.serviceId, [...p.engineSlots.values()]]));
    this.maskMaps = new Map(plans.map((p) => [p.serviceId, maskMapIndexes(p)]));
    this.closedLeftover = closed.leftover;
    this.closedInTable = new Set([...closed.write.map((p) => p.serviceId), ...closed.keep]);
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

  /** One atomic nft transaction. */
  private async transact(text: string): Promise<void> {
    if (this.session !== null) await this.session.run(text);
    else await this.exec('nft', ['-f', '-'], text);
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
