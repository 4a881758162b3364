// The nft backend: the kernel does the packets. start() loads our table with the small static hash maps; applyAll()
// rewrites the changed services' bucket maps and chains in ONE nft transaction however many changed (through one
// persistent `nft -i`, nft-session.ts) and keeps one policy route per engine slot, made in one `ip` batch; a slot
// released by a change is parked for its key's return (docs/dataplane/nft.md, "Parked slots"); stop() removes
// everything but the closed table (fail-closed services stay closed while wccpd is down).
// A failed nft call leaves the previous ruleset in force (transactions are atomic) and throws a DataplaneError with
// nft's stderr. Every ip object is recorded in the ownership record before it is created (ownership.ts).
// This class only orders the parts: what is in the kernel (book.ts), the apply path (commit.ts, parking.ts), the ip
// objects' and the tables' repairs (ip-repair.ts, table-repair.ts), the ways to the kernel (commands.ts).
import { monotonicNow } from '../../clock.js';
import type { Log } from '../../log.js';
import { DataplaneError } from '../errors.js';
import { ChangeQueue } from '../kernel/change-queue.js';
import { readServiceCounters } from '../kernel/counters.js';
import type { DisplacedSlot } from '../kernel/engine-slots.js';
import { CLOSED_TABLE, NFT_FAMILY, NFT_TABLE } from '../kernel/names.js';
import type { OwnershipRecord } from '../kernel/ownership.js';
import { removeAllRoutes } from '../kernel/routes.js';
import type { MissingIp } from '../kernel/routes.js';
import { removeClosedTableRuleset } from '../kernel/rules.js';
import { ServiceChanges } from '../kernel/service-changes.js';
import type {
  BackendDescriptor,
  CounterScope,
  FastPathStatus,
  RedirectCounters,
  Redirector,
  RestoredObjects,
  ServiceRedirect,
} from '../redirector.js';
import { SlotBook, slotKey } from './book.js';
import { SlotMemory } from './slot-memory.js';
import { NftCommands } from './commands.js';
import { NftCommit } from './commit.js';
import { warnConntrackUsers } from '../kernel/conntrack-users.js';
import { probeFlowtable } from './flowtable-probe.js';
import { kernelHasIpGre } from './gre-probe.js';
import { IpRepair } from './ip-repair.js';
import { DEFAULT_IP_CHECK_MS, DEFAULT_MAX_PARKED, DEFAULT_PARK_MS } from './options.js';
import type { NftRedirectorOptions, SetTimer } from './options.js';
import { Parking } from './parking.js';
import { baseRuleset, removeTableRuleset } from './ruleset.js';
import { TableRepair, type TableRestores } from './table-repair.js';

export type { NftRedirectorOptions } from './options.js';

const realTimer: SetTimer = (fn, ms) => {
  const t = setTimeout(fn, ms);
  t.unref();
  return { cancel: () => clearTimeout(t) };
};

export class NftRedirector implements Redirector {
  readonly name = 'nft';
  readonly inIpHooks = true;
  readonly record: OwnershipRecord;
  private readonly io: NftCommands;
  private readonly book: SlotBook;
  private readonly queue = new ChangeQueue();
  private readonly changes: NftCommit;
  private readonly parking: Parking;
  /** The slots in force, kept for the next run: `<stateDir>/engine-slots`. */
  private readonly slotMemory: SlotMemory;
  private readonly ip: IpRepair;
  private readonly tables: TableRepair;
  private readonly serviceChanges: ServiceChanges;
  private readonly probeGre: () => Promise<boolean>;
  /** `dataplane.conntrack: services`: the untrack chain keeps unrelated traffic out of conntrack. */
  private readonly untrack: boolean;
  private readonly log: Log | undefined;
  private started = false;
  private greAvailable = false;
  private fast: FastPathStatus | null = null;
  private readonly setTimer: SetTimer;
  private readonly now: () => number;
  /** Changes that found an engine of an IPv6 service without an IPv6 neighbour entry; the last warning's time. */
  private ipv6Missing = 0;
  private ipv6WarnedAt = -Infinity;
  private ipv6Retry: { cancel(): void } | null = null;
  /** The ip check found an engine's IPv6 route on a device it left (retryIpv6). */
  private ipv6Lost = false;

