// The ingress backend (docs/dataplane/ingress.md, "The ingress backend"): nftables in the netdev ingress hook of the
// client interfaces hands a redirected packet to its engine by L2 (`fwd ip to <engine> device <dev>`), before routing
// and conntrack. No conntrack, no ip rule, no routing table, no mark: a flow keeps its engine through a per-service
// flow map filled from the packet path. start() loads the static part; each apply/applyAll is ONE transaction through
// the persistent nft session (atomic: a failure leaves the previous ruleset in force); stop() removes the table.
import type { EngineAddress } from '../../buckets/table.js';
import type { Log } from '../../log.js';
import { readServiceCounters } from '../kernel/counters.js';
import { placeSlots, slotKeyText } from '../kernel/engine-slots.js';
import { DataplaneError } from '../errors.js';
import {
  CLAIM_GONE,
  CLAIM_REFUSED,
  CLAIM_UNASSIGNED,
  DEFAULT_FLOW_LIMITS,
  DIRECT_CHAIN,
  GONE_CHAIN,
  flowKeyKind,
  flowsFullCounter,
  hookChain,
  hookDevices,
  ingressBaseRuleset,
  ingressServicesWrite,
  recordsMovedOnly,
  refusedChain,
  removeIngressTableRuleset,
  slotRule,
  tcpChains,
  unassignedChain,
} from './ruleset.js';
import type {
  FlowKeyKind,
  FlowLimits,
  IngressRemoved,
  IngressService,
  IngressSlot,
  IngressWritten,
} from './ruleset.js';
import { CLOSED_TABLE, INGRESS_FAMILY, INGRESS_TABLE, MAX_SLOT, MIN_SLOT, NFT_FAMILY } from '../kernel/names.js';
import { createExec } from '../kernel/exec.js';
import type { Exec } from '../kernel/exec.js';
import { createNftReader, createNftSession } from '../kernel/nft-session.js';
import type { NftListings, NftTransactions } from '../kernel/nft-session.js';
import { byServiceId } from '../redirector.js';
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
import { watchLinks, type LinkWatch } from '../kernel/link-watch.js';
import type { MonitorChild } from '../kernel/monitor.js';
import { engineSegments, execBatch, findEngineSegment, offLinkError } from '../kernel/routes.js';
import { RateLimitedLog } from '../../rate-limited-log.js';
import {
  claimChain,
  classifyChain,
  hashChain,
  maskMapIndexes,
  planService,
  serviceChain,
  slotChain,
} from '../kernel/rules.js';
import { TableGuard } from '../kernel/table-guard.js';
import type { RestoreBackoff, TableWatch, TableWatchOptions } from '../kernel/table-watch.js';

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

/** A bucket that moved: its claim before the move (a slot, or CLAIM_*), kept until `until` (flows.idle after). */
interface BucketMove {
  readonly old: number;
  readonly until: number;
}

/**
 * The moved buckets of a recordsMovedOnly service after a change of its claims (docs/dataplane/ingress.md, "Recorded
 * only where a bucket moved"): a bucket whose claim changed keeps the claim it had before its first move for flows.idle
 * after its last one (connections older than the move are its); one that moves back to that claim is steady again
 * (every younger connection was recorded); an expired move is dropped; a claim whose slot was released is CLAIM_GONE.
 */
export function nextMoves(
  before: readonly number[] | undefined,
  now: readonly number[],
  moves: ReadonlyMap<number, BucketMove>,
  released: ReadonlySet<number>,
  at: number,
  idleMs: number,
): Map<number, BucketMove> {
  const out = new Map<number, BucketMove>();
  for (const [b, claim] of now.entries()) {
    let m = moves.get(b);
    if (m !== undefined && m.until <= at) m = undefined;
    const prev = before?.[b];
    if (prev !== undefined && prev !== claim) {
      const old = m?.old ?? prev;
      m = old !== claim ? { old, until: at + idleMs } : undefined;
    }
    if (m === undefined) continue;
    out.set(b, released.has(m.old) ? { old: CLAIM_GONE, until: m.until } : m);
  }
  return out;
}

