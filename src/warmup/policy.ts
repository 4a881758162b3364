// The warm-up policy: which bucket came to which engine when, and from whom; whether a newcomer's ICP query for a
// bucket is worth asking a peer about, and when the newcomer's warm-up ends. Pure: fed with service snapshots and
// query outcomes, time from an injected clock; no sockets, no timers (docs/warmup.md).
//
// A bucket is "gained" when it moves to an engine from another engine that held it before (its previous owner). A
// sticky return (the engine held that bucket itself within `stickyMs`), a first assignment (no previous owner: the
// group just formed, or wccpd just started) and a bucket its previous owner held less than `minSourceHoldMs` (the
// engines of a starting farm registering one after the other) gain nothing: there is no one warmer to ask. Gaining a
// bucket starts
// the engine's warm-up session, or joins the running one; the session ends at the first of: `durationMs` after it
// started, `maxPeerHits` peer hits, a peer-hit ratio below `minHitRatio` over the last `window` asked queries.
// After that the engine's queries get MISS at once, until it gains buckets again (a new session).
import { BUCKET_COUNT } from '../buckets/table.js';
import type { EngineAddress } from '../buckets/table.js';
import type { Clock, EngineState, ServiceSnapshot } from '../cluster/types.js';
import { earliestDue } from '../cluster/due.js';
import { answers } from '../cluster/engine-state.js';
import { formatDuration } from '../duration.js';

export type WarmSource = 'previous-owner' | 'all-engines';
export const WARM_SOURCES: readonly WarmSource[] = ['previous-owner', 'all-engines'];

export interface WarmupSettings {
  readonly enabled: boolean;
  /** How long a session lasts at most, from its start. */
  readonly durationMs: number;
  /** Peer hits that end a session. */
  readonly maxPeerHits: number;
  /** A session ends when its peer-hit ratio over the last `window` asked queries falls below this (0..1). */
  readonly minHitRatio: number;
  readonly window: number;
  /** How long the broker waits for a source's ICP reply before answering MISS. */
  readonly peerTimeoutMs: number;
  readonly source: WarmSource;
  /** A bucket that returns to an engine that held it within this long is a sticky return: no warm-up. */
  readonly stickyMs: number;
  /** A bucket its previous owner held less than this long is no gain: that engine's cache has little of it. */
  readonly minSourceHoldMs: number;
}

export const DEFAULT_WARMUP: WarmupSettings = {
  enabled: true,
  durationMs: 600_000,
  maxPeerHits: 100_000,
  minHitRatio: 0.05,
  window: 200,
  peerTimeoutMs: 100,
  source: 'previous-owner',
  stickyMs: 600_000,
  minSourceHoldMs: 60_000,
};

export type WarmupEndReason = 'duration' | 'max-peer-hits' | 'min-hit-ratio';

/** Why a query is answered MISS at once, without asking anyone. */
export type MissReason =
  'disabled' | 'not-warming' | 'warm-up-ended' | 'not-its-bucket' | 'bucket-not-gained' | 'no-live-source';

export type Decision = { readonly ask: readonly EngineAddress[] } | { readonly miss: MissReason };

export interface WarmupView {
  readonly engine: EngineAddress;
  /** True while the session runs. */
  readonly warming: boolean;
  readonly startedAt: number;
  /** Queries asked of a source in this session, and how many a source answered HIT. */
  readonly queries: number;
  readonly peerHits: number;
  /** peerHits / queries, null before the first query. */
  readonly ratio: number | null;
  /** Peer-hit ratio over the last `window` queries, null before the first. */
  readonly windowRatio: number | null;
  /** ms until the duration ends the session (0 once ended). */
  readonly timeLeftMs: number;
  readonly endedAt: number | null;
  readonly endReason: WarmupEndReason | null;
  /** Buckets this engine gained in the session (and still holds). */
  readonly buckets: number;
}

