// The moved buckets of the ingress backend's recordsMovedOnly services (docs/dataplane/ingress.md, "Recorded only where
// a bucket moved"): which claim each held before its move and until when, the timer that writes a service again when
// its first move ends, and the admin's view of them.
import type { EngineAddress } from '../../buckets/table.js';
import type { RateLimitedLog } from '../../rate-limited-log.js';
import type { MovedBucket } from '../redirector.js';
import { CLAIM_GONE, CLAIM_REFUSED, CLAIM_UNASSIGNED } from './names.js';
import type { IngressSlot } from './service-objects.js';

/** A bucket that moved: its claim before the move (a slot, or CLAIM_*), kept until `until` (flows.idle after). */
export interface BucketMove {
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
export const oldClaims = (moves: ReadonlyMap<number, BucketMove>): Map<number, number> =>
  new Map([...moves].map(([b, m]) => [b, m.old]));

/** A plan's claim of each bucket: its slot, or CLAIM_UNASSIGNED / CLAIM_REFUSED. */
export const claimsOf = (p: { readonly bucketSlots: readonly number[]; readonly refuse: boolean }): number[] =>
  p.bucketSlots.map((slot) => (slot !== 0 ? slot : p.refuse ? CLAIM_REFUSED : CLAIM_UNASSIGNED));

/**
 * Per recordsMovedOnly service, the moves in force, by bucket, each claim before named by its engine (a live slot's;
 * a slot no longer live: an engine gone).
 */
export function movesView(
  moves: ReadonlyMap<number, ReadonlyMap<number, BucketMove>>,
  targets: ReadonlyMap<number, IngressSlot>,
  at: number,
): Map<number, MovedBucket[]> {
  const claimBefore = (old: number): Pick<MovedBucket, 'before' | 'engineBefore'> => {
    if (old === CLAIM_UNASSIGNED) return { before: 'unassigned', engineBefore: null };
    if (old === CLAIM_REFUSED) return { before: 'refused', engineBefore: null };
    const engine: EngineAddress | undefined = old === CLAIM_GONE ? undefined : targets.get(old)?.engine;
    return engine !== undefined ? { before: 'engine', engineBefore: engine } : { before: 'gone', engineBefore: null };
  };
  const out = new Map<number, MovedBucket[]>();
  for (const [id, m] of moves) {
    const list = [...m]
      .sort(([a], [b]) => a - b)
      .map(([bucket, x]): MovedBucket => ({ bucket, ...claimBefore(x.old), endsInMs: x.until - at }));
    out.set(id, list);
  }
  return out;
}

/**
 * At the first move's end, its service is written again (that bucket steady, unrecorded); not before `leastMs` (a
 * write that failed is tried again 10 s later, not at once).
 */
export class MovesTimer {
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly o: {
      /** The moves in force. */
      readonly moves: () => ReadonlyMap<number, ReadonlyMap<number, BucketMove>>;
      readonly now: () => number;
      readonly started: () => boolean;
      readonly expire: () => Promise<void>;
      readonly log: RateLimitedLog | null;
    },
  ) {}

  schedule(leastMs = 0): void {
    this.clear();
    let first = Infinity;
    for (const m of this.o.moves().values()) for (const x of m.values()) first = Math.min(first, x.until);
    if (first === Infinity || !this.o.started()) return;
    const wait = Math.max(leastMs, first - this.o.now() + 100);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.o.expire().catch((e: Error) => {
        this.o.log?.warn(
          'ingress',
          'moves',
          { error: e.message },
          `ingress data plane: the buckets whose move ended are not steady yet (tried again in 10 s): ${e.message}`,
        );
        this.schedule(10_000);
      });
    }, wait);
    this.timer.unref();
  }

  clear(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}
