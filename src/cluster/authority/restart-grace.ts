// Restart grace (docs/architecture.md, decision 8): after a restart the persisted table is kept, healed onto the
// engines back so far, until every engine that held buckets in it is back (then it stands exactly) or the grace time
// is over (then the authority assigns afresh). Without it the first engine back would take all 256 buckets and every
// cache would lose its hit rate. It stands in front of the configured authority, which takes over once it ends. A mask
// service's persisted values are kept the same way, for the same engines and time: a restart moves no traffic.
import { healSlots, healTable } from '../../buckets/heal.js';
import { sameMask } from '../../buckets/mask.js';
import type { MaskElement, MaskTable } from '../../buckets/mask.js';
import { BUCKET_COUNT, emptyTable, nextChangeNumber, nextTable } from '../../buckets/table.js';
import type { BucketTable, EngineAddress } from '../../buckets/table.js';
import type { AssignmentInput } from './authority.js';

export class RestartGrace {
  private constructor(
    /** The persisted table (its buckets are what memory() keeps persisting meanwhile). */
    readonly persisted: BucketTable,
    /** A mask service's persisted values (what memory() keeps persisting meanwhile), or null. */
    readonly persistedMask: MaskTable | null,
    private readonly holders: ReadonlySet<EngineAddress>,
    private end: number,
  ) {}

  /**
   * The grace for a persisted table (and a mask service's persisted values), or null when no engine held a bucket or
   * a value in them. It lasts until every holder of either is back.
   */
  static after(persisted: BucketTable, until: number, persistedMask: MaskTable | null = null): RestartGrace | null {
    const held = (e: EngineAddress | null): e is EngineAddress => e !== null;
    const holders = new Set([...persisted.buckets.filter(held), ...(persistedMask?.engines.filter(held) ?? [])]);
    if (holders.size === 0) return null;
    const buckets = persisted.buckets.length === BUCKET_COUNT ? [...persisted.buckets] : emptyTable().buckets;
    return new RestartGrace({ changeNumber: persisted.changeNumber, buckets }, persistedMask, holders, until);
  }

  /** When the grace time ends (clock ms). */
  get until(): number {
    return this.end;
  }

  /**
   * The holders not among `back` (sorted): engines that held buckets or values when wccpd stopped and have not been
   * heard since. Their connections from before the restart keep their route meanwhile (docs/operations.md, "Upgrade").
   */
  awaited(back: readonly EngineAddress[]): EngineAddress[] {
    const present = new Set(back);
    return [...this.holders].filter((e) => !present.has(e)).sort();
  }

  /** Starts the grace time again, to end at `until` (the router listens only now). */
  restart(until: number): void {
    this.end = until;
  }

  /**
   * The table while the grace lasts, and whether it is over with this table (every holder back: the persisted table
   * stands, even when timers.settle deferred this past the grace time); null once the time is over with holders
   * missing: the authority decides.
   */
  next({ previous, members, now }: AssignmentInput): { table: BucketTable; over: boolean } | null {
    const back = new Set(members.map((m) => m.address));
    const allBack = [...this.holders].every((e) => back.has(e));
    if (now >= this.end && !allBack) return null;
    const healed = healTable(this.persisted, [...back]);
    return { table: nextTable(previous, healed.buckets), over: allBack };
  }

  /**
   * While the grace lasts (next() gave a table): the persisted mask values healed onto the engines back, following
   * `previous` (its change number advances only when a value moved); null when none were persisted or the service
   * masks another field now (the persisted values would mean other traffic).
   */
  maskValues(previous: MaskTable, mask: MaskElement, back: readonly EngineAddress[]): MaskTable | null {
    const p = this.persistedMask;
    if (p === null || !sameMask(p.mask, mask)) return null;
    const engines = healSlots(p.engines, back);
    const same = sameMask(previous.mask, mask) && engines.every((e, i) => e === (previous.engines[i] ?? null));
    return same ? previous : { changeNumber: nextChangeNumber(previous.changeNumber), mask, engines };
  }
}
