// Parked slots of the nft backend (docs/dataplane/nft.md, "Parked slots"): a slot released by a change keeps its ip
// rule, route and chains (and an IPv6 service's slot its IPv6 twins), not live, so its key's return costs no `ip`
// process and no record write. A timer removes
// them when they expire (through the backend's queue); the apply path evicts the oldest beyond the bound.
import type { Log } from '../../log.js';
import { NO_ROUTE_CHANGE, changeRoutes } from '../kernel/routes.js';
import { changeRoutes6 } from '../kernel/routes6.js';
import type { SlotBook } from './book.js';
import type { NftCommands } from './commands.js';
import type { SetTimer } from './options.js';
import { releaseSlotLines } from './ruleset.js';

export interface ParkingOptions {
  readonly book: SlotBook;
  readonly io: NftCommands;
  readonly now: () => number;
  readonly setTimer: SetTimer;
  /** Runs a job in the backend's queue. */
  readonly serial: (job: () => Promise<void>) => Promise<void>;
  readonly started: () => boolean;
  readonly log: Log | undefined;
}

export class Parking {
  private timer: { cancel(): void } | null = null;

  constructor(private readonly o: ParkingOptions) {}

  cancel(): void {
    this.timer?.cancel();
    this.timer = null;
  }

  /** Wakes up when the first parked slot expires, and removes what has (through the queue). */
  schedule(): void {
    const b = this.o.book;
    this.cancel();
    if (b.parked.size === 0) return;
    const first = Math.min(...[...b.parked.values()].map((p) => p.until));
    this.timer = this.o.setTimer(
      () => {
        this.timer = null;
        this.o
          .serial(() => this.expire())
          .catch((e: unknown) =>
            this.o.log?.warn({ err: (e as Error).message }, `nft data plane: removing expired parked slots failed`),
          );
      },
      Math.max(0, first - this.o.now()),
    );
  }

  /**
   * Removes the parked slots that expired: their chains (one small transaction), then their IPv6 rule and route (an
   * `ip -6` batch, where they have them), then their rule and route.
   */
  private async expire(): Promise<void> {
    const b = this.o.book;
    if (!this.o.started()) return;
    const evicted = b.evictable(b.parked, this.o.now());
    if (evicted.length === 0) {
      this.schedule();
      return;
    }
    const parked = new Map(b.parked);
    for (const slot of evicted) parked.delete(slot);
    const { tunnels, gone } = b.placeTunnels([...b.slots.keys(), ...[...parked.values()].map((p) => p.key)]);
    const chains = evicted.filter((slot) => b.chains.has(slot));
    try {
      if (chains.length > 0) {
        await this.o.io.transact(`${releaseSlotLines(chains, this.o.book.slots6).join('\n')}\n`);
        for (const slot of chains) {
          b.chains.delete(slot);
          b.slots6.delete(slot);
        }
      }
      const gone6 = evicted.filter((slot) => b.routed6.has(slot));
      if (gone6.length > 0) {
        const dropGuard6 = b.guarded6 && [...b.routed6.keys()].every((slot) => gone6.includes(slot));
        await changeRoutes6(this.o.io.exec, this.o.io.record, {
          create: [],
          retarget: [],
          remove: gone6,
          addGuard: false,
          removeGuard: dropGuard6,
        });
        for (const slot of gone6) b.routed6.delete(slot);
        if (dropGuard6) b.guarded6 = false;
      }
      const routedAfter = [...b.routed.keys()].filter((slot) => !evicted.includes(slot));
      const dropGuard = b.guarded && routedAfter.length === 0;
      await changeRoutes(
        this.o.io.exec,
        this.o.io.record,
        {
          ...NO_ROUTE_CHANGE,
          remove: evicted.filter((slot) => b.routed.has(slot)),
          removeDevices: gone,
          removeGuard: dropGuard,
        },
        this.o.io.batch,
      );
      for (const slot of evicted) b.routed.delete(slot);
      if (dropGuard) b.guarded = false;
      b.tunnels = tunnels;
      b.parked = parked;
    } catch (e) {
      // Tried again later, not at once (the timer would fire straight away).
      for (const slot of evicted) {
        const p = b.parked.get(slot);
        if (p !== undefined) b.parked.set(slot, { key: p.key, until: this.o.now() + Math.max(b.parkMs, 1000) });
      }
      throw e;
    } finally {
      this.schedule();
    }
  }
}
