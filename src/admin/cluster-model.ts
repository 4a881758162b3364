// The admin model over the running router: turns cluster snapshots, router counters and data-plane counters into
// the API's views, keeps the recent events, and sends admin commands through the cluster's own entry points.
import { ipv4ToNumber } from '../address.js';
import { ServiceFlag } from '../vocabulary.js';
import type {
  Cluster,
  ClusterEvent,
  EngineSnapshot,
  PeerLoads,
  ServiceCounter,
  ServiceSnapshot,
} from '../cluster/index.js';
import type {
  AdminServerView,
  BucketsView,
  BuildView,
  DataplaneView,
  EngineView,
  EngineWarmupView,
  WccpSocketView,
  WarmingBucketView,
  EnginesView,
  EventView,
  InForceView,
  IpFamilyCountersView,
  LoadEpochView,
  LoadStatusView,
  MovedBucketView,
  PeerStatusView,
  ConfigView,
  ServiceStatusView,
  StatusView,
  WhichView,
} from './api-types.js';
import type { AdminModel, CommandOutcome } from './model.js';
import { warmupText } from './render.js';
import { planView, rebalanceView } from './plan-view.js';
import { loadRatio } from '../buckets/load.js';
import type { PlanAnswer, PlanRequest } from './plan-view.js';
import type { WallClock } from '../clock.js';
import type { MovedBucket, RedirectCounters, Redirector } from '../dataplane/redirector.js';
import type { BridgeNetfilterState } from '../dataplane/kernel/bridge-netfilter.js';

/** The data plane's part of the status view: what every backend reports, and what it says of itself. */
export function dataplaneView(r: Redirector, bridgeNetfilter: BridgeNetfilterState | null): DataplaneView {
  const fastPath = r.fastPath?.() ?? null;
  const restored = r.restored?.();
  const own = r.status?.();
  return {
    backend: r.name,
    detail: own?.detail ?? '',
    ...(fastPath !== null ? { fastPath } : {}),
    bridgeNetfilter,
    ...(restored !== undefined ? { restored } : {}),
    ...(own?.userland !== undefined ? { userland: own.userland } : {}),
  };
}

/** The data plane's counters as the model reads them; the ingress backend's flows past a full map per service. */
export function trafficOf(c: RedirectCounters): TrafficCounters {
  const full = c.flowsFull;
  const services =
    c.services && full
      ? new Map(
          [...c.services].map(([id, s]) => {
            const f = full.get(id);
            return [id, f !== undefined ? { ...s, flowsFull: f } : s] as const;
          }),
        )
      : c.services;
  return {
    engines: c.engines,
    buckets: c.buckets,
    ...(services ? { services } : {}),
    ...(c.ipv6 !== undefined ? { ipv6: c.ipv6 } : {}),
  };
}

/** A service's IPv6 figures, where the data plane counts them apart (ServiceCountersView.ipv6). */
function ipv6Counters(traffic: TrafficCounters, id: number): IpFamilyCountersView | null {
  const engines = traffic.ipv6?.engines.get(id);
  const service = traffic.ipv6?.services.get(id);
  if (engines === undefined || service === undefined) return null;
  const sum = (pick: (e: { packets: number; bytes: number }) => number) =>
    [...engines.values()].reduce((a, e) => a + pick(e), 0);
  return {
    packetsRedirected: sum((e) => e.packets),
    bytesRedirected: sum((e) => e.bytes),
    packetsDenied: service.denied.packets,
    packetsUnassigned: service.unassigned.packets,
  };
}

