// Two gateways (or more) in front of the same engines decide load moves together (docs/buckets.md, "Two gateways";
// decision 0004, point 7). With `mode: consistent` and `peers`, each gateway publishes its per-bucket load of each
// window (GET /api/v1/services/:id/load?epoch=k, k = the window's end / window), reads every peer's for the same
// window, and decides on the sum, from the same table, members, holds and budget: every gateway computes the same
// moves. Before making them it publishes the decision's digest and waits for every peer's: only when all are the same
// are the moves made; a peer that published another digest means every gateway keeps its table for this window and
// says so (`wccpctl status` compares the tables). A peer whose digest was not read in time (its own wait may have
// read ours and moved) is watched on until the next window is near: its agreeing digest then makes the same moves here,
// if deciding again still gives them (the table, members and holds unchanged). A peer that publishes nothing for the
// window (down, slow, another window) means no decision. Each window published carries the holds and pins kept, which
// a gateway keeping none (its state file lost) takes; and `wccpctl plan rebalance` sums the peers' loads so far.
import { createHash } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { MAX_ENGINES, sumLoads, windowEnd } from '../cluster/index.js';
import type { Cluster, LoadMemory, LoadOutcome, PeerLoads, WindowLoad } from '../cluster/index.js';
import type { PeerConfig, ServiceConfig } from '../config/index.js';
import type { Clock } from '../clock.js';
import type { Log } from '../log.js';
import { BUCKET_COUNT } from '../buckets/table.js';
import type { LoadEpochView } from '../admin/api-types.js';
import { readCapped } from '../admin/peers.js';
import { logOutcome } from './load.js';
import { formatDuration } from '../duration.js';

/** What this gateway published for one window of one service (the API's answer). */
interface Published {
  readonly windowEnd: number;
  readonly load: readonly number[] | null;
  readonly connections: number;
  /** The holds, budget and pins kept when the window ended. */
  readonly memory: LoadMemory | null;
  digest: string | null;
}

export interface LoadExchangeDeps {
  readonly cluster: Cluster;
  readonly clock: Clock;
  /** The config in force: its peers and services. */
  readonly peers: () => readonly PeerConfig[];
  readonly services: () => readonly ServiceConfig[];
  readonly log: Log;
  /** Tests inject a fetch; the daemon uses the global one. */
  readonly fetch?: typeof fetch;
}

/** Windows kept to answer peers (a slow peer asks for the last one or two). */
const KEPT_WINDOWS = 4;
const POLL_MS = 200;
/** A late digest is looked for this often (at most; half a wait on short windows). */
const LATE_POLL_MS = 1000;
const READ_TIMEOUT_MS = 1000;
/** A window's answer is 256 counts and a digest (about 4 KB): a peer's answer past this is not read on. */
const MAX_ANSWER_BYTES = 64 * 1024;

export class LoadExchange {
  private readonly published = new Map<number, Map<number, Published>>();
  /** The last window end each service began deciding: a late watch of an older window gives way to it. */
  private readonly deciding = new Map<number, number>();
  /** Ends every late watch (the daemon stopping). */
  private readonly stopping = new AbortController();

  constructor(private readonly deps: LoadExchangeDeps) {}

  /** Ends the late watches (the daemon stops): none makes moves after this. */
  stop(): void {
    this.stopping.abort();
  }

  /** Whether `s` decides with its peers: mode consistent with peers configured. */
  shared(s: ServiceConfig): boolean {
    return s.mode === 'consistent' && this.deps.peers().length > 0;
  }

  /** GET /api/v1/services/:id/load?epoch=k: what this gateway published for window k of the service, or null. */
  view(service: number, epoch: number): LoadEpochView | null {
    const s = this.deps.services().find((x) => x.id === service);
    if (s === undefined) return null;
    const windowEnd = epoch * s.loadAware.windowMs;
    const p = this.published.get(service)?.get(windowEnd);
    if (p === undefined) return null;
    return {
      service,
      epoch,
      windowEnd,
      load: p.load === null ? null : [...p.load],
      connections: p.connections,
      digest: p.digest,
      memory: p.memory,
    };
  }

  private publish(service: number, p: Published): void {
    const kept = this.published.get(service) ?? new Map<number, Published>();
    kept.set(p.windowEnd, p);
    for (const end of [...kept.keys()].sort((a, b) => a - b).slice(0, -KEPT_WINDOWS)) kept.delete(end);
    this.published.set(service, kept);
  }