/** Each moved bucket's claim before the move (what the ruleset's oldclaim_<id> map is written from). */
const oldClaims = (moves: ReadonlyMap<number, BucketMove>): Map<number, number> =>
  new Map([...moves].map(([b, m]) => [b, m.old]));

/** A plan's claim of each bucket: its slot, or CLAIM_UNASSIGNED / CLAIM_REFUSED. */
const claimsOf = (p: { readonly bucketSlots: readonly number[]; readonly refuse: boolean }): number[] =>
  p.bucketSlots.map((slot) => (slot !== 0 ? slot : p.refuse ? CLAIM_REFUSED : CLAIM_UNASSIGNED));

/** The bounds of `dataplane.flows` (the config checks them too). */
export const FLOW_MAX_LIMIT = 16_777_216;
export const FLOW_IDLE_LIMIT_SECONDS = 86_400;

/** The ingress backend's counters: the common ones, and per service the new flows its full flow map did not record. */
export interface IngressCounters extends RedirectCounters {
  readonly flowsFull: ReadonlyMap<number, BucketCounters>;
}

const TABLE = `${INGRESS_FAMILY} ${INGRESS_TABLE}`;
const slotKey = (serviceId: number, engine: EngineAddress): string =>
  slotKeyText({ serviceId, engine, forwarding: 'l2' });

export class IngressRedirector implements Redirector {
  readonly name = 'ingress';
  private readonly exec: Exec;
  private readonly session: NftTransactions;
  private readonly reader: NftListings;
  private readonly log: Log | undefined;
  private readonly netns: string | undefined;
  private readonly dropClosed: boolean;
  readonly limits: FlowLimits;
  private started = false;
  private queue: Promise<unknown> = Promise.resolve();
  /** Odd while a change is being written; a counter read that saw it change is done again. */
  private generation = 0;
  private services = new Map<number, ServiceRedirect>();
  /** slotKeyText -> slot, as in force. */
  private slots = new Map<string, number>();
  /** Each live slot's engine and interface. */
  private targets = new Map<number, IngressSlot>();
  /** Slots whose @slots entry is `goto gone`: their flows are reset until the number is placed again. */
  private gone = new Set<number>();
  /** Per service in the kernel: its flow key and mask maps. */
  private flowKinds = new Map<number, FlowKeyKind>();
  private maskMaps = new Map<number, number[]>();
  /** The base chain in force (its number and devices), null: none. */
  private hook: { chain: number; devices: string } | null = null;
  private hookSerial = 0;
  /** The table watch, its checks, their backoff and counts (table-guard.ts). */
  private readonly guard: TableGuard;
  /** Links, addresses and routes: an engine that moved to another interface (checkEngines). */
  private readonly watchOption: boolean | (() => MonitorChild);
  private readonly linkDebounceMs: number | undefined;
  private readonly linkMinGapMs: number | undefined;
  private linkWatch: LinkWatch | null = null;
  /** Engines moved to another interface, and checks that failed, since start. */
  private enginesMoved = 0;
  private failedEngineChecks = 0;
  private readonly limitedLog: RateLimitedLog | null;
  private readonly now: () => number;
  /** The claims in force, per bucket; the buckets that moved (nextMoves), of the recordsMovedOnly services alone. */
  private claims = new Map<number, number[]>();
  private moves = new Map<number, Map<number, BucketMove>>();
  /** What the last transaction wrote of each service: the next one writes only what differs. */
  private written = new Map<number, IngressWritten>();
  /** Writes the services whose moves expire next (expireMoves). */
  private movesTimer: NodeJS.Timeout | null = null;