/** Data-plane figures per engine, read at most once a second (an nft listing costs ~10 ms of CPU). */
export interface TrafficCounters {
  /** service id -> engine -> packets/bytes */
  readonly engines: ReadonlyMap<number, ReadonlyMap<string, { readonly packets: number; readonly bytes: number }>>;
  /** service id -> 256 per-bucket counters of new connections, where the data plane counts them. */
  readonly buckets?: ReadonlyMap<number, readonly { readonly packets: number; readonly bytes: number }[]>;
  /** service id -> new connections refused and unassigned, where the data plane counts them. */
  readonly services?: ReadonlyMap<
    number,
    {
      readonly denied: { readonly packets: number };
      readonly unassigned: { readonly packets: number };
      /** The ingress backend's packets past a full flow map. */
      readonly flowsFull?: { readonly packets: number };
    }
  >;
  /** The IPv6 part of `engines` and `services`, per service that redirects IPv6 (RedirectCounters.ipv6). */
  readonly ipv6?: {
    readonly engines: ReadonlyMap<number, ReadonlyMap<string, { readonly packets: number; readonly bytes: number }>>;
    readonly services: ReadonlyMap<
      number,
      { readonly denied: { readonly packets: number }; readonly unassigned: { readonly packets: number } }
    >;
  };
}

export interface ClusterModelDeps {
  readonly cluster: Cluster;
  /** The running wccpd's version and build commit. */
  readonly build: BuildView;
  /** Monotonic time for ages and reuse; wall time for the dates the views show (src/clock.ts). */
  readonly clock: WallClock;
  readonly dataplane: () => DataplaneView;
  /** The table the data plane last applied without error, per service (null: none yet, or nothing is applied). */
  readonly inForce: (service: number) => InForceView | null;
  /** Per service, its buckets in a move, where the data plane keeps moves (ingress); absent or null: it keeps none. */
  readonly bucketMoves?: () => ReadonlyMap<number, readonly MovedBucket[]> | null;
  /** The data plane's counters; per-bucket ones for `bucketsOf` only (the buckets view of that service). */
  readonly traffic: (bucketsOf?: number) => Promise<TrafficCounters>;
  /** Datagrams dropped before the cluster, by reason; decode errors are the 'decode-*' reasons. */
  readonly dropped: () => Readonly<Record<string, number>>;
  /** The router's WCCP socket (its receive buffer, the kernel's drops); null before it is bound. */
  readonly wccpSocket?: () => WccpSocketView | null;
  /** Errors a boundary caught, by where (status internalErrors). */
  readonly internalErrors?: () => Readonly<Record<string, number>>;
  /** Where a new connection to `address` goes (the data plane's own answer). */
  readonly which: (service: number, address: string) => WhichView | null;
  /** The admin HTTP server's own counters. */
  readonly admin: () => AdminServerView;
  /** The config wccpd runs on and its last reload. */
  readonly config?: () => ConfigView;
  /** The peer gateways compared with us (see peers.ts); absent when none are configured. */
  readonly peers?: () => Promise<PeerStatusView[] | undefined>;
  /** The warm-up broker, when one runs: each engine's warm-up and the broker's counters. */
  readonly warmup?: {
    view(service: number, engine: string): EngineWarmupView | null;
    /** Who holds bucket `i`, who held it before, and whether it came as a gain (warm-up applies). */
    bucket?(service: number, i: number): WarmupBucket | null;
    counters(): Readonly<Record<string, number>>;
  };
  /** Load-aware assignment with peers: the load this gateway published for a window (src/daemon/load-peers.ts). */
  readonly loadEpoch?: (service: number, epoch: number) => LoadEpochView | null;
  /** Load-aware assignment with peers: their loads so far in the window running at `wall` (null: decided alone). */
  readonly peerLoads?: (service: number, wall: number) => Promise<PeerLoads | null>;
  /** How many recent events to keep for the page and `wccpctl events` (default 500). */
  readonly eventLimit?: number;
  /**
   * Called after an admin command was carried out: the daemon saves its state, also when the command changed no
   * table (a weight for an engine that is not usable, a drain of one draining already).
   */
  readonly commanded?: () => void;
}

/** A bucket as the warm-up policy knows it: its owner, the one before, and when it came as a gain (else null). */
export interface WarmupBucket {
  readonly owner: string | null;
  readonly previous: string | null;
  readonly gainedAt: number | null;
}