export interface WarmupEvent {
  readonly type: 'warmup';
  readonly service: number;
  readonly engine: EngineAddress;
  readonly to: 'warming' | 'warm';
  readonly reason: string;
  readonly at: number;
  readonly queries: number;
  readonly peerHits: number;
}

/**
 * What survives a restart of wccpd, per service: the running (and ended) warm-up sessions with the time each had
 * run when saved, and the buckets gained in them (owner, previous owner). Restored, a session keeps the time it had
 * left (wccpd's downtime does not count: while it is down nothing is redirected, so the newcomer warmed nothing).
 */
export interface WarmupMemory {
  readonly sessions: readonly {
    readonly engine: EngineAddress;
    /** How long it had run when saved (ms). */
    readonly elapsedMs: number;
    readonly queries: number;
    readonly peerHits: number;
    readonly endReason: WarmupEndReason | null;
  }[];
  /** [bucket, owner, previous owner, ms since it was gained]. */
  readonly gained: readonly (readonly [number, EngineAddress, EngineAddress, number])[];
}

interface Session {
  readonly startedAt: number;
  queries: number;
  peerHits: number;
  /** The outcomes of the last `window` queries (true = peer hit), as a ring. */
  readonly ring: boolean[];
  ringAt: number;
  ringHits: number;
  endedAt: number | null;
  endReason: WarmupEndReason | null;
}

/** One service group's buckets and warm-up sessions. */
class ServiceWarmup {
  private readonly owner: (EngineAddress | null)[] = new Array<EngineAddress | null>(BUCKET_COUNT).fill(null);
  /** The bucket's owner before the current one (the last non-null one). */
  private readonly previous: (EngineAddress | null)[] = new Array<EngineAddress | null>(BUCKET_COUNT).fill(null);
  /** When the bucket came to its current owner (-Infinity: it held it before a restart of wccpd, for how long unknown).
   * */
  private readonly since: number[] = new Array<number>(BUCKET_COUNT).fill(0);
  /** How long the previous owner held the bucket, until it moved away (ms). */
  private readonly previousHeldMs: number[] = new Array<number>(BUCKET_COUNT).fill(0);
  /** When the bucket came to its current owner as a gain (warm-up applies), else null. */
  private readonly gainedAt: (number | null)[] = new Array<number | null>(BUCKET_COUNT).fill(null);
  /** Per bucket, each former owner and when it last held the bucket (for sticky returns). At most 32 engines. */
  private readonly heldUntil: Map<EngineAddress, number>[] = Array.from({ length: BUCKET_COUNT }, () => new Map());
  private readonly states = new Map<EngineAddress, EngineState>();
  /** Sources that failed hard (refused, unreachable) since their last state change: never asked again until then. */
  private readonly failed = new Set<EngineAddress>();
  private readonly sessions = new Map<EngineAddress, Session>();
  /** Restored sessions, waiting for their engine to be heard again after a restart. */
  private readonly restoredSessions = new Map<EngineAddress, Session>();
  /** Restored gained buckets, waiting for their owner to get them back (bucket -> owner, previous, gainedAt). */
  private readonly restoredGains = new Map<
    number,
    { owner: EngineAddress; previous: EngineAddress; gainedAt: number }
  >();
  /** After a restart, each bucket's persisted owner until it has it back (within stickyMs of the restore). */
  private readonly restoredOwners = new Map<number, EngineAddress>();
  private restoredAt = -Infinity;
  /** The service's hash flags and ports as last seen (null while a dynamic service waits for its definition). */
  definition: { readonly flags: number; readonly protocol: number; readonly ports: readonly number[] } | null = null;

  constructor(
    readonly id: number,
    /** The config's, then a reload's (WarmupPolicy.setSettings): read at each decision. */
    public settings: WarmupSettings,
    private readonly clock: Clock,
    private readonly emit: (e: WarmupEvent) => void,
  ) {}