  constructor(options: IngressRedirectorOptions = {}) {
    const max = options.flowMax ?? DEFAULT_FLOW_LIMITS.max;
    const idle = options.flowIdleSeconds ?? DEFAULT_FLOW_LIMITS.idleSeconds;
    if (!Number.isInteger(max) || max < 1 || max > FLOW_MAX_LIMIT)
      throw new RangeError(`ingress flowMax ${max}: must be an integer from 1 to ${FLOW_MAX_LIMIT}`);
    if (!Number.isInteger(idle) || idle < 1 || idle > FLOW_IDLE_LIMIT_SECONDS)
      throw new RangeError(
        `ingress flowIdleSeconds ${idle}: must be an integer from 1 to ${FLOW_IDLE_LIMIT_SECONDS} seconds`,
      );
    this.limits = { max, idleSeconds: idle };
    this.exec = options.exec ?? createExec(options);
    this.session = options.session ?? createNftSession(options);
    this.reader = options.reader ?? createNftReader(options);
    this.log = options.log;
    this.netns = options.netns;
    this.dropClosed = options.dropClosedTable === true;
    this.watchOption = options.watchLinks ?? (options.exec === undefined && options.session === undefined);
    this.linkDebounceMs = options.linkDebounceMs;
    this.linkMinGapMs = options.linkMinGapMs;
    this.now = options.now ?? (() => performance.now());
    this.limitedLog =
      options.log !== undefined ? new RateLimitedLog(options.log, { now: () => performance.now() }, 60_000) : null;
    this.guard = new TableGuard({
      subject: 'ingress data plane',
      checking: 'our table',
      log: options.log,
      netns: options.netns,
      family: INGRESS_FAMILY,
      tables: [INGRESS_TABLE],
      watch: options.watchTables ?? (options.exec === undefined && options.session === undefined),
      backoff: options.restoreBackoff,
      // Our own changes delete chains and flush the base chain too: the check then finds nothing missing.
      onDeleted: (d) =>
        d.kind !== 'rule' ? 'chains' : this.hook !== null && d.chain === hookChain(this.hook.chain) ? 'rules' : null,
      serial: (job) => this.serial(job),
      check: (rules) => this.checkTable(rules),
    });
  }

  /** Removes a leftover table (a crashed run's) and loads the static part. */
  start(): Promise<void> {
    return this.serial(async () => {
      this.log?.info(
        { flowMax: this.limits.max, flowIdleSeconds: this.limits.idleSeconds },
        `ingress data plane: table ${TABLE} in the client interfaces' ingress hook, transactions through ` +
          this.session.describe,
      );
      this.generation += 1;
      try {
        await this.session.run(ingressBaseRuleset());
        this.reset();
      } finally {
        this.generation += 1;
      }
      this.started = true;
      this.guard.start();
      this.watchEngines();
      if (this.dropClosed) await this.dropClosedTable();
    });
  }

  /** The flow map's size and idle timeout (the config's dataplane.flows). */
  status(): BackendStatus {
    return { detail: `flow map of ${this.limits.max} per service, idle ${this.limits.idleSeconds} s` };
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

  apply(service: ServiceRedirect): Promise<void> {
    return this.applyAll([service]);
  }

  /** Every listed service in ONE transaction; the others keep their objects and flows. */
  applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    return this.serial(async () => {
      this.mustBeStarted();
      const given = byServiceId(services);
      if (given.size === 0) return;
      for (const s of given.values()) {
        if (s.forwarding === 'gre')
          throw new DataplaneError(
            'unsupported-service',
            `service ${s.serviceId}: forwarding gre: the ingress backend hands packets to engines by L2 only ` +
              '(the engine on a segment attached to this gateway); use forwarding: l2, or `dataplane.backend: nft`',
          );
      }
      const next = new Map(this.services);
      for (const [id, s] of given) next.set(id, s);
      await this.commit(next, [], new Set(given.keys()));
    });
  }

  /** Stops redirecting a service: its objects and flows go; its traffic is routed normally. */
  removeService(serviceId: number): Promise<void> {
    return this.serial(async () => {
      this.mustBeStarted();
      if (!this.services.has(serviceId)) return;
      const next = new Map(this.services);
      next.delete(serviceId);
      await this.commit(next, [serviceId], new Set());
    });
  }