const FLAG_WORDS: Record<string, string> = {
  noReceiveIdEcho: 'no Receive ID echo',
  adminDrain: 'admin drain',
  weightOverride: 'weight set by admin',
};

function flagsText(e: EngineSnapshot, warmup: EngineWarmupView | null): string[] {
  const words: string[] = [];
  if (warmup !== null) words.push(warmupText(warmup));
  for (const [k, v] of Object.entries(e.flags)) {
    if (k === 'refused') {
      if (typeof v === 'string' && v) words.push(`refused: ${v}`);
    } else if (v === true) words.push(FLAG_WORDS[k] ?? k);
  }
  return words;
}

/** Engines in address order (numeric), the order the page's colours and wccpctl's letters follow. */
function byAddress(a: { address: string }, b: { address: string }): number {
  return (ipv4ToNumber(a.address) ?? 0) - (ipv4ToNumber(b.address) ?? 0);
}

function serviceState(s: ServiceSnapshot): ServiceStatusView['state'] {
  if (s.engines.some((e) => e.state === 'usable') && s.buckets.some((b) => b !== null)) return 'active';
  return s.failMode === 'closed' ? 'closed' : 'bypass';
}

export class ClusterModel implements AdminModel {
  private readonly events: EventView[] = [];
  private readonly listeners = new Set<(e: EventView) => void>();
  private readonly rebalances = new Map<number, number>();
  private readonly loadMoves = new Map<number, number>();
  /** The last read per scope: 'engines' (status, engines, metrics), or a service id (its buckets view too). */
  private readonly traffic = new Map<'engines' | number, { at: number; value: Promise<TrafficCounters> }>();
  private readonly startedAt: number;

  constructor(private readonly deps: ClusterModelDeps) {
    this.startedAt = deps.clock.now();
    deps.cluster.onEvent((e) => this.record(e));
  }

  /** Records an event that does not come from the cluster (the warm-up broker's). */
  recordEvent(e: { readonly type: string; readonly [key: string]: unknown }): void {
    this.record(e);
  }

  private record(e: ClusterEvent | { readonly type: string; readonly [key: string]: unknown }): void {
    if (e.type === 'table' && typeof e.service === 'number')
      this.rebalances.set(e.service, (this.rebalances.get(e.service) ?? 0) + 1);
    if (e.type === 'table' && typeof e.service === 'number' && 'load' in e && typeof e.moved === 'number')
      this.loadMoves.set(e.service, (this.loadMoves.get(e.service) ?? 0) + e.moved);
    // A cluster event's `at` is monotonic: shown, like `time`, as wall-clock ms.
    const time = this.deps.clock.wall();
    const at = 'at' in e && typeof e.at === 'number' ? { at: time - (this.deps.clock.now() - e.at) } : {};
    const view: EventView = { ...e, ...at, time };
    this.events.push(view);
    const limit = this.deps.eventLimit ?? 500;
    if (this.events.length > limit) this.events.splice(0, this.events.length - limit);
    for (const l of this.listeners) l(view);
  }

  /**
   * The counters, read at most once a second per scope: the views that show engines need no per-bucket counters, so
   * the page, the status and a scrape read no bucket set; a buckets view reads its own service's. The scopes are
   * `engines` and the configured services (buckets() answers only for those), so this map stays that small.
   */
  private readTraffic(bucketsOf?: number): Promise<TrafficCounters> {
    const key = bucketsOf ?? 'engines';
    const now = this.deps.clock.now();
    const last = this.traffic.get(key);
    // A read "in the future" (the clock was set back) is not reused for as long as the step.
    if (last !== undefined && now >= last.at && now - last.at <= 1000) return last.value;
    const value = this.deps.traffic(bucketsOf).catch((): TrafficCounters => ({ engines: new Map() }));
    this.traffic.set(key, { at: now, value });
    return value;
  }