  observe(snap: ServiceSnapshot): void {
    const now = this.clock.now();
    this.definition = snap.definition;
    const seen = new Set<EngineAddress>();
    for (const e of snap.engines) {
      seen.add(e.address);
      if (this.states.get(e.address) !== e.state) this.failed.delete(e.address);
      this.states.set(e.address, e.state);
    }
    for (const [a, r] of [...this.restoredSessions]) {
      const over = r.endedAt === null && now - r.startedAt >= this.settings.durationMs;
      if (seen.has(a) && !this.sessions.has(a) && !over) this.sessions.set(a, r);
      if (seen.has(a) || over) this.restoredSessions.delete(a);
    }
    for (const [i, g] of [...this.restoredGains])
      if (now - g.gainedAt >= this.settings.durationMs) this.restoredGains.delete(i);
    if (now - this.restoredAt > this.settings.stickyMs) this.restoredOwners.clear();
    for (const a of [...this.states.keys()]) {
      if (seen.has(a)) continue;
      this.states.delete(a);
      this.failed.delete(a);
      this.sessions.delete(a);
    }
    for (let i = 0; i < BUCKET_COUNT; i++) {
      const next = snap.buckets[i] ?? null;
      const was = this.owner[i] ?? null;
      if (next === was) continue;
      const held = this.heldUntil[i] as Map<EngineAddress, number>;
      if (was !== null) {
        held.set(was, now);
        this.previous[i] = was;
        this.previousHeldMs[i] = now - (this.since[i] ?? now);
      }
      this.owner[i] = next;
      this.since[i] = now;
      this.gainedAt[i] = null;
      if (next === null) continue;
      // After a restart the cluster heals the persisted table onto the engines heard so far, until the others are
      // back: a bucket away from its persisted owner meanwhile is on loan, not gained.
      const persistedOwner = this.restoredOwners.get(i);
      if (persistedOwner !== undefined) {
        if (persistedOwner !== next) continue;
        this.restoredOwners.delete(i);
        this.since[i] = -Infinity;
      }
      const restored = this.restoredGains.get(i);
      if (restored !== undefined) {
        this.restoredGains.delete(i);
        // The bucket is back with the engine that had gained it before the restart: it is still a gained bucket.
        if (restored.owner === next) {
          this.previous[i] = restored.previous;
          this.gainedAt[i] = restored.gainedAt;
          this.since[i] = restored.gainedAt;
          held.delete(next);
          continue;
        }
      }
      const heldAt = held.get(next);
      held.delete(next);
      const sticky = heldAt !== undefined && now - heldAt <= this.settings.stickyMs;
      const from = this.previous[i] ?? null;
      if (sticky || from === null || from === next) continue;
      // A previous owner that held the bucket only briefly (a farm starting: each engine that registers takes its
      // share from those heard a moment before) has next to nothing of it: asking it would only delay every miss.
      if ((this.previousHeldMs[i] ?? 0) < this.settings.minSourceHoldMs) continue;
      // With previous-owner, a bucket whose previous owner is already dead (it died; that is why it moved) has no
      // one to warm from: no session for it.
      if (this.settings.source === 'previous-owner' && !this.live(from)) continue;
      this.gainedAt[i] = now;
      this.startSession(next, now);
    }
    for (const [i, held] of this.heldUntil.entries()) {
      for (const [a, at] of held) if (now - at > this.settings.stickyMs) this.heldUntil[i]?.delete(a);
    }
  }

  private startSession(engine: EngineAddress, now: number): void {
    const s = this.sessions.get(engine);
    if (s !== undefined && s.endedAt === null) return;
    this.sessions.set(engine, {
      startedAt: now,
      queries: 0,
      peerHits: 0,
      ring: [],
      ringAt: 0,
      ringHits: 0,
      endedAt: null,
      endReason: null,
    });
    this.emit({
      type: 'warmup',
      service: this.id,
      engine,
      to: 'warming',
      reason: 'gained buckets from their previous owner',
      at: now,
      queries: 0,
      peerHits: 0,
    });
  }