  /** Removes the table (every flow map with it) and ends the nft processes. */
  async stop(): Promise<void> {
    this.clearMovesTimer();
    await this.guard.stop();
    await this.linkWatch?.stop();
    this.linkWatch = null;
    return this.serial(async () => {
      this.generation += 1;
      try {
        await this.session.run(removeIngressTableRuleset());
        this.reset();
      } finally {
        this.generation += 1;
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
    const seen = this.generation;
    const again = (): Promise<IngressCounters> => this.serial(() => this.readCounters(scope));
    if (seen % 2 === 1) return again();
    return this.readCounters(scope).then((c) => (this.generation === seen ? c : again()), again);
  }

  /** How often the table was put back after someone else deleted it (no ip objects here). */
  restored(): RestoredObjects {
    return {
      ipRules: 0,
      ipRoutes: 0,
      ipGuard: 0,
      enginesMoved: this.enginesMoved,
      nftTables: this.guard.restores(),
      failedChecks: this.guard.failedChecks() + this.failedEngineChecks,
    };
  }

  /** The link monitor's process id while one runs (tests: stop() ends it). */
  linkWatchPid(): number | undefined {
    return this.linkWatch?.pid();
  }

  /**
   * Checks where the engines are now (checkEngines) after links, addresses or IPv4 routes change, debounced (at most
   * one check a second), until stop(). A route change is what moves an engine with no link or address event.
   */
  private watchEngines(): void {
    if (this.watchOption === false || this.linkWatch !== null) return;
    this.linkWatch = watchLinks({
      ...(this.netns !== undefined ? { netns: this.netns } : {}),
      ...(typeof this.watchOption === 'function' ? { spawnChild: this.watchOption } : {}),
      ...(this.linkDebounceMs !== undefined ? { debounceMs: this.linkDebounceMs } : {}),
      ...(this.linkMinGapMs !== undefined ? { minGapMs: this.linkMinGapMs } : {}),
      routes: true,
      onChange: () => {
        this.checkEngines().catch((e: Error) => {
          this.failedEngineChecks += 1;
          this.limitedLog?.warn(
            'ingress',
            e instanceof DataplaneError && e.reason === 'engine-not-attached' ? 'engine-off-link' : 'engine-check',
            { error: e.message, failedChecks: this.failedEngineChecks },
            `ingress data plane: ${e.message}`,
          );
        });
      },
      onExit: (why, ms) => this.log?.warn({ why }, `ip monitor ended (${why}); started again in ${ms} ms`),
    });
  }

  /**
   * In the queue: each engine with a live slot looked up again (ONE `ip -batch` of `route get`s). An engine now on
   * another interface gets its slots' rules rewritten to hand its packets out of that one (one transaction; its flows
   * and counters stay), with a log line; one no longer on-link is reported with the error its join would get (its
   * slots stay as they were) and looked up again at every later check.
   */
  checkEngines(): Promise<void> {
    return this.serial(async () => {
      if (!this.started || this.targets.size === 0) return;
      const targets = [...this.targets.values()];
      const engines = [...new Set(targets.map((t) => t.engine))];
      const segments = await engineSegments(execBatch(this.exec), engines);
      const offLink = new Map<EngineAddress, DataplaneError>();
      const moves: { engine: EngineAddress; from: string; to: string; slots: number[] }[] = [];
      const moved: IngressSlot[] = [];
      for (const [engine, segment] of segments) {
        if ('error' in segment) {
          offLink.set(engine, segment.error);
          continue;
        }
        const mine = targets.filter((t) => t.engine === engine);
        const from = mine.find((t) => t.device !== segment.dev)?.device;
        if (from === undefined) continue;
        moves.push({ engine, from, to: segment.dev, slots: mine.map((t) => t.slot) });
        moved.push(...mine.map((t) => ({ ...t, device: segment.dev })));
      }
      if (moved.length > 0) {
        await this.session.run(movedSlotsRuleset(moved));
        for (const t of moved) this.targets.set(t.slot, t);
        for (const m of moves) this.engineMoved(m);
      }
      if (offLink.size > 0) throw offLinkError(offLink, new Map(targets.map((t) => [t.engine, t.device] as const)));
    });
  }

  private engineMoved(m: { engine: EngineAddress; from: string; to: string; slots: readonly number[] }): void {
    this.enginesMoved += 1;
    this.log?.warn(
      { engine: m.engine, from: m.from, to: m.to, slots: m.slots, enginesMoved: this.enginesMoved },
      `engine ${m.engine} moved from ${m.from} to ${m.to}: its redirected traffic follows it ` +
        `(slot${m.slots.length > 1 ? 's' : ''} ${m.slots.join(' ')} now hand${m.slots.length > 1 ? '' : 's'} its packets to ${m.to})`,
    );
  }

  /** The watch's monitor process id while one runs; for tests. */
  watchPid(): number | undefined {
    return this.guard.pid();
  }

  /** The slot of each `<service> l2 <engine>` now in force (tests, admin views). */
  slotsInUse(): ReadonlyMap<string, number> {
    return new Map(this.slots);
  }

  private async readCounters(scope: CounterScope): Promise<IngressCounters> {
    this.mustBeStarted();
    const { named, ...common } = await readServiceCounters(
      (args) => this.reader.list(args),
      { family: INGRESS_FAMILY, name: INGRESS_TABLE },
      this.services.values(),
      (s, e) => this.slots.get(slotKey(s.serviceId, e)),
      scope,
    );
    const flowsFull = new Map<number, BucketCounters>();
    for (const id of this.services.keys())
      flowsFull.set(id, named.get(flowsFullCounter(id)) ?? { packets: 0, bytes: 0 });
    return { ...common, flowsFull };
  }

  private async commit(
    next: Map<number, ServiceRedirect>,
    removedIds: readonly number[],
    changed: ReadonlySet<number>,
  ): Promise<void> {
    this.generation += 1;
    try {
      await this.write(next, removedIds, changed);
    } finally {
      this.generation += 1;
    }
  }

  private async write(
    next: Map<number, ServiceRedirect>,
    removedIds: readonly number[],
    changed: ReadonlySet<number>,
  ): Promise<void> {
    // Slots as the nft backend places them (engine-slots.ts): held ones kept, a released number not reused at once.
    const wanted = [...next.values()].flatMap((s) =>
      s.engines.map((engine) => ({ serviceId: s.serviceId, engine, forwarding: 'l2' as const })),
    );
    let placed: Map<string, number>;
    try {
      placed = placeSlots(this.slots, wanted, { min: MIN_SLOT, max: MAX_SLOT }).slots;
    } catch (e) {
      throw new DataplaneError(
        'unsupported-service',
        `more than ${MAX_SLOT - MIN_SLOT + 1} engine slots at once: ${(e as Error).message}`,
      );
    }
    const live = new Set(placed.values());
    const released = [...this.slots.values()].filter((s) => !live.has(s)).sort((a, b) => a - b);
    const added = [...live].filter((s) => !this.targets.has(s)).sort((a, b) => a - b);
    // A new slot's engine must be on a segment attached to this gateway, and not one of its own addresses.
    const targets = new Map([...this.targets].filter(([s]) => live.has(s)));
    // One `ip route get` per engine, not per slot: an engine that joins 8 services (or comes back to them) costs one
    // ip process, and one that has a live slot already costs none (its interface is known).
    const engineDevices = new Map([...targets.values()].map((t) => [t.engine, t.device]));
    for (const [key, slot] of placed) {
      if (targets.has(slot)) continue;
      const engine = key.split(' ')[2] ?? '';
      let device = engineDevices.get(engine);
      if (device === undefined) {
        device = (await findEngineSegment(this.exec, engine, 'l2')).dev;
        engineDevices.set(engine, device);
      }
      targets.set(slot, { slot, engine, device });
    }
    const at = this.now();
    const idleMs = this.limits.idleSeconds * 1000;
    const nextMovesById = new Map<number, Map<number, BucketMove>>();
    const releasedSet = new Set(released);
    const services: IngressService[] = [...next.values()].map((s) => {
      const mine = new Map<EngineAddress, number>();
      for (const e of s.engines) {
        const slot = placed.get(slotKey(s.serviceId, e));
        if (slot !== undefined) mine.set(e, slot);
      }
      const kind = this.flowKinds.get(s.serviceId);
      const plan = {
        ...planService(s, mine),
        countersExist: kind !== undefined,
        unchanged: kind !== undefined && !changed.has(s.serviceId),
        previousMaskMaps: this.maskMaps.get(s.serviceId) ?? [],
      };
      const slots = [...new Set(mine.values())]
        .sort((a, b) => a - b)
        .map((slot) => targets.get(slot))
        .filter((t): t is IngressSlot => t !== undefined);
      const id = s.serviceId;
      let moves = new Map<number, BucketMove>();
      // Only the services that keep moves are listed: bucketMoves() tells them from those that record every flow.
      if (recordsMovedOnly(plan)) {
        moves = this.moves.get(id) ?? moves;
        if (plan.unchanged !== true)
          moves = nextMoves(this.claims.get(id), claimsOf(plan), moves, releasedSet, at, idleMs);
        nextMovesById.set(id, moves);
      }
      const moved = oldClaims(moves);
      const written = this.written.get(id);
      return kind !== undefined
        ? { plan, slots, previousKind: kind, moved, ...(written !== undefined ? { written } : {}) }
        : { plan, slots, moved };
    });
    const removed: IngressRemoved[] = removedIds
      .filter((id) => this.flowKinds.has(id))
      .map((id) => ({ serviceId: id, maskMaps: this.maskMaps.get(id) ?? [], kind: this.flowKinds.get(id) ?? 'tcp' }));
    const devices = hookDevices(services.map((s) => s.plan));
    const devicesText = devices.join(' ');
    const hook =
      devices.length === 0
        ? null
        : this.hook !== null && this.hook.devices === devicesText
          ? this.hook
          : { chain: ++this.hookSerial, devices: devicesText };
    const change = (of: IngressService[]): ReturnType<typeof ingressServicesWrite> =>
      ingressServicesWrite({
        services: of,
        removed,
        released,
        added,
        goneBefore: this.gone,
        hook: { chain: hook?.chain ?? null, previous: this.hook?.chain ?? null },
        limits: this.limits,
      });
    let done = change(services);
    try {
      await this.session.run(done.text);
    } catch (e) {
      // Written as changes to what we wrote last, and an element it deletes is not there or one it adds already is
      // (someone else's edit of our table): the same change again, every service's chains and maps whole. Any other
      // refusal stands, the bookkeeping as it was.
      if (
        !services.some((s) => s.written !== undefined) ||
        !/No such file or directory|File exists/.test((e as Error).message)
      )
        throw e;
      this.log?.warn(
        { err: (e as Error).message },
        'ingress data plane: nft refused a change written as differences to the last one (something in our table ' +
          'was removed by someone else?); the change written again whole',
      );
      this.written = new Map();
      done = change(services.map(({ written: _, ...rest }) => rest));
      await this.session.run(done.text);
    }
    // In force: the state follows.
    this.services = next;
    this.slots = placed;
    this.targets = targets;
    for (const s of added) this.gone.delete(s);
    for (const s of released) this.gone.add(s);
    this.flowKinds = new Map(services.map((s) => [s.plan.serviceId, flowKeyKind(s.plan.protocol)]));
    this.maskMaps = new Map(services.map((s) => [s.plan.serviceId, maskMapIndexes(s.plan)]));
    this.claims = new Map(services.map((s) => [s.plan.serviceId, claimsOf(s.plan)]));
    this.moves = nextMovesById;
    for (const id of removedIds) this.written.delete(id);
    for (const [id, w] of done.written) this.written.set(id, w);
    this.hook = hook;
    this.scheduleMoves();
  }

  /**
   * At the first move's end, its service is written again (that bucket steady, unrecorded); not before `leastMs` (a
   * write that failed is tried again 10 s later, not at once).
   */
  private scheduleMoves(leastMs = 0): void {
    this.clearMovesTimer();
    let first = Infinity;
    for (const m of this.moves.values()) for (const x of m.values()) first = Math.min(first, x.until);
    if (first === Infinity || !this.started) return;
    const wait = Math.max(leastMs, first - this.now() + 100);
    this.movesTimer = setTimeout(() => {
      this.movesTimer = null;
      this.expireMoves().catch((e: Error) => {
        this.limitedLog?.warn(
          'ingress',
          'moves',
          { error: e.message },
          `ingress data plane: the buckets whose move ended are not steady yet (tried again in 10 s): ${e.message}`,
        );
        this.scheduleMoves(10_000);
      });
    }, wait);
    this.movesTimer.unref();
  }

  private clearMovesTimer(): void {
    if (this.movesTimer !== null) clearTimeout(this.movesTimer);
    this.movesTimer = null;
  }

  /** In the queue: the services with a move past its end written again (the others left as they are). */
  expireMoves(): Promise<void> {
    return this.serial(async () => {
      if (!this.started) return;
      const at = this.now();
      const due = [...this.moves].filter(([, m]) => [...m.values()].some((x) => x.until <= at)).map(([id]) => id);
      if (due.length === 0) this.scheduleMoves();
      else await this.commit(new Map(this.services), [], new Set(due));
    });
  }

  /** A recordsMovedOnly service's moved buckets now -> their claim before the move (tests; the admin: bucketMoves). */
  movedBuckets(serviceId: number): ReadonlyMap<number, number> {
    return oldClaims(this.moves.get(serviceId) ?? new Map());
  }

  /**
   * Per recordsMovedOnly service, the moves in force, by bucket, each claim before named by its engine. Read between
   * writes (the state follows a transaction at once), so it is the kernel's moved_<id> verdicts; a move past its end
   * stays listed until the write that makes its bucket steady succeeds.
   */
  bucketMoves(): ReadonlyMap<number, readonly MovedBucket[]> {
    const at = this.now();
    const out = new Map<number, MovedBucket[]>();
    for (const [id, moves] of this.moves) {
      const list = [...moves]
        .sort(([a], [b]) => a - b)
        .map(([bucket, m]): MovedBucket => ({ bucket, ...this.claimBefore(m.old), endsInMs: m.until - at }));
      out.set(id, list);
    }
    return out;
  }

  /** A claim before a move in the admin's words: a live slot is its engine; a slot no longer live, an engine gone. */
  private claimBefore(old: number): Pick<MovedBucket, 'before' | 'engineBefore'> {
    if (old === CLAIM_UNASSIGNED) return { before: 'unassigned', engineBefore: null };
    if (old === CLAIM_REFUSED) return { before: 'refused', engineBefore: null };
    const engine = old === CLAIM_GONE ? undefined : this.targets.get(old)?.engine;
    return engine !== undefined ? { before: 'engine', engineBefore: engine } : { before: 'gone', engineBefore: null };
  }

  private reset(): void {
    this.services = new Map();
    this.slots = new Map();
    this.targets = new Map();
    this.gone = new Set();
    this.flowKinds = new Map();
    this.maskMaps = new Map();
    this.claims = new Map();
    this.moves = new Map();
    this.written = new Map();
    this.clearMovesTimer();
    this.hook = null;
  }

  // ---- a firewall reload: our table deleted by someone else (docs/dataplane/ingress.md, "The ingress backend") ----

  /** The chains our state says are in the kernel. */
  private expectedChains(): string[] {
    const out = [hashChain('daddr'), hashChain('saddr'), GONE_CHAIN, DIRECT_CHAIN];
    if (this.hook !== null) out.push(hookChain(this.hook.chain));
    for (const id of this.services.keys()) {
      out.push(serviceChain(id), classifyChain(id), unassignedChain(id), refusedChain(id));
      if (this.flowKinds.get(id) === 'tcp') out.push(...tcpChains(id));
    }
    for (const slot of this.targets.keys()) out.push(claimChain(slot), slotChain(slot));
    return out;
  }

  /** In the queue: is our table there with every chain (and, after a hint, the base chain's rules)? If not, restore. */
  private async checkTable(rules: boolean): Promise<void> {
    if (!this.started) return;
    const listed = JSON.parse(await this.reader.list(['list', 'chains', INGRESS_FAMILY])) as {
      nftables?: { chain?: { table?: string; name?: string } }[];
    };
    const names = (listed.nftables ?? []).flatMap((o) => (o.chain?.table === INGRESS_TABLE ? [o.chain.name] : []));
    let damage: string | null = null;
    if (names.length === 0) damage = 'was deleted';
    else {
      const have = new Set(names);
      const lost = this.expectedChains().filter((c) => !have.has(c));
      if (lost.length > 0) damage = `lost its chain${lost.length > 1 ? 's' : ''} ${lost.join(', ')}`;
      else if (rules && this.hook !== null) {
        const chain = hookChain(this.hook.chain);
        const out = JSON.parse(await this.reader.list(['list', 'chain', INGRESS_FAMILY, INGRESS_TABLE, chain])) as {
          nftables?: { rule?: unknown }[];
        };
        const count = (out.nftables ?? []).filter((o) => o.rule !== undefined).length;
        const want = [...this.services.values()].filter((s) => s.clientInterfaces.length > 0).length;
        if (count < want) damage = `emptied (its base chain has ${count} of its ${want} rules)`;
      }
    }
    if (damage !== null) await this.restore(damage);
  }

  /**
   * The whole table again from scratch, with every applied service's current state, in two transactions (the static
   * part, then the services). The flow maps went with the table: live flows are classified again by the current
   * tables at their next packet (the same engine unless a table changed meanwhile).
   */
  private async restore(damage: string): Promise<void> {
    const services = new Map(this.services);
    this.generation += 1;
    try {
      await this.session.run(ingressBaseRuleset());
      this.reset();
      await this.write(services, [], new Set(services.keys()));
    } finally {
      this.generation += 1;
    }
    const restored = this.guard.restored();
    const applied = [...services.values()]
      .sort((a, b) => a.serviceId - b.serviceId)
      .map((s) => `service ${s.serviceId} change ${s.table.changeNumber}`);
    this.log?.warn(
      { table: TABLE, restored, services: applied },
      `ingress data plane: nftables table ${TABLE} ${damage} by someone else (a firewall reload's flush ruleset?); ` +
        `restored with ${applied.length > 0 ? applied.join(', ') : 'no service'}; its flow maps went with it, so ` +
        'live flows are classified again by the current tables',
    );
  }

  private mustBeStarted(): void {
    if (!this.started)
      throw new DataplaneError('not-started', 'the ingress data plane is not started: call start() first');
  }

  private serial<T>(job: () => Promise<T>): Promise<T> {
    const run = this.queue.then(job, job);
    this.queue = run.catch(() => undefined);
    return run;
  }
}

/** The slot chains of engines that moved to another interface: each one's rule, handing packets out of the new one. */
function movedSlotsRuleset(moved: readonly IngressSlot[]): string {
  return moved.map((t) => `flush chain ${TABLE} ${slotChain(t.slot)}\n${slotRule(t)}\n`).join('');
}

/** As the daemon runs it: the closed table an earlier nft or userland run left goes at start (dropClosedTable). */
export const ingressBackend: BackendDescriptor<IngressRedirectorOptions> = {
  name: 'ingress',
  create: (options) => new IngressRedirector({ dropClosedTable: true, ...options }),
};