  constructor(options: NftRedirectorOptions = {}) {
    this.io = new NftCommands(options);
    this.record = this.io.record;
    this.slotMemory = SlotMemory.inStateDir(options.stateDir, options.log);
    this.probeGre = options.probeGre ?? (() => kernelHasIpGre(this.io.exec, this.record));
    const log = options.log;
    this.untrack = options.conntrack === 'services';
    this.log = log;
    const now = options.now ?? monotonicNow;
    const setTimer = options.setTimer ?? realTimer;
    const started = (): boolean => this.started;
    const serial = <T>(job: () => Promise<T>): Promise<T> => this.queue.serial(job);
    this.book = new SlotBook(options.parkMs ?? DEFAULT_PARK_MS, options.maxParked ?? DEFAULT_MAX_PARKED);
    this.parking = new Parking({ book: this.book, io: this.io, now, setTimer, serial, started, log });
    this.changes = new NftCommit({
      book: this.book,
      io: this.io,
      parking: this.parking,
      untrack: this.untrack,
      configured: options.configuredServices !== undefined ? new Set(options.configuredServices) : null,
      saveSlots: (slots) => this.slotMemory.save(slots),
      onSlotDisplaced:
        options.onSlotDisplaced ?? (log !== undefined ? (d: DisplacedSlot) => logDisplacedSlot(log, d) : undefined),
      now,
      hint: () => this.tables.guard.hint(),
      onWithoutIpv6: (engines, services) => this.withoutIpv6(engines, services),
    });
    this.setTimer = setTimer;
    this.now = now;
    this.ip = new IpRepair({
      book: this.book,
      io: this.io,
      log,
      now,
      setTimer,
      ipCheckMs: options.ipCheckMs ?? (options.exec === undefined ? DEFAULT_IP_CHECK_MS : 0),
      watchLinks: options.watchLinks ?? options.exec === undefined,
      netns: options.netns,
      serial,
      started,
      ipv6Lost: () => this.retryIpv6(0, true),
    });
    this.tables = new TableRepair({
      book: this.book,
      io: this.io,
      ip: this.ip,
      log,
      netns: options.netns,
      watch: options.watchTables ?? (options.exec === undefined && options.session === undefined),
      restoreBackoff: options.restoreBackoff,
      now,
      setTimer,
      serial,
      started,
      rebuildTable: () => {
        this.changes.rebuild = true;
      },
      commit: (next, removed, changed) => this.commit(next, removed, changed),
    });
    this.serviceChanges = new ServiceChanges({
      queue: this.queue,
      inForce: () => this.book.services,
      mustBeStarted: () => this.mustBeStarted(),
      check: (service) => {
        if (
          service.families?.includes('ipv6') === true &&
          (service.forwarding !== 'l2' || service.maskSets !== undefined)
        )
          throw new DataplaneError(
            'unsupported-service',
            `service ${service.serviceId}: IPv6 needs forwarding l2 and hash assignment (GRE forwarding is IPv4 only; ` +
              'Mask/Value Sets mask IPv4 addresses); docs/config.md, families',
          );
        if (service.forwarding === 'gre' && !this.greAvailable)
          throw new DataplaneError(
            'missing-kernel-feature',
            `service ${service.serviceId}: forwarding gre needs GRE tunnel devices, and this kernel has no ip_gre ` +
              '(built in or as a module); use `dataplane.backend: userland`, which sends GRE from userland, or ' +
              'forwarding: l2',
          );
      },
      commit: (next, removed, changed) => this.commit(next, removed, changed),
    });
  }

  start(): Promise<void> {
    return this.queue.serial(async () => {
      this.changes.rebuild = false;
      await this.record.load();
      const transactions = this.io.transactions();
      this.log?.info(
        { nftTransactions: transactions.kind },
        `nft data plane: transactions go through ${transactions.describe}`,
      );
      await this.removeEverything();
      this.book.remembered = await this.slotMemory.load();
      this.book.closedLeftover = await this.closedServicesInKernel();
      this.book.closedInTable = new Set(this.book.closedLeftover);
      if (this.untrack) await warnConntrackUsers(this.io.exec, this.log);
      await this.io.transact(baseRuleset({ untrack: this.untrack }));
      this.greAvailable = await this.probeGre();
      this.fast = await probeFlowtable(this.io.exec);
      this.started = true;
      this.ip.watch();
      this.tables.guard.start();
    });
  }