  private end(engine: EngineAddress, s: Session, reason: WarmupEndReason, at: number): void {
    s.endedAt = at;
    s.endReason = reason;
    const words: Record<WarmupEndReason, string> = {
      duration: `warm-up duration ${formatDuration(this.settings.durationMs)} reached`,
      'max-peer-hits': `${s.peerHits} peer hits reached maxPeerHits ${this.settings.maxPeerHits}`,
      'min-hit-ratio': `peer-hit ratio over the last ${this.settings.window} queries fell below ${this.settings.minHitRatio}`,
    };
    this.emit({
      type: 'warmup',
      service: this.id,
      engine,
      to: 'warm',
      reason: words[reason],
      at,
      queries: s.queries,
      peerHits: s.peerHits,
    });
  }

  /** Ends sessions whose duration is over; the clock moved. */
  private expire(engine: EngineAddress, s: Session, now: number): void {
    if (s.endedAt === null && now - s.startedAt >= this.settings.durationMs)
      this.end(engine, s, 'duration', s.startedAt + this.settings.durationMs);
  }

  private live(a: EngineAddress): boolean {
    const st = this.states.get(a);
    return st !== undefined && answers(st) && !this.failed.has(a);
  }

  notWarming(engine: EngineAddress): MissReason | null {
    if (!this.settings.enabled) return 'disabled';
    const s = this.sessions.get(engine);
    if (s === undefined) return 'not-warming';
    this.expire(engine, s, this.clock.now());
    return s.endedAt !== null ? 'warm-up-ended' : null;
  }

  decide(engine: EngineAddress, bucket: number): Decision {
    const why = this.notWarming(engine);
    if (why !== null) return { miss: why };
    if (this.owner[bucket] !== engine) return { miss: 'not-its-bucket' };
    if (this.gainedAt[bucket] === null) return { miss: 'bucket-not-gained' };
    let sources: EngineAddress[];
    if (this.settings.source === 'previous-owner') {
      const p = this.previous[bucket];
      sources = p !== null && p !== undefined && p !== engine && this.live(p) ? [p] : [];
    } else {
      sources = [...this.states.keys()]
        .filter((a) => a !== engine && this.states.get(a) === 'usable' && !this.failed.has(a))
        .sort();
    }
    return sources.length === 0 ? { miss: 'no-live-source' } : { ask: sources };
  }

  record(engine: EngineAddress, peerHit: boolean): void {
    const s = this.sessions.get(engine);
    if (s === undefined || s.endedAt !== null) return;
    const now = this.clock.now();
    s.queries++;
    if (peerHit) s.peerHits++;
    const w = this.settings.window;
    if (s.ring.length < w) s.ring.push(peerHit);
    else {
      if (s.ring[s.ringAt]) s.ringHits--;
      s.ring[s.ringAt] = peerHit;
      s.ringAt = (s.ringAt + 1) % w;
    }
    if (peerHit) s.ringHits++;
    this.expire(engine, s, now);
    if (s.endedAt !== null) return;
    if (s.peerHits >= this.settings.maxPeerHits) this.end(engine, s, 'max-peer-hits', now);
    else if (s.ring.length >= w && s.ringHits / w < this.settings.minHitRatio)
      this.end(engine, s, 'min-hit-ratio', now);
  }

  sourceFailed(engine: EngineAddress): void {
    if (this.states.has(engine)) this.failed.add(engine);
  }

  /** A member: an engine of this service group in any state (joining, usable, draining, suspect). */
  isMember(engine: EngineAddress): boolean {
    return this.states.has(engine);
  }

