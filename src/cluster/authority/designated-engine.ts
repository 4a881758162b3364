// authority: designated-engine. The designated engine (the lowest usable address in Squid's order) decides: its
// REDIRECT_ASSIGN is obeyed when it is valid (from it, keyed by it, newer than the last obeyed, naming this router with
// a Receive ID we sent it and our member change number). Between two, the obeyed table is healed at once
// (src/buckets/heal.ts): an engine that dies before the designated engine reassigns keeps no traffic. Until the first
// valid REDIRECT_ASSIGN, wccpd assigns as an appliance, so traffic is redirected from the start.
import { healTable } from '../../buckets/heal.js';
import { fromAssignmentBuckets, nextTable } from '../../buckets/table.js';
import type { BucketTable, EngineAddress } from '../../buckets/table.js';
import { designatedEngineOf } from '../squid-order.js';
import type { RedirectAssign } from '../types.js';
import type { AssignmentAuthority, AssignmentInput, AssignVerdict, RedirectAssignContext } from './authority.js';

export class DesignatedEngineAuthority implements AssignmentAuthority {
  readonly kind = 'designated-engine';
  /** The key of the last REDIRECT_ASSIGN obeyed, and the send order of the I_SEE_YOU whose Receive ID it named. */
  private obeyedKey: { address: EngineAddress; changeNumber: number; order: number } | null = null;
  /** The buckets of an obeyed REDIRECT_ASSIGN that the next table takes (it may wait for timers.settle). */
  private pendingObey: ReadonlyArray<EngineAddress | null> | null = null;

  /** `beforeFirst` decides until the designated engine's first valid REDIRECT_ASSIGN. */
  constructor(private readonly beforeFirst: AssignmentAuthority) {}

  get obeying(): boolean {
    return this.obeyedKey !== null;
  }

  next(input: AssignmentInput): BucketTable {
    if (this.obeyedKey === null) return this.beforeFirst.next(input);
    const table = this.preview(input);
    this.pendingObey = null;
    return table;
  }

  /** The obeyed table (the one waiting, else the one in force) healed onto the usable engines. */
  preview(input: AssignmentInput): BucketTable {
    if (this.obeyedKey === null) return this.beforeFirst.preview(input);
    const obeyed = this.pendingObey;
    const base = obeyed === null ? input.previous : nextTable(input.previous, obeyed);
    return healTable(
      base,
      input.members.map((m) => m.address),
    );
  }

  /** The designated engine's key once one was obeyed: the engines see whose table is in force. */
  assignmentKey(routerAddress: string, table: BucketTable): { address: string; changeNumber: number } {
    return this.obeyedKey !== null
      ? { address: this.obeyedKey.address, changeNumber: this.obeyedKey.changeNumber }
      : this.beforeFirst.assignmentKey(routerAddress, table);
  }

  redirectAssign(ra: RedirectAssign, context: RedirectAssignContext): AssignVerdict {
    const refuse = (reason: string): AssignVerdict => ({ accepted: false, reason });
    const designated = designatedEngineOf(context.usable);
    if (designated === null || ra.from !== designated)
      return refuse(`${ra.from} is not the designated engine (${designated ?? 'none usable'})`);
    if (ra.key.address !== designated)
      return refuse(`assignment key ${ra.key.address} is not the designated engine ${designated}`);
    const us = ra.routers.find((r) => r.routerId === context.routerAddress);
    if (!us) return refuse(`assignment does not list this router ${context.routerAddress}`);
    const order = context.receiveIdOrder(designated, us.receiveId);
    if (order === null) return refuse(`Receive ID ${us.receiveId} is not one we sent to ${designated}`);
    // Newer than the last obeyed: it names a later I_SEE_YOU of ours (an assignment cannot name one sent after it was
    // made), or the same one with a later key change number. A restarted engine counts its change numbers from 1
    // again and names our latest I_SEE_YOU; the key's change number wraps at 2^32 (RFC 1982 order).
    const last = this.obeyedKey;
    if (
      last !== null &&
      last.address === ra.key.address &&
      (order < last.order || (order === last.order && !serialNewer(ra.key.changeNumber, last.changeNumber)))
    )
      return refuse(
        `stale assignment key change number ${ra.key.changeNumber} (last obeyed ${last.changeNumber}; it names no later I_SEE_YOU of ours)`,
      );
    if (us.changeNumber !== context.memberChangeNumber)
      return refuse(`member change number ${us.changeNumber} is not ours (${context.memberChangeNumber})`);
    const assigned = fromAssignmentBuckets(ra, ra.key.changeNumber);
    if (!assigned.ok) return refuse(assigned.detail);
    this.obeyedKey = { address: ra.key.address, changeNumber: ra.key.changeNumber, order };
    this.pendingObey = [...assigned.table.buckets];
    return { accepted: true };
  }
}

/** `a` comes after `b` in 32-bit serial number order (RFC 1982): 0 follows 4,294,967,295. */
function serialNewer(a: number, b: number): boolean {
  const d = (a - b) >>> 0;
  return d !== 0 && d < 0x80000000;
}
