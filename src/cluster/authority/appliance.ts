// authority: appliance. wccpd assigns the buckets itself (the default): each usable engine gets its weighted share by
// the configured mode (src/buckets/assign.ts), and a change moves only the buckets it must. A REDIRECT_ASSIGN is
// ignored: engines do not decide here.
import type { BucketTable } from '../../buckets/table.js';
import type { AssignFn, RedirectAssign, ServiceGroupConfig } from '../types.js';
import type { AssignmentAuthority, AssignmentInput, AssignVerdict, RedirectAssignContext } from './authority.js';

export class ApplianceAuthority implements AssignmentAuthority {
  readonly kind = 'appliance';
  readonly obeying = false;

  /** `config` is read at each assignment: a reload may change failbackHold. */
  constructor(
    private readonly config: () => Pick<ServiceGroupConfig, 'mode' | 'failbackHoldMs'>,
    private readonly assign: AssignFn,
  ) {}

  next(input: AssignmentInput): BucketTable {
    return this.preview(input);
  }

  /** The appliance keeps nothing between tables: next() is its preview. */
  preview({ previous, members, now, bias }: AssignmentInput): BucketTable {
    const { mode, failbackHoldMs } = this.config();
    return this.assign(previous, members, {
      mode,
      now,
      ...(failbackHoldMs !== undefined ? { failbackHoldMs } : {}),
      ...(bias !== undefined ? { bias } : {}),
    });
  }

  /** Ours: this router and the table's change number. */
  assignmentKey(routerAddress: string, table: BucketTable): { address: string; changeNumber: number } {
    return { address: routerAddress, changeNumber: table.changeNumber };
  }

  redirectAssign(ra: RedirectAssign, context: RedirectAssignContext): AssignVerdict {
    return {
      accepted: false,
      reason: `service ${context.serviceId} uses authority: appliance; REDIRECT_ASSIGN from ${ra.from} ignored`,
    };
  }
}