  status(): StatusView {
    const snap = this.deps.cluster.snapshot();
    const moves = this.deps.bucketMoves?.() ?? null;
    const dropped = this.deps.dropped();
    const decodeErrors: Record<string, number> = {};
    const otherDrops: Record<string, number> = {};
    for (const [k, v] of Object.entries(dropped)) {
      if (k.startsWith('decode-')) decodeErrors[k.slice('decode-'.length)] = v;
      else otherDrops[k] = v;
    }
    return {
      routerId: snap.routerAddress,
      build: this.deps.build,
      ...(this.deps.config !== undefined ? { config: this.deps.config() } : {}),
      protocolVersion: '2.0',
      uptimeSeconds: Math.round((this.deps.clock.now() - this.startedAt) / 1000),
      dataplane: this.deps.dataplane(),
      decodeErrors,
      dropped: otherDrops,
      warmup: this.deps.warmup?.counters() ?? null,
      wccpSocket: this.deps.wccpSocket?.() ?? null,
      ...(this.deps.internalErrors !== undefined ? { internalErrors: this.deps.internalErrors() } : {}),
      services: snap.services.map((s) => this.serviceStatus(s, moves?.get(s.id)?.length ?? null)),
      admin: this.deps.admin(),
    };
  }

  private loadStatus(id: number): { load?: LoadStatusView } {
    const v = this.deps.cluster.loadAware(id)?.loadView() ?? null;
    if (v === null) return {};
    return {
      load: {
        lastWindowEnd: v.last === null ? null : new Date(v.last.windowEnd).toISOString(),
        engines: (v.last?.decision.engines ?? []).map((e) => ({ address: e.address, ratio: loadRatio(e, e.after) })),
        movesLastHour: v.spent,
        held: v.held,
      },
    };
  }

  private serviceStatus(s: ServiceSnapshot, movedBuckets: number | null): ServiceStatusView {
    const c = (k: ServiceCounter) => s.counters[k] ?? 0;
    return {
      id: s.id,
      name: s.id === 0 ? 'web-cache' : `dynamic-${s.id}`,
      mode: s.mode,
      failMode: s.failMode,
      state: serviceState(s),
      forwarding: s.forwarding,
      return: s.return,
      assignment: s.assignment,
      authority: s.authority,
      changeNumber: s.changeNumber,
      memberChangeNumber: s.memberChangeNumber,
      inForce: this.deps.inForce(s.id),
      movedBuckets,
      designatedEngine: s.designatedEngine,
      ...this.loadStatus(s.id),
      engines: s.engines.filter((e) => e.state !== 'gone').length,
      usableEngines: s.engines.filter((e) => e.state === 'usable').length,
      routers: s.routers,
      serviceInfo:
        s.definition === null
          ? null
          : {
              type: s.definition.type,
              priority: s.definition.priority,
              protocol: s.definition.protocol,
              flags: s.definition.flags,
              ports: [...s.definition.ports],
              portsSource: (s.definition.flags & ServiceFlag.PORTS_SOURCE) !== 0,
            },
      detection: {
        hereIAmMs: s.detection.hereIAmMs,
        http: s.detection.http,
        icp: s.detection.icp,
        tcp: s.detection.tcp,
        icmp: s.detection.icmp,
        probes: s.detection.probes.map((p) => ({ ...p, falseVerdict: p.falseVerdict.map((f) => ({ ...f })) })),
      },
      counters: {
        // Packet figures come from the data plane (statusWithTraffic); null until read, or where it does not count.
        packetsRedirected: null,
        bytesRedirected: null,
        packetsDenied: null,
        packetsUnassigned: null,
        packetsFlowsFull: null,
        ipv6: null,
        authFailures: c('auth-failures'),
        messagesDenied: c('capability-refused') + c('conflicting-definition') + c('too-many-engines'),
        hereIAmReceived: c('here-i-am'),
        iSeeYouSent: c('i-see-you'),
        removalQueriesSent: c('removal-query'),
        rebalances: this.rebalances.get(s.id) ?? 0,
        loadMoves: this.loadMoves.get(s.id) ?? 0,
        tableChangesCoalesced: c('table-changes-coalesced'),
      },
    };
  }