  view(engine: EngineAddress): WarmupView | null {
    const s = this.sessions.get(engine);
    if (s === undefined) return null;
    const now = this.clock.now();
    this.expire(engine, s, now);
    let buckets = 0;
    for (let i = 0; i < BUCKET_COUNT; i++) if (this.owner[i] === engine && this.gainedAt[i] !== null) buckets++;
    return {
      engine,
      warming: s.endedAt === null,
      startedAt: s.startedAt,
      queries: s.queries,
      peerHits: s.peerHits,
      ratio: s.queries === 0 ? null : s.peerHits / s.queries,
      windowRatio: s.ring.length === 0 ? null : s.ringHits / s.ring.length,
      timeLeftMs: s.endedAt !== null ? 0 : Math.max(0, s.startedAt + this.settings.durationMs - now),
      endedAt: s.endedAt,
      endReason: s.endReason,
      buckets,
    };
  }

  memory(): WarmupMemory {
    const now = this.clock.now();
    const sessions: WarmupMemory['sessions'][number][] = [];
    for (const [engine, s] of [...this.sessions, ...this.restoredSessions]) {
      this.expire(engine, s, now);
      sessions.push({
        engine,
        elapsedMs: (s.endedAt ?? now) - s.startedAt,
        queries: s.queries,
        peerHits: s.peerHits,
        endReason: s.endReason,
      });
    }
    const gained: [number, EngineAddress, EngineAddress, number][] = [];
    for (let i = 0; i < BUCKET_COUNT; i++) {
      const owner = this.owner[i];
      const previous = this.previous[i];
      const at = this.gainedAt[i];
      if (owner && previous && at !== null && at !== undefined) gained.push([i, owner, previous, now - at]);
    }
    for (const [i, g] of this.restoredGains) gained.push([i, g.owner, g.previous, now - g.gainedAt]);
    return { sessions, gained };
  }

  /**
   * Seeds the policy after a restart, before the first snapshot: `table` is the persisted bucket table (its owners
   * held their buckets until the restart, so getting them back is a sticky return, not a gain).
   */
  restore(memory: WarmupMemory, table: readonly (EngineAddress | null)[]): void {
    const now = this.clock.now();
    this.restoredAt = now;
    for (const [i, owner] of table.entries()) {
      if (owner === null || i >= BUCKET_COUNT) continue;
      this.heldUntil[i]?.set(owner, now);
      this.restoredOwners.set(i, owner);
    }
    for (const s of memory.sessions) {
      const startedAt = now - s.elapsedMs;
      this.restoredSessions.set(s.engine, {
        startedAt,
        queries: s.queries,
        peerHits: s.peerHits,
        ring: [],
        ringAt: 0,
        ringHits: 0,
        endedAt: s.endReason === null ? null : now,
        endReason: s.endReason,
      });
    }
    for (const [i, owner, previous, ageMs] of memory.gained) {
      if (i >= 0 && i < BUCKET_COUNT) this.restoredGains.set(i, { owner, previous, gainedAt: now - ageMs });
    }
  }

  /** Ends every session whose duration is over (so its event is emitted even without a query). */
  tick(): void {
    const now = this.clock.now();
    for (const [engine, s] of this.sessions) this.expire(engine, s, now);
  }

  warmingCount(): number {
    let n = 0;
    for (const s of this.sessions.values()) if (s.endedAt === null) n++;
    return n;
  }

  nextDue(): number | null {
    const running = [...this.sessions.values()].filter((s) => s.endedAt === null);
    return earliestDue(running.map((s) => s.startedAt + this.settings.durationMs));
  }

  /** The current owner of a bucket and where it came from (for tests and the broker's logs). */
  bucket(i: number): { owner: EngineAddress | null; previous: EngineAddress | null; gainedAt: number | null } {
    return { owner: this.owner[i] ?? null, previous: this.previous[i] ?? null, gainedAt: this.gainedAt[i] ?? null };
  }
}

/** The warm-up policy of every service group that has one. */
export class WarmupPolicy {
  private readonly services = new Map<number, ServiceWarmup>();
  private readonly listeners = new Set<(e: WarmupEvent) => void>();
  private readonly observers = new Set<() => void>();

  constructor(
    settings: ReadonlyMap<number, WarmupSettings>,
    private readonly clock: Clock,
  ) {
    this.setSettings(settings);
  }