  apply(service: ServiceRedirect): Promise<void> {
    return this.applyAll([service]);
  }

  /** Every listed service in ONE transaction and ONE ip batch; the others keep their objects (docs/dataplane.md). */
  applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    return this.serviceChanges.applyAll(services);
  }

  removeService(serviceId: number): Promise<void> {
    return this.serviceChanges.removeService(serviceId);
  }

  /** Removes everything but the closed table: a fail-closed service stays closed while wccpd is down. */
  stop(): Promise<void> {
    this.ip.unwatch();
    this.ipv6Retry?.cancel();
    this.ipv6Retry = null;
    // No restore from now on: what stop() deletes is meant.
    const watchStopped = this.tables.guard.stop();
    return this.queue.serial(async () => {
      try {
        await watchStopped;
        await this.removeEverything();
      } finally {
        this.started = false;
        await this.io.stop();
      }
    });
  }

  /** Removes the closed table too (what `wccpd-cleanup --all` does): every service flows direct. */
  removeClosed(): Promise<void> {
    return this.queue.serial(async () => {
      await this.io.transact(removeClosedTableRuleset());
      this.book.closedLeftover = new Set();
      this.book.closedInTable = new Set();
    });
  }

  /**
   * The named counters and a bucket set per service, through the persistent reader. Not in the queue: a table change
   * after an engine failed must not wait behind the page's or a scrape's read; one that overlapped a change (or
   * failed: a change can interrupt a listing) is done again in the queue, so slots and sets are of one state.
   */
  counters(scope: CounterScope = {}): Promise<RedirectCounters> {
    return this.queue.read(async () => {
      this.mustBeStarted();
      const { buckets, engines, services, ipv6 } = await readServiceCounters(
        (args) => this.io.listJson(args),
        { family: NFT_FAMILY, name: NFT_TABLE },
        this.book.services.values(),
        (s, e) => this.book.slots.get(slotKey(s.serviceId, s.forwarding, e)),
        scope,
        true,
      );
      return { buckets, engines, services, ...(ipv6 !== undefined ? { ipv6 } : {}) };
    });
  }

  /** The software fast path (nftables flowtable) as start() found it; null before start(). */
  fastPath(): FastPathStatus | null {
    return this.fast;
  }

  /** The slot of each `<service> <forwarding> <engine>` now in force; for tests and the admin views. */
  slotsInUse(): ReadonlyMap<string, number> {
    return new Map(this.book.slots);
  }

  /** Resolves once every operation queued so far (a change, a parked slot's expiry) is done; for tests. */
  settled(): Promise<void> {
    return this.queue.settled();
  }

  /** Parked slots (released, objects kept, not live): slot -> its key; for tests. */
  parkedSlots(): ReadonlyMap<number, string> {
    return new Map([...this.book.parked].map(([slot, p]) => [slot, p.key]));
  }

  /** How often our tables were put back after a firewall reload, and whether the watch runs. */
  tableRestores(): TableRestores {
    return this.tables.restores();
  }

  /** The table watch's monitor process id while one runs; for tests. */
  watchPid(): number | undefined {
    return this.tables.pid();
  }

  /**
   * Puts back the slots' ip rules and routes and the guard pair where someone else removed them: a link that went
   * down takes every route through it along (the kernel announces nothing), `ip rule flush` the rules. Redirection
   * through them stops silently meanwhile (packets find no route in the slot's table and go on to the main one).
   * Throws when something could not be put back (the link is still down): the next check tries again.
   */
  checkIpObjects(): Promise<MissingIp | null> {
    return this.ip.check();
  }

  /** The `ip monitor` process's id while one runs (tests check stop() ends it). */
  ipMonitorPid(): number | undefined {
    return this.ip.monitorPid();
  }

  /** The ip objects (checkIpObjects) and nft tables (a firewall reload) put back so far, and failed checks. */
  restored(): RestoredObjects {
    const r = this.ip.counts;
    return {
      ipRules: r.rules,
      ipRoutes: r.routes,
      ipGuard: r.guard,
      enginesMoved: r.moved,
      nftTables: this.tables.guard.restores(),
      failedChecks: r.failures + this.tables.guard.failedChecks(),
      // Once a service has redirected IPv6 (an IPv4-only gateway's figures stay as they were).
      ...(this.ipv6Missing > 0 || this.book.ipv6Services.size > 0
        ? { ipv6WithoutNeighbour: this.ipv6Missing, enginesWithoutIpv6: [...this.book.withoutIpv6].sort() }
        : {}),
    };
  }

  /** Changes that found an engine of an IPv6 service without an IPv6 neighbour entry (status, /metrics). */
  ipv6WithoutNeighbour(): { readonly changes: number; readonly engines: readonly string[] } {
    return { changes: this.ipv6Missing, engines: [...this.book.withoutIpv6].sort() };
  }

  /**
   * An engine of an IPv6 service has no IPv6 neighbour entry on its segment: its buckets' IPv6 connections go direct
   * (refused when the service fails closed) until one appears. Warned at most once a minute, counted each change, and
   * looked for again in 10 s (the same services applied again) while any is missing.
   */
  private withoutIpv6(engines: readonly string[], services: readonly ServiceRedirect[]): void {
    this.ipv6Missing++;
    const now = this.now();
    if (now - this.ipv6WarnedAt >= 60_000) {
      this.ipv6WarnedAt = now;
      const closed = services.some((s) => s.failMode === 'closed');
      this.log?.warn(
        { engines, services: services.map((s) => s.serviceId), count: this.ipv6Missing },
        `nft data plane: engine${engines.length > 1 ? 's' : ''} ${engines.join(', ')} of an IPv6 service ${engines.length > 1 ? 'have' : 'has'} ` +
          "no IPv6 neighbour entry with its MAC on its segment (ip -6 neigh): its buckets' IPv6 connections go " +
          `direct${closed ? ' (refused for a service that fails closed)' : ''} until it has one; is IPv6 up on the ` +
          'engine? Looked for again every 10 s',
      );
    }
    this.retryIpv6(10_000);
  }

  /**
   * The IPv6 services applied again in `ms` (their engines' IPv6 next hops looked for again), while an engine is
   * without one; `lost`: at once, for an engine the ip check found on a device without its IPv6 neighbour
   * (IpRepair's ipv6Lost), whose IPv6 then goes direct (or is refused) rather than out of the device it left.
   */
  private retryIpv6(ms: number, lost = false): void {
    if (lost) this.ipv6Lost = true;
    if (this.ipv6Retry !== null && !lost) return;
    this.ipv6Retry?.cancel();
    this.ipv6Retry = this.setTimer(() => {
      this.ipv6Retry = null;
      void this.queue
        .serial(async () => {
          const due = this.ipv6Lost || this.book.withoutIpv6.size > 0;
          this.ipv6Lost = false;
          if (!this.started || !due) return;
          const ids = [...this.book.services.values()].filter((s) => s.families?.includes('ipv6') === true);
          await this.commit(new Map(this.book.services), [], new Set(ids.map((s) => s.serviceId)));
        })
        .catch(() => undefined);
    }, ms);
  }

  /** A change of the services in force, in the queue already (a counter read that overlaps it is done again). */
  private commit(next: Map<number, ServiceRedirect>, removed: number[], changed: ReadonlySet<number>): Promise<void> {
    return this.queue.changing(() => this.changes.commit(next, removed, changed));
  }

  /** The services whose refusal the closed table holds (from its chain names). */
  private async closedServicesInKernel(): Promise<Set<number>> {
    let text: string;
    try {
      text = await this.io.exec('nft', ['list', 'table', NFT_FAMILY, CLOSED_TABLE]);
    } catch {
      return new Set();
    }
    return new Set([...text.matchAll(/^\s*chain closed_(\d+) \{/gm)].map((m) => Number(m[1])));
  }

  private removeEverything(): Promise<void> {
    return this.queue.changing(async () => {
      await this.io.transact(removeTableRuleset());
      await removeAllRoutes(this.io.exec, this.record);
      this.book.clear();
      this.parking.cancel();
    });
  }

  private mustBeStarted(): void {
    if (!this.started) throw new DataplaneError('not-started', 'the nft data plane is not started: call start() first');
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
