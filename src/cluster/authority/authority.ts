// Assignment authority: who decides a service group's bucket table (docs/architecture.md, decision 1). The group keeps
// what its engines are (membership, Receive ID, health) and the mask values of a mask service (they follow the usable
// engines whoever decides the buckets); an authority only turns the usable engines into the next bucket table. One
// strategy per file, behind this one interface, so the group never asks which authority it runs:
//
//   appliance.ts          wccpd assigns: each engine its weighted share, a change moves only what it must
//   designated-engine.ts  the designated engine's valid REDIRECT_ASSIGN is obeyed, healed until the next one
//   restart-grace.ts      after a restart, the persisted table is kept until its holders are back (in front of either)
import type { BucketTable, EngineAddress } from '../../buckets/table.js';
import type { Authority } from '../../vocabulary.js';
import type { Member } from '../../buckets/member.js';
import type { LoadBias } from '../../buckets/load.js';
import type { RedirectAssign } from '../types.js';

export type AssignVerdict = { readonly accepted: true } | { readonly accepted: false; readonly reason: string };

/** What a table is decided from. */
export interface AssignmentInput {
  readonly previous: BucketTable;
  /** The usable engines, in Squid's order, with what wccpd's own assignment weighs. */
  readonly members: readonly Member[];
  /** The group's clock (ms). */
  readonly now: number;
  /** Load-aware assignment: what keeps its moves (buckets/load.ts); absent without it. */
  readonly bias?: LoadBias;
}

/** What the group knows that a REDIRECT_ASSIGN is checked against. */
export interface RedirectAssignContext {
  readonly serviceId: number;
  readonly routerAddress: string;
  /** Usable engines, in Squid's order. */
  readonly usable: readonly EngineAddress[];
  readonly memberChangeNumber: number;
  /**
   * If `receiveId` is one our I_SEE_YOUs to `engine` carried that it may still echo: that I_SEE_YOU's place in the
   * send order (later ones are larger; it never wraps); else null.
   */
  receiveIdOrder(engine: EngineAddress, receiveId: number): number | null;
}

export interface AssignmentAuthority {
  readonly kind: Authority;
  /**
   * An engine's table is in force (a REDIRECT_ASSIGN was obeyed): a persisted table kept through the restart grace
   * time gives way to it.
   */
  readonly obeying: boolean;
  /** The next table; `previous` itself when nothing changes. */
  next(input: AssignmentInput): BucketTable;
  /** The table next() would give for `input`, changing nothing (`wccpctl plan`). */
  preview(input: AssignmentInput): BucketTable;
  /** The Assignment Key our I_SEE_YOUs carry for `table`. */
  assignmentKey(routerAddress: string, table: BucketTable): { readonly address: string; readonly changeNumber: number };
  /** A decoded REDIRECT_ASSIGN for this group; when accepted, the next `next()` takes its table. */
  redirectAssign(ra: RedirectAssign, context: RedirectAssignContext): AssignVerdict;
}
