// The ingress backend (docs/dataplane/ingress.md, "The ingress backend"): nftables in the netdev ingress hook of the
// client interfaces hands a redirected packet to its engine by L2 (`fwd ip to <engine> device <dev>`), before routing
// and conntrack. No conntrack, no ip rule, no routing table, no mark: a flow keeps its engine through a per-service
// flow map filled from the packet path. start() loads the static part; each apply/applyAll is ONE transaction through
// the persistent nft session (atomic: a failure leaves the previous ruleset in force); stop() removes the table.
// This class only orders the parts: what is in the table (book.ts), the apply path (commit.ts), moved buckets
// (moves.ts), engines that move (engine-watch.ts), a firewall reload (table-repair.ts).
import type { Log } from '../../log.js';
import { RateLimitedLog } from '../../rate-limited-log.js';
import { DataplaneError } from '../errors.js';
import { ChangeQueue } from '../kernel/change-queue.js';
import { readServiceCounters } from '../kernel/counters.js';
import { createExec } from '../kernel/exec.js';
import type { Exec } from '../kernel/exec.js';
import { CLOSED_TABLE, INGRESS_FAMILY, INGRESS_TABLE, NFT_FAMILY } from '../kernel/names.js';
import { createNftReader, createNftSession } from '../kernel/nft-session.js';
import type { NftListings, NftTransactions } from '../kernel/nft-session.js';
import { ServiceChanges } from '../kernel/service-changes.js';
import { familiesOf } from '../redirector.js';
import type {
  BackendDescriptor,
  BackendStatus,
  BucketCounters,
  CounterScope,
  MovedBucket,
  RedirectCounters,
  Redirector,
  RestoredObjects,
  ServiceRedirect,
} from '../redirector.js';
import { IngressBook, slotKey } from './book.js';
import { IngressCommit } from './commit.js';
import { EngineWatch } from './engine-watch.js';
import { MovesTimer, movesView, oldClaims } from './moves.js';
import { flowLimits } from './options.js';
import type { IngressRedirectorOptions } from './options.js';
import { familyName, flowsFullCounter } from './names.js';
import type { FlowLimits } from './names.js';
import { ingressBaseRuleset, removeIngressTableRuleset } from './ruleset.js';
import { IngressTableRepair } from './table-repair.js';

export { nextMoves } from './moves.js';
export type { IngressRedirectorOptions } from './options.js';

/** The ingress backend's counters: the common ones, and per service the new flows its full flow map did not record. */
export interface IngressCounters extends RedirectCounters {
  readonly flowsFull: ReadonlyMap<number, BucketCounters>;
}

const TABLE = `${INGRESS_FAMILY} ${INGRESS_TABLE}`;

export class IngressRedirector implements Redirector {
  readonly name = 'ingress';
  readonly limits: FlowLimits;
  private readonly exec: Exec;
  private readonly session: NftTransactions;
  private readonly reader: NftListings;
  private readonly log: Log | undefined;
  private readonly dropClosed: boolean;
  private readonly now: () => number;
  private readonly book = new IngressBook();
  private readonly queue = new ChangeQueue();
  private readonly movesTimer: MovesTimer;
  private readonly changes: IngressCommit;
  private readonly engines: EngineWatch;
  private readonly tables: IngressTableRepair;
  private readonly serviceChanges: ServiceChanges;
  private started = false;