  /** Decides window `end` of `s` with the peers (LoadWindows' decide). Never rejects. */
  async decide(s: ServiceConfig, end: number, w: WindowLoad | null): Promise<void> {
    const port = this.deps.cluster.loadAware(s.id);
    if (port === null) return;
    const started = this.deps.clock.now();
    this.deciding.set(s.id, end);
    const mine: Published = {
      windowEnd: end,
      load: w?.load ?? null,
      connections: w?.connections ?? 0,
      memory: port.loadMemory(),
      digest: null,
    };
    this.publish(s.id, mine);
    const peers = this.deps.peers();
    const epoch = end / s.loadAware.windowMs;
    // Each step waits at most a fraction of the window, so the window's moves come well before the next one's end.
    const stepMs = Math.min(10_000, s.loadAware.windowMs / 4);
    const theirs = await Promise.all(peers.map((p) => this.poll(p, s.id, epoch, end, () => true, stepMs)));
    const missing = peers.filter((_, i) => theirs[i] === null).map((p) => p.address);
    if (missing.length > 0) {
      mine.digest = 'unread';
      this.deps.log.warn(
        { service: s.id, peers: missing, windowEnd: end },
        `load-aware: no load from peer ${missing.join(', ')} for the window ending ${iso(end)}: nothing is decided for it`,
      );
      return;
    }
    this.adoptMemory(s, end, mine.memory, peers, theirs as LoadEpochView[]);
    const sum = sumLoads([mine, ...(theirs as LoadEpochView[])].map(windowLoadOf));
    const outcome = port.loadDecision(end, sum);
    const digest = digestOf(outcome);
    mine.digest = digest;
    const digests = await Promise.all(
      peers.map((p) => this.poll(p, s.id, epoch, end, (v) => v.digest !== null, stepMs)),
    );
    // A digest once published is final: another one means no moves; none read yet may still come (watched below).
    const differing = peers.filter((_, i) => digests[i] != null && digests[i]?.digest !== digest).map((p) => p.address);
    const unseen = peers.filter((_, i) => digests[i] == null);
    if (differing.length > 0) {
      this.deps.log.warn(
        { service: s.id, peers: differing, windowEnd: end, digest, theirs: digests.map((d) => d?.digest ?? null) },
        `load-aware: peer ${differing.join(', ')} decided the window ending ${iso(end)} otherwise: no moves, every table stays`,
      );
      return;
    }
    if (unseen.length > 0) {
      if (outcome.kind !== 'decided' || outcome.decision.moves.length === 0) return;
      const until = started + s.loadAware.windowMs - stepMs;
      this.deps.log.warn(
        { service: s.id, peers: unseen.map((p) => p.address), windowEnd: end, digest },
        `load-aware: no decision from peer ${unseen.map((p) => p.address).join(', ')} in time for the window ending ${iso(end)}: no moves yet; watching for it for ${formatDuration(Math.round((until - this.deps.clock.now()) / 1000) * 1000)}`,
      );
      void this.watchLate(s, end, sum, digest, unseen, until, stepMs);
      return;
    }
    port.loadApply(outcome);
    logOutcome(this.deps.log, s, outcome);
  }

  /**
   * A gateway that keeps no holds, budget or pins (its state file lost, or new) while a peer does decides from other
   * inputs than the peer, so their digests differ and nothing moves by load until the peer's holds run out: it takes
   * the first such peer's instead, pins and all (its table then has the peer's moves), before deciding.
   */
  private adoptMemory(
    s: ServiceConfig,
    end: number,
    mine: LoadMemory | null,
    peers: readonly PeerConfig[],
    theirs: readonly LoadEpochView[],
  ): void {
    const port = this.deps.cluster.loadAware(s.id);
    if (port === null || mine === null || !emptyMemory(mine)) return;
    const i = theirs.findIndex((v) => v.memory != null && !emptyMemory(v.memory));
    const memory = theirs[i]?.memory;
    if (memory == null) return;
    const from = peers[i]?.address ?? '?';
    this.deps.log.warn(
      { service: s.id, peer: from, windowEnd: end, holds: memory.holds.length, pins: memory.pins.length },
      `load-aware: no holds or pins kept here (a lost state file?), peer ${from} keeps ${memory.holds.length} hold(s) and ${memory.pins.length} pin(s): taking them, to decide as it does`,
    );
    port.loadAdopt(memory, `load-aware: holds and pins taken from peer ${from}`);
  }