  /** The status with the data plane's packet figures filled in (async, for the API). */
  async statusWithTraffic(): Promise<StatusView> {
    const base = this.status();
    const [traffic, peers] = await Promise.all([this.readTraffic(), this.deps.peers?.() ?? Promise.resolve(undefined)]);
    return {
      ...base,
      ...(peers !== undefined ? { peers } : {}),
      services: base.services.map((s) => {
        const perEngine = traffic.engines.get(s.id);
        const service = traffic.services?.get(s.id);
        const sum = (pick: (e: { packets: number; bytes: number }) => number) =>
          perEngine === undefined ? null : [...perEngine.values()].reduce((a, e) => a + pick(e), 0);
        return {
          ...s,
          counters: {
            ...s.counters,
            packetsRedirected: sum((e) => e.packets),
            bytesRedirected: sum((e) => e.bytes),
            packetsDenied: service?.denied.packets ?? null,
            packetsUnassigned: service?.unassigned.packets ?? null,
            packetsFlowsFull: service?.flowsFull?.packets ?? null,
            ipv6: ipv6Counters(traffic, s.id),
          },
        };
      }),
    };
  }

  async buckets(service: number): Promise<BucketsView | null> {
    const s = this.deps.cluster.service(service);
    if (!s) return null;
    const perBucket = (await this.readTraffic(service)).buckets?.get(service);
    const counters =
      perBucket?.length === s.buckets.length
        ? perBucket.map((c) => ({ connections: c.packets, bytes: c.bytes }))
        : null;
    return {
      service: s.id,
      changeNumber: s.changeNumber,
      inForce: this.deps.inForce(s.id),
      buckets: s.buckets,
      counters,
      moved: this.movedView(s.id),
      warming: this.warmingView(s.id, s.buckets),
      mask: s.assignment === 'mask' ? s.maskSets : null,
    };
  }

  /** The buckets being warmed: gained by their engine, whose warm-up runs. */
  private warmingView(service: number, table: readonly (string | null)[]): WarmingBucketView[] | null {
    const w = this.deps.warmup;
    if (w?.bucket === undefined) return null;
    const warming = new Map<string, boolean>();
    const out: WarmingBucketView[] = [];
    table.forEach((engine, bucket) => {
      if (engine === null) return;
      const b = w.bucket?.(service, bucket);
      if (!b || b.gainedAt === null || b.owner !== engine || b.previous === null) return;
      if (!warming.has(engine)) warming.set(engine, w.view(service, engine)?.warming ?? false);
      if (warming.get(engine)) out.push({ bucket, engine, previousOwner: b.previous });
    });
    return out;
  }

  /** A service's buckets in a move, their ends as wall-clock dates (the data plane counts the ms left). */
  private movedView(service: number): MovedBucketView[] | null {
    const list = this.deps.bucketMoves?.()?.get(service);
    if (list === undefined) return null;
    const wall = this.deps.clock.wall();
    return list.map((m) => ({
      bucket: m.bucket,
      before: m.before,
      engineBefore: m.engineBefore,
      until: new Date(Math.round(wall + m.endsInMs)).toISOString(),
      endsInMs: Math.max(0, Math.round(m.endsInMs)),
    }));
  }