  /**
   * Each service's settings: the config's, then a reload's. A service that is new starts with no warm-up, one no
   * longer listed is dropped with its warm-ups, the others read the new settings from their next decision on.
   */
  setSettings(settings: ReadonlyMap<number, WarmupSettings>): void {
    for (const id of [...this.services.keys()]) if (!settings.has(id)) this.services.delete(id);
    for (const [id, s] of settings) {
      const known = this.services.get(id);
      if (known !== undefined) known.settings = s;
      else
        this.services.set(
          id,
          new ServiceWarmup(id, s, this.clock, (e) => {
            for (const l of this.listeners) l(e);
          }),
        );
    }
  }

  onEvent(listener: (e: WarmupEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  settings(service: number): WarmupSettings | null {
    return this.services.get(service)?.settings ?? null;
  }

  /** Called after every observed snapshot (membership may have changed). */
  onObserve(listener: () => void): () => void {
    this.observers.add(listener);
    return () => this.observers.delete(listener);
  }

  /** A service's latest snapshot: engine states and the bucket table (call on every cluster event). */
  observe(snap: ServiceSnapshot): void {
    this.services.get(snap.id)?.observe(snap);
    for (const l of this.observers) l();
  }

  /**
   * Why every query of `engine` in `service` gets MISS at once whatever its bucket (not warming, warm-up ended,
   * disabled), or null while it warms. Asked before the bucket is known, so no name is looked up for a MISS.
   */
  notWarming(service: number, engine: EngineAddress): MissReason | null {
    const s = this.services.get(service);
    return s === undefined ? 'disabled' : s.notWarming(engine);
  }

  /** Whom to ask about a URL in `bucket` that `engine` queried, or why to answer MISS at once. */
  decide(service: number, engine: EngineAddress, bucket: number): Decision {
    return this.services.get(service)?.decide(engine, bucket) ?? { miss: 'disabled' };
  }

  /** The outcome of one asked query: whether a source answered HIT. */
  record(service: number, engine: EngineAddress, peerHit: boolean): void {
    this.services.get(service)?.record(engine, peerHit);
  }

  /** A source refused or could not be reached: stop asking it until its state changes. */
  sourceFailed(engine: EngineAddress): void {
    for (const s of this.services.values()) s.sourceFailed(engine);
  }

  /** The services `engine` is a member of, with their hash flags and ports (null: not defined yet). */
  memberOf(
    engine: EngineAddress,
  ): { readonly id: number; readonly enabled: boolean; readonly definition: ServiceWarmup['definition'] }[] {
    return [...this.services.values()]
      .filter((s) => s.isMember(engine))
      .map((s) => ({ id: s.id, enabled: s.settings.enabled, definition: s.definition }));
  }

  /** Per service, what a restart must not lose (see WarmupMemory). */
  memory(service: number): WarmupMemory | null {
    return this.services.get(service)?.memory() ?? null;
  }

  /** Seeds a service from a previous run's memory and its persisted table; call before the first observe. */
  restore(service: number, memory: WarmupMemory, table: readonly (EngineAddress | null)[]): void {
    this.services.get(service)?.restore(memory, table);
  }

  /** Engines warming now, in all services. */
  warmingCount(): number {
    let n = 0;
    for (const s of this.services.values()) n += s.warmingCount();
    return n;
  }

  view(service: number, engine: EngineAddress): WarmupView | null {
    return this.services.get(service)?.view(engine) ?? null;
  }

  bucket(
    service: number,
    i: number,
  ): { owner: EngineAddress | null; previous: EngineAddress | null; gainedAt: number | null } | null {
    return this.services.get(service)?.bucket(i) ?? null;
  }

  tick(): void {
    for (const s of this.services.values()) s.tick();
  }

  nextDue(): number | null {
    return earliestDue([...this.services.values()].map((s) => s.nextDue()));
  }
}