  /**
   * A peer whose digest came too late may have read ours in time and moved: its digest, read until `until`
   * (monotonic), makes the same moves here, unless a newer window began deciding, a peer published another digest,
   * or deciding again no longer gives the same moves (the table, members or holds changed meanwhile). Never rejects.
   */
  private async watchLate(
    s: ServiceConfig,
    end: number,
    sum: WindowLoad | null,
    digest: string,
    peers: readonly PeerConfig[],
    until: number,
    stepMs: number,
  ): Promise<void> {
    const epoch = end / s.loadAware.windowMs;
    const every = Math.min(LATE_POLL_MS, stepMs / 2);
    const waiting = new Set(peers);
    const current = (): boolean => !this.stopping.signal.aborted && this.deciding.get(s.id) === end;
    try {
      while (waiting.size > 0) {
        if (this.deps.clock.now() + every > until) {
          this.deps.log.warn(
            { service: s.id, peers: [...waiting].map((p) => p.address), windowEnd: end, digest },
            `load-aware: still no decision from peer ${[...waiting].map((p) => p.address).join(', ')} for the window ending ${iso(end)}: no moves (if the peer made them, the tables differ: wccpctl status)`,
          );
          return;
        }
        await delay(every, undefined, { signal: this.stopping.signal, ref: false });
        for (const p of [...waiting]) {
          if (!current()) return;
          const v = await this.read(p, s.id, epoch, end);
          if (v === null || v.digest === null) continue;
          if (v.digest !== digest) {
            this.deps.log.warn(
              { service: s.id, peers: [p.address], windowEnd: end, digest, theirs: [v.digest] },
              `load-aware: peer ${p.address} decided the window ending ${iso(end)} otherwise: no moves, every table stays`,
            );
            return;
          }
          waiting.delete(p);
        }
      }
      const port = this.deps.cluster.loadAware(s.id);
      if (!current() || port === null) return;
      const again = port.loadDecision(end, sum);
      if (digestOf(again) !== digest) {
        this.deps.log.warn(
          { service: s.id, windowEnd: end, digest, now: digestOf(again) },
          `load-aware: every peer agreed late on the window ending ${iso(end)}, but the table changed since: its moves are not made here (wccpctl status compares the tables)`,
        );
        return;
      }
      port.loadApply(again);
      this.deps.log.info(
        { service: s.id, windowEnd: end, digest },
        `load-aware: every peer agreed late on the window ending ${iso(end)}: its moves are made`,
      );
      logOutcome(this.deps.log, s, again);
    } catch (err) {
      if (this.stopping.signal.aborted) return;
      this.deps.log.warn(
        { service: s.id, windowEnd: end, err: err instanceof Error ? err.message : String(err) },
        'load-aware: watching for a late decision failed',
      );
    }
  }

  /**
   * `wccpctl plan rebalance` on a service decided with the peers: every peer's load so far in the window running at
   * `wall` (GET /api/v1/services/:id/load), read once each; null where the service decides alone.
   */
  async peersSoFar(service: number, wall: number): Promise<PeerLoads | null> {
    const s = this.deps.services().find((x) => x.id === service);
    if (s === undefined || !this.shared(s)) return null;
    const end = windowEnd(wall, s.loadAware.windowMs) + s.loadAware.windowMs;
    const peers = this.deps.peers();
    const theirs = await Promise.all(peers.map((p) => this.read(p, service, null, end)));
    return {
      read: peers.filter((_, i) => theirs[i] != null).map((p) => p.address),
      loads: theirs.flatMap((v) => (v == null ? [] : [windowLoadOf(v)])),
      unread: peers.filter((_, i) => theirs[i] == null).map((p) => p.address),
    };
  }