  async engines(service: number): Promise<EnginesView | null> {
    const s = this.deps.cluster.service(service);
    if (!s) return null;
    const traffic = (await this.readTraffic()).engines.get(service);
    const now = this.deps.clock.now();
    const wall = this.deps.clock.wall();
    const engines: EngineView[] = [...s.engines].sort(byAddress).map((e) => {
      const warmup = this.deps.warmup?.view(s.id, e.address) ?? null;
      return {
        address: e.address,
        state: e.state,
        flags: { ...e.flags, warming: warmup?.warming ?? false },
        flagsText: flagsText(e, warmup),
        weight: e.weight,
        buckets: e.buckets,
        share: e.share,
        lastHereIAm: e.lastHereIAm === null ? null : new Date(wall - (now - e.lastHereIAm)).toISOString(),
        lastHereIAmAgoMs: e.lastHereIAm === null ? null : Math.max(0, now - e.lastHereIAm),
        reason: e.reason,
        probeRttMs: e.probeRttMs,
        drains: e.drains,
        maintenance: e.maintenance
          ? {
              // Maintenance times are wall-clock already (cron's; control/maintenance.ts).
              activeUntil:
                e.maintenance.activeUntil === null ? null : new Date(e.maintenance.activeUntil).toISOString(),
              activeCron: e.maintenance.activeCron,
              next: e.maintenance.next === null ? null : new Date(e.maintenance.next).toISOString(),
              nextCron: e.maintenance.nextCron,
              nextDurationMs: e.maintenance.nextDurationMs,
            }
          : null,
        packets: traffic?.get(e.address)?.packets ?? 0,
        bytes: traffic?.get(e.address)?.bytes ?? 0,
        warmup,
      };
    });
    return { service: s.id, engines };
  }

  which(service: number, address: string): WhichView | null {
    return this.deps.which(service, address);
  }

  recentEvents(limit: number): readonly EventView[] {
    return this.events.slice(-Math.max(0, limit));
  }

  subscribe(listener: (event: EventView) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private outcome(r: { ok: true } | { ok: false; error: string; message: string }, done: string): CommandOutcome {
    if (r.ok) {
      this.deps.commanded?.();
      return { ok: true, message: done };
    }
    const status =
      r.error === 'unknown-service' || r.error === 'unknown-engine' ? 404 : r.error === 'bad-weight' ? 400 : 409;
    return { ok: false, status, message: r.message };
  }

  async drain(service: number, engine: string): Promise<CommandOutcome> {
    return this.outcome(this.deps.cluster.drain(service, engine, 'admin drain (API)'), `${engine} drained`);
  }

  async undrain(service: number, engine: string): Promise<CommandOutcome> {
    return this.outcome(this.deps.cluster.undrain(service, engine, 'admin undrain (API)'), `${engine} undrained`);
  }

  async setWeight(service: number, engine: string, weight: number | null): Promise<CommandOutcome> {
    return this.outcome(
      this.deps.cluster.setWeight(service, engine, weight),
      weight === null ? `admin weight of ${engine} cleared` : `weight of ${engine} set to ${weight}`,
    );
  }

  plan(request: PlanRequest): PlanAnswer {
    return planView(this.deps.cluster, request);
  }

  loadEpoch(service: number, epoch: number): LoadEpochView | null {
    return this.deps.loadEpoch?.(service, epoch) ?? null;
  }

  planRebalance(service: number | null): Promise<PlanAnswer> {
    const wall = this.deps.clock.wall();
    return rebalanceView(
      this.deps.cluster,
      wall,
      service,
      (id) => this.freshCounts(id),
      async (id) => (await this.deps.peerLoads?.(id, wall)) ?? null,
    );
  }

  async loadSoFar(service: number): Promise<LoadEpochView | null> {
    const now = this.deps.cluster.loadSoFar(service, this.deps.clock.wall(), await this.freshCounts(service));
    if (now === null) return null;
    return {
      service,
      epoch: now.windowEnd / now.windowMs,
      windowEnd: now.windowEnd,
      load: now.load === null ? null : [...now.load.load],
      connections: now.load?.connections ?? 0,
      digest: null,
    };
  }

  /** A service's per-bucket counters read now, not the views' cached read: a plan is compared with the window's end. */
  private async freshCounts(service: number): Promise<readonly { packets: number; bytes: number }[] | null> {
    const t = await this.deps.traffic(service).catch(() => null);
    return t?.buckets?.get(service) ?? null;
  }
}
