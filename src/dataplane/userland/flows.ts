// The userland flow table: a connection keeps the engine (or the direct path) it was given until it ends (RST, or a
// FIN followed by a short linger for the last ACKs), goes idle, or its engine leaves the group. Bounded: when full,
// the oldest flow is forgotten. Time comes from an injected clock.
import type { EngineAddress } from '../../buckets/table.js';

export interface FlowEntry {
  /** null = the flow goes direct (its bucket had no engine when it started). */
  readonly engine: EngineAddress | null;
  /** The primary bucket of the flow's first packet. */
  readonly bucket: number;
  /** The alternate bucket, when the primary bucket's A flag sent the flow there. */
  readonly altBucket: number | null;
  lastSeen: number;
  /** Set when a FIN was seen: the flow ends `finLingerMs` later. */
  finAt: number | null;
}

export interface FlowTableOptions {
  readonly now: () => number;
  /** A flow with no packet for this long is forgotten. Default 600 s. */
  readonly idleTimeoutMs?: number;
  /** After a FIN, the flow is kept this long for the closing handshake. Default 10 s. */
  readonly finLingerMs?: number;
  /** Default 262,144 flows. */
  readonly maxFlows?: number;
}

export const flowKey = (protocol: number, src: string, sport: number, dst: string, dport: number): string =>
  `${protocol}/${src}:${sport}>${dst}:${dport}`;

export class FlowTable {
  private readonly flows = new Map<string, FlowEntry>();
  private readonly now: () => number;
  private readonly idleMs: number;
  private readonly lingerMs: number;
  private readonly max: number;

  constructor(options: FlowTableOptions) {
    this.now = options.now;
    this.idleMs = options.idleTimeoutMs ?? 600_000;
    this.lingerMs = options.finLingerMs ?? 10_000;
    this.max = options.maxFlows ?? 262_144;
  }

  get size(): number {
    return this.flows.size;
  }

  /** The live entry for a key, refreshed; undefined when absent or expired. */
  touch(key: string): FlowEntry | undefined {
    const e = this.flows.get(key);
    if (e === undefined) return undefined;
    const t = this.now();
    if (this.expired(e, t)) {
      this.flows.delete(key);
      return undefined;
    }
    e.lastSeen = t;
    return e;
  }

  /** True when a live entry exists for the key; unlike touch(), nothing is refreshed. */
  has(key: string): boolean {
    const e = this.flows.get(key);
    return e !== undefined && !this.expired(e, this.now());
  }

  start(key: string, engine: EngineAddress | null, bucket: number, altBucket: number | null = null): FlowEntry {
    this.flows.delete(key);
    if (this.flows.size >= this.max) {
      const oldest = this.flows.keys().next();
      if (oldest.done !== true) this.flows.delete(oldest.value);
    }
    const e: FlowEntry = { engine, bucket, altBucket, lastSeen: this.now(), finAt: null };
    this.flows.set(key, e);
    return e;
  }

  finSeen(key: string): void {
    const e = this.flows.get(key);
    if (e !== undefined && e.finAt === null) e.finAt = this.now();
  }

  end(key: string): void {
    this.flows.delete(key);
  }

  /** Forgets every flow on an engine that is no longer usable. */
  dropEngines(keep: ReadonlySet<EngineAddress>): number {
    let n = 0;
    for (const [k, e] of this.flows) {
      if (e.engine !== null && !keep.has(e.engine)) {
        this.flows.delete(k);
        n++;
      }
    }
    return n;
  }

  /** Forgets ended and idle flows; returns how many. */
  sweep(): number {
    const t = this.now();
    let n = 0;
    for (const [k, e] of this.flows) {
      if (this.expired(e, t)) {
        this.flows.delete(k);
        n++;
      }
    }
    return n;
  }

  clear(): void {
    this.flows.clear();
  }

  private expired(e: FlowEntry, t: number): boolean {
    return t - e.lastSeen >= this.idleMs || (e.finAt !== null && t - e.finAt >= this.lingerMs);
  }
}