  constructor(options: IngressRedirectorOptions = {}) {
    this.limits = flowLimits(options);
    this.exec = options.exec ?? createExec(options);
    this.session = options.session ?? createNftSession(options);
    this.reader = options.reader ?? createNftReader(options);
    this.log = options.log;
    this.dropClosed = options.dropClosedTable === true;
    this.now = options.now ?? (() => performance.now());
    const limitedLog =
      options.log !== undefined ? new RateLimitedLog(options.log, { now: () => performance.now() }, 60_000) : null;
    const started = (): boolean => this.started;
    const serial = <T>(job: () => Promise<T>): Promise<T> => this.queue.serial(job);
    const injected = options.exec !== undefined || options.session !== undefined;
    this.movesTimer = new MovesTimer({
      moves: () => this.book.moves,
      now: this.now,
      started,
      expire: () => this.expireMoves(),
      log: limitedLog,
    });
    this.changes = new IngressCommit({
      book: this.book,
      exec: this.exec,
      session: this.session,
      limits: this.limits,
      now: this.now,
      log: this.log,
      movesTimer: this.movesTimer,
    });
    this.engines = new EngineWatch({
      book: this.book,
      exec: this.exec,
      session: this.session,
      log: this.log,
      limitedLog,
      netns: options.netns,
      watch: options.watchLinks ?? !injected,
      linkDebounceMs: options.linkDebounceMs,
      linkMinGapMs: options.linkMinGapMs,
      serial,
      started,
      refreshMacs: () => this.queue.changing(() => this.changes.refreshMacs()),
    });
    this.tables = new IngressTableRepair({
      book: this.book,
      session: this.session,
      reader: this.reader,
      log: this.log,
      netns: options.netns,
      watch: options.watchTables ?? !injected,
      restoreBackoff: options.restoreBackoff,
      serial,
      started,
      changing: (job) => this.queue.changing(job),
      reset: () => this.reset(),
      write: (next, removed, changed) => this.changes.write(next, removed, changed),
    });
    this.serviceChanges = new ServiceChanges({
      queue: this.queue,
      inForce: () => this.book.services,
      mustBeStarted: () => this.mustBeStarted(),
      check: (s) => {
        if (s.maskSets !== undefined && familiesOf(s).includes('ipv6'))
          throw new DataplaneError(
            'unsupported-service',
            `service ${s.serviceId}: families ipv6 with mask assignment: the ingress backend hashes IPv6 ` +
              'destinations only (assignment hash)',
          );
        if (s.forwarding === 'gre')
          throw new DataplaneError(
            'unsupported-service',
            `service ${s.serviceId}: forwarding gre: the ingress backend hands packets to engines by L2 only ` +
              '(the engine on a segment attached to this gateway); use forwarding: l2, or `dataplane.backend: nft`',
          );
      },
      commit: (next, removed, changed) => this.commit(next, removed, changed),
    });
  }

  /** Removes a leftover table (a crashed run's) and loads the static part. */
  start(): Promise<void> {
    return this.queue.serial(async () => {
      this.log?.info(
        { flowMax: this.limits.max, flowIdleSeconds: this.limits.idleSeconds },
        `ingress data plane: table ${TABLE} in the client interfaces' ingress hook, transactions through ` +
          this.session.describe,
      );
      await this.queue.changing(async () => {
        await this.session.run(ingressBaseRuleset());
        this.reset();
      });
      this.started = true;
      this.tables.guard.start();
      this.engines.start();
      if (this.dropClosed) await this.dropClosedTable();
    });
  }

  /** The flow map's size and idle timeout (the config's dataplane.flows). */
  status(): BackendStatus {
    return { detail: `flow map of ${this.limits.max} per service, idle ${this.limits.idleSeconds} s` };
  }

  apply(service: ServiceRedirect): Promise<void> {
    return this.applyAll([service]);
  }

