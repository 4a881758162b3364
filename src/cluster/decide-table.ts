// How a service group's next tables are decided from what it knows: its usable engines (weight, priority, history),
// the table and mask values in force, the restart grace and the authority. Pure: the table keeper calls it for every
// table change, and `wccpctl plan` (plan.ts) calls it, through the keeper's preview, on a changed copy of the usable
// engines, so a plan is the table the change makes, by the same code.
import type { Member } from '../buckets/member.js';
import type { BucketTable, EngineAddress } from '../buckets/table.js';
import { nextChangeNumber, nextTable } from '../buckets/table.js';
import { assignMask, emptyMaskTable, sameMask } from '../buckets/mask.js';
import type { MaskElement, MaskTable } from '../buckets/mask.js';
import type { AssignmentInput } from './authority/authority.js';
import type { RestartGrace } from './authority/restart-grace.js';
import type { ServiceGroupConfig } from './types.js';
import { loadMoves, withMoves } from '../buckets/load.js';
import type { LoadBias, LoadDecision, LoadOptions } from '../buckets/load.js';

/** A usable engine as the table sees it. */
export interface UsableEngine {
  readonly address: EngineAddress;
  /** Its weight in force (an admin's, the config's or its Assignment Weight). */
  readonly weight: number;
  readonly usableSince: number | null;
  /** Buckets its HERE_I_AM reported as historical. */
  readonly historical: readonly number[] | undefined;
}

/** What the next tables are decided from. */
export interface TableState {
  readonly previous: BucketTable;
  readonly previousMask: MaskTable;
  /** The usable engines, in Squid's order (healing breaks ties in this order). */
  readonly usable: readonly UsableEngine[];
  /** The buckets of engines that left (within historyWindow), for their return. */
  readonly remembered: ReadonlyMap<EngineAddress, readonly number[]>;
  /** The group's clock (ms). */
  readonly now: number;
  /** Load-aware assignment: what keeps its moves, for the engines still usable (load-aware.ts). */
  readonly bias?: LoadBias;
}

/** What decides them. */
export interface TableDeciders {
  readonly config: Pick<ServiceGroupConfig, 'assignment' | 'mode' | 'failbackHoldMs' | 'priorities'>;
  /** The mask Squid uses for the service's hash flags (mask services). */
  readonly mask: MaskElement;
  /** The restart grace in force, or null (none, or an engine's table is obeyed). */
  readonly grace: RestartGrace | null;
  /** The authority's next table (the group's commit, or a preview that changes nothing). */
  readonly decide: (input: AssignmentInput) => BucketTable;
}

export interface TableDecision {
  readonly table: BucketTable;
  readonly mask: MaskTable;
  readonly maskChanged: boolean;
  /** The usable engines the tables were decided for, in Squid's order. */
  readonly members: readonly Member[];
  /** The restart grace (if any) is over with this decision. */
  readonly graceOver: boolean;
}

/** The usable engines as members of the assignment: their remembered buckets (else their U block) as history. */
export function membersOf(state: TableState, config: Pick<ServiceGroupConfig, 'priorities'>): Member[] {
  return state.usable.map((r) => {
    const history = state.remembered.get(r.address) ?? r.historical;
    return {
      address: r.address,
      weight: r.weight,
      priority: config.priorities?.[r.address] ?? 0,
      ...(history ? { history } : {}),
      ...(r.usableSince !== null ? { usableSince: r.usableSince } : {}),
    };
  });
}

/** The next bucket table (and a mask service's values): the restart grace's while it lasts, else the authority's. */
export function decideTables(state: TableState, by: TableDeciders): TableDecision {
  const members = membersOf(state, by.config);
  const input: AssignmentInput = {
    previous: state.previous,
    members,
    now: state.now,
    ...(state.bias !== undefined ? { bias: state.bias } : {}),
  };
  const held = by.grace?.next(input) ?? null;
  const decided = held?.table ?? by.decide(input);
  const mask =
    by.config.assignment === 'mask'
      ? maskValues(state.previousMask, members, state.now, by, held !== null ? by.grace : null)
      : state.previousMask;
  const maskChanged = mask !== state.previousMask;
  // The Assignment Key's change number is the table's: a change of the mask values alone must advance it too, or an
  // engine that caches the assignment by its key keeps the old values.
  const table =
    maskChanged && decided.changeNumber === state.previous.changeNumber
      ? { changeNumber: nextChangeNumber(decided.changeNumber), buckets: decided.buckets }
      : decided;
  return { table, mask, maskChanged, members, graceOver: held === null || held.over };
}

/**
 * Load-aware moves on the table in force (buckets/load.ts): the moves a window's load calls for and the table they
 * give. The keeper makes them at a window's end; `wccpctl plan rebalance` previews them by the same call.
 */
export function decideLoad(
  previous: BucketTable,
  members: readonly Member[],
  load: readonly number[],
  options: LoadOptions,
): { readonly decision: LoadDecision; readonly table: BucketTable } {
  const decision = loadMoves(previous, members, load, options);
  return { decision, table: nextTable(previous, withMoves(previous.buckets, decision.moves)) };
}

/**
 * Mask services: the values follow the usable engines whichever way the bucket table was made (a persisted or an
 * obeyed bucket table says nothing about them), on the field Squid masks for the service's hash flags.
 */
function maskValues(
  before: MaskTable,
  members: readonly Member[],
  now: number,
  by: TableDeciders,
  grace: RestartGrace | null,
): MaskTable {
  const previous = sameMask(before.mask, by.mask) ? before : emptyMaskTable(by.mask, before.changeNumber);
  // After a restart the persisted values stand (healed) as long as the persisted buckets do.
  const kept =
    grace?.maskValues(
      previous,
      by.mask,
      members.map((m) => m.address),
    ) ?? null;
  // Mask values carry no history (the U Bucket Block names buckets).
  return (
    kept ??
    assignMask(
      previous,
      members.map(({ history: _h, ...m }) => m),
      {
        mode: by.config.mode,
        now,
        ...(by.config.failbackHoldMs !== undefined ? { failbackHoldMs: by.config.failbackHoldMs } : {}),
      },
    )
  );
}