  /** Reads a peer's window until `ready` says so or `withinMs` has passed; null when it never did. */
  private async poll(
    peer: PeerConfig,
    service: number,
    epoch: number,
    end: number,
    ready: (v: LoadEpochView) => boolean,
    withinMs: number,
  ): Promise<LoadEpochView | null> {
    const until = this.deps.clock.now() + withinMs;
    for (;;) {
      const v = await this.read(peer, service, epoch, end);
      if (v !== null && ready(v)) return v;
      if (this.deps.clock.now() + POLL_MS > until) return null;
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /** A peer's published window `epoch` (null: its load so far in the window ending at `end`), checked; else null. */
  private async read(
    peer: PeerConfig,
    service: number,
    epoch: number | null,
    end: number,
  ): Promise<LoadEpochView | null> {
    const url = `${peer.api}/api/v1/services/${service}/load${epoch === null ? '' : `?epoch=${epoch}`}`;
    try {
      const res = await (this.deps.fetch ?? fetch)(url, {
        headers: { accept: 'application/json' },
        signal: AbortSignal.timeout(READ_TIMEOUT_MS),
        redirect: 'error',
      });
      if (!res.ok) return null;
      return loadEpochOf(JSON.parse(await readCapped(res, MAX_ANSWER_BYTES, url)), service, end);
    } catch {
      return null;
    }
  }
}

/** A peer's answer checked: its window, 256 loads (or null) and a digest (or null); else null. */
export function loadEpochOf(v: unknown, service: number, end: number): LoadEpochView | null {
  if (v === null || typeof v !== 'object') return null;
  const o = v as Record<string, unknown>;
  const count = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x >= 0;
  const load = o.load;
  if (o.service !== service || o.windowEnd !== end || !count(o.connections) || typeof o.epoch !== 'number') return null;
  if (load !== null && !(Array.isArray(load) && load.length === BUCKET_COUNT && load.every(count))) return null;
  if (o.digest !== null && typeof o.digest !== 'string') return null;
  const memory = o.memory === undefined || o.memory === null ? null : loadMemoryOf(o.memory);
  if (memory === undefined) return null;
  return {
    service,
    epoch: o.epoch,
    windowEnd: end,
    load: load as number[] | null,
    connections: o.connections,
    digest: o.digest as string | null,
    memory,
  };
}

/**
 * The most a peer's memory lists: a hold and a pin per bucket, an offset per engine, and a budget entry per window of
 * the last hour (720 of the shortest window, 5 s); all of it with the loads well within the 64 KiB read.
 */
const MAX_SPENT = 720;
const MAX_ADDRESS = 64;

/** A peer's kept holds, budget and bias checked (bounded counts, buckets, finite times); undefined when malformed. */
export function loadMemoryOf(v: unknown): LoadMemory | undefined {
  if (v === null || typeof v !== 'object') return undefined;
  const o = v as Record<string, unknown>;
  const bucket = (x: unknown): x is number => Number.isInteger(x) && (x as number) >= 0 && (x as number) < BUCKET_COUNT;
  const time = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);
  const address = (x: unknown): x is string => typeof x === 'string' && x.length > 0 && x.length <= MAX_ADDRESS;
  const count = (x: unknown): x is number => Number.isInteger(x) && Math.abs(x as number) <= BUCKET_COUNT;
  const pairs = <A, B>(x: unknown, max: number, a: (y: unknown) => y is A, b: (y: unknown) => y is B) =>
    Array.isArray(x) && x.length <= max && x.every((p) => Array.isArray(p) && p.length === 2 && a(p[0]) && b(p[1]))
      ? (x as [A, B][]).map(([p, q]) => [p, q] as const)
      : undefined;
  const holds = pairs(o.holds, BUCKET_COUNT, bucket, time);
  const spent = pairs(o.spent, MAX_SPENT, time, count);
  const offsets = pairs(o.offsets, MAX_ENGINES, address, count);
  const pins = pairs(o.pins, BUCKET_COUNT, bucket, address);
  if (holds === undefined || spent === undefined || offsets === undefined || pins === undefined) return undefined;
  return { holds, spent, offsets, pins };
}

function emptyMemory(m: LoadMemory): boolean {
  return m.holds.length === 0 && m.spent.length === 0 && m.offsets.length === 0 && m.pins.length === 0;
}

/** A window's load as published: its loads and connections (null: no load, only a baseline). */
function windowLoadOf(v: Pick<LoadEpochView, 'load' | 'connections'>): WindowLoad | null {
  return v.load === null ? null : { load: v.load, connections: v.connections };
}

/** The same on every gateway that decided the same: what was decided, the moves and the table after them. */
export function digestOf(outcome: LoadOutcome): string {
  const what =
    outcome.kind === 'decided'
      ? {
          kind: outcome.kind,
          end: outcome.windowEnd,
          moves: outcome.decision.moves.map((m) => [m.bucket, m.from, m.to]),
          after: outcome.table.buckets,
        }
      : { kind: outcome.kind };
  return createHash('sha256').update(JSON.stringify(what)).digest('hex').slice(0, 16);
}

const iso = (ms: number): string => new Date(ms).toISOString();