  /** Every listed service in ONE transaction; the others keep their objects and flows. */
  applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    return this.serviceChanges.applyAll(services);
  }

  /** Stops redirecting a service: its objects and flows go; its traffic is routed normally. */
  removeService(serviceId: number): Promise<void> {
    return this.serviceChanges.removeService(serviceId);
  }

  /** Removes the table (every flow map with it) and ends the nft processes. */
  async stop(): Promise<void> {
    this.movesTimer.clear();
    await this.tables.guard.stop();
    await this.engines.stop();
    return this.queue.serial(async () => {
      try {
        await this.queue.changing(async () => {
          await this.session.run(removeIngressTableRuleset());
          this.reset();
        });
      } finally {
        this.started = false;
        await this.session.stop();
        await this.reader.stop();
      }
    });
  }

  /**
   * The named counters in one listing, and the bucket counter set of each service the scope asks for. Reads do not
   * wait behind changes; one that overlapped a change is done again in the queue, so slots and sets are of one state.
   */
  counters(scope: CounterScope = {}): Promise<IngressCounters> {
    return this.queue.read(async () => {
      this.mustBeStarted();
      // A service that redirects IPv6 counts it apart in the *6 objects (familyName's): the figures are both
      // families', `ipv6` their IPv6 part (RedirectCounters).
      const { named, ...common } = await readServiceCounters(
        (args) => this.reader.list(args),
        { family: INGRESS_FAMILY, name: INGRESS_TABLE },
        this.book.services.values(),
        (s, e) => this.book.slots.get(slotKey(s.serviceId, e)),
        scope,
        true,
      );
      const flowsFull = new Map<number, BucketCounters>();
      for (const id of this.book.services.keys()) {
        const four = named.get(flowsFullCounter(id)) ?? { packets: 0, bytes: 0 };
        const six = this.book.flowKinds6.has(id) ? named.get(familyName('ipv6', flowsFullCounter(id))) : undefined;
        flowsFull.set(
          id,
          six === undefined ? four : { packets: four.packets + six.packets, bytes: four.bytes + six.bytes },
        );
      }
      return { ...common, flowsFull };
    });
  }

  /** How often the table was put back after someone else deleted it (no ip objects here). */
  restored(): RestoredObjects {
    return {
      ipRules: 0,
      ipRoutes: 0,
      ipGuard: 0,
      enginesMoved: this.engines.enginesMoved,
      nftTables: this.tables.guard.restores(),
      failedChecks: this.tables.guard.failedChecks() + this.engines.failedEngineChecks,
    };
  }

  /** The link monitor's process id while one runs (tests: stop() ends it). */
  linkWatchPid(): number | undefined {
    return this.engines.pid();
  }

  /**
   * In the queue: each engine with a live slot looked up again (ONE `ip -batch` of `route get`s). An engine now on
   * another interface gets its slots' rules rewritten to hand its packets out of that one (one transaction; its flows
   * and counters stay), with a log line; one no longer on-link is reported with the error its join would get (its
   * slots stay as they were) and looked up again at every later check.
   */
  checkEngines(): Promise<void> {
    return this.engines.check();
  }

  /** The watch's monitor process id while one runs; for tests. */
  watchPid(): number | undefined {
    return this.tables.guard.pid();
  }

  /** The slot of each `<service> l2 <engine>` now in force (tests, admin views). */
  slotsInUse(): ReadonlyMap<string, number> {
    return new Map(this.book.slots);
  }

  /** In the queue: the services with a move past its end written again (the others left as they are). */
  expireMoves(): Promise<void> {
    return this.queue.serial(async () => {
      if (!this.started) return;
      const at = this.now();
      const due = [...this.book.moves].filter(([, m]) => [...m.values()].some((x) => x.until <= at)).map(([id]) => id);
      if (due.length === 0) this.movesTimer.schedule();
      else await this.commit(new Map(this.book.services), [], new Set(due));
    });
  }

  /** A recordsMovedOnly service's moved buckets now -> their claim before the move (tests; the admin: bucketMoves). */
  movedBuckets(serviceId: number): ReadonlyMap<number, number> {
    return oldClaims(this.book.moves.get(serviceId) ?? new Map());
  }

  /**
   * Per recordsMovedOnly service, the moves in force, by bucket, each claim before named by its engine. Read between
   * writes (the state follows a transaction at once), so it is the kernel's moved_<id> verdicts; a move past its end
   * stays listed until the write that makes its bucket steady succeeds.
   */
  bucketMoves(): ReadonlyMap<number, readonly MovedBucket[]> {
    return movesView(this.book.moves, this.book.targets, this.now());
  }

  /**
   * The ingress backend keeps no fail-closed refusal while wccpd is down, and the nft and userland backends' table
   * for it (`inet wccpd_closed`, which the cleanup leaves) would refuse, behind the ingress hook, every new connection
   * of a once fail-closed service that is not redirected: the bypass of a service now failing open, say. A gateway
   * moved to the ingress backend loses it at start.
   */
  private async dropClosedTable(): Promise<void> {
    const table = [NFT_FAMILY, CLOSED_TABLE];
    try {
      await this.exec('nft', ['list', 'table', ...table]);
    } catch {
      return; // not there
    }
    try {
      await this.exec('nft', ['delete', 'table', ...table]);
      this.log?.info(
        { table: table.join(' ') },
        `removed table ${table.join(' ')} left by the nft or userland data plane: with the ingress data plane a ` +
          'fail-closed service is refused only while wccpd runs (docs/operations.md)',
      );
    } catch (err) {
      this.log?.warn(
        { table: table.join(' '), err: err instanceof Error ? err.message : String(err) },
        `could not remove table ${table.join(' ')}: it refuses the new connections of its services that are not redirected`,
      );
    }
  }

  /** A change of the services in force, in the queue already (a counter read that overlaps it is done again). */
  private commit(
    next: Map<number, ServiceRedirect>,
    removedIds: readonly number[],
    changed: ReadonlySet<number>,
  ): Promise<void> {
    return this.queue.changing(() => this.changes.write(next, removedIds, changed));
  }

  private reset(): void {
    this.book.reset();
    this.movesTimer.clear();
  }

  private mustBeStarted(): void {
    if (!this.started)
      throw new DataplaneError('not-started', 'the ingress data plane is not started: call start() first');
  }
}

/** As the daemon runs it: the closed table an earlier nft or userland run left goes at start (dropClosedTable). */
export const ingressBackend: BackendDescriptor<IngressRedirectorOptions> = {
  name: 'ingress',
  create: (options) => new IngressRedirector({ dropClosedTable: true, ...options }),
};
