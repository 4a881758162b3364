// What an admin set on one service group's engines, over what they advertise: drains (kept until undrain, while the
// engine is gone too, and across restarts) and weights (kept while the engine is present and for historyWindow once
// it is gone). The group asks whether an engine is drained and what its weight is; both are persisted.
import { MAX_ENGINES } from '../buckets/table.js';
import type { EngineAddress } from '../buckets/table.js';
import { compareSquidOrder } from './squid-order.js';
import type { ServiceMemory } from './types.js';

/** The largest weight a command may set (the Assignment Weight field is 16 bits). */
export const MAX_WEIGHT = 0xffff;
/**
 * Admin weights of engines that are gone are remembered for historyWindow, and at most this many per group (the
 * longest gone forgotten first): engines that come and go for weeks cannot grow the memory or the state file.
 */
export const MAX_GONE_WEIGHTS = 2 * MAX_ENGINES;

/** Why `weight` is no weight a command may set, or null. */
export function badWeight(weight: number): string | null {
  return Number.isInteger(weight) && weight >= 0 && weight <= MAX_WEIGHT
    ? null
    : `weight must be an integer 0-${MAX_WEIGHT}, got ${weight}`;
}

export class AdminOverrides {
  /** Engines an admin drained: kept until undrain, while they are gone too. */
  private readonly drained = new Set<EngineAddress>();
  /** Weights an admin set; leftAt: when the engine left (kept for historyWindow from then), null while present. */
  private readonly weights = new Map<EngineAddress, { weight: number; leftAt: number | null }>();

  /** `historyWindowMs` is read each time: a config reload may change it. */
  constructor(private readonly historyWindowMs: () => number) {}

  isDrained(engine: EngineAddress): boolean {
    return this.drained.has(engine);
  }

  drain(engine: EngineAddress): void {
    this.drained.add(engine);
  }

  undrain(engine: EngineAddress): void {
    this.drained.delete(engine);
  }

  /** The drained engines `present` says are not there, in Squid's order. */
  drainedAbsent(present: (engine: EngineAddress) => boolean): EngineAddress[] {
    return [...this.drained].filter((a) => !present(a)).sort(compareSquidOrder);
  }

  hasWeight(engine: EngineAddress): boolean {
    return this.weights.has(engine);
  }

  /** The admin's weight for `engine`, or undefined. */
  weightOf(engine: EngineAddress): number | undefined {
    return this.weights.get(engine)?.weight;
  }

  /** Sets (null: ends) the admin's weight of a present engine, or ends that of one that is gone. */
  setWeight(engine: EngineAddress, weight: number | null): void {
    if (weight === null) this.weights.delete(engine);
    else this.weights.set(engine, { weight, leftAt: null });
  }

  /** The engine is present (again): its weight is kept for as long as it stays. */
  present(engine: EngineAddress): void {
    const kept = this.weights.get(engine);
    if (kept !== undefined) kept.leftAt = null;
  }

  /** The engine is gone: its weight is kept for historyWindow from now. */
  left(engine: EngineAddress, now: number): void {
    const kept = this.weights.get(engine);
    if (kept !== undefined) kept.leftAt = now;
    this.forget(now);
  }

  /** Drops the weights of engines gone longer than historyWindow, then all but the MAX_GONE_WEIGHTS latest. */
  forget(now: number): void {
    const gone: [EngineAddress, number][] = [];
    for (const [address, w] of this.weights) {
      if (w.leftAt === null) continue;
      if (now - w.leftAt > this.historyWindowMs()) this.weights.delete(address);
      else gone.push([address, w.leftAt]);
    }
    gone.sort((a, b) => b[1] - a[1] || compareSquidOrder(a[0], b[0]));
    for (const [address] of gone.slice(MAX_GONE_WEIGHTS)) this.weights.delete(address);
  }

  /** A time of leaving in the future (see ServiceGroup.clampToNow) counts from now. */
  clamp(now: number): void {
    for (const w of this.weights.values()) if (w.leftAt !== null && w.leftAt > now) w.leftAt = now;
  }

  restore(memory: ServiceMemory, now: number): void {
    for (const a of memory.adminDrained) this.drained.add(a);
    // None of the engines is present yet: a weight's historyWindow runs from now for those that were (and for a time
    // in the future, a clock set back or a hand-edited file, which would otherwise keep it for ever).
    for (const w of memory.adminWeights ?? [])
      this.weights.set(w.address, { weight: w.weight, leftAt: Math.min(w.leftAt ?? now, now) });
    this.forget(now);
  }

  memory(now: number): Pick<ServiceMemory, 'adminDrained' | 'adminWeights'> {
    return {
      adminDrained: [...this.drained].sort(compareSquidOrder),
      adminWeights: [...this.weights]
        .filter(([, w]) => w.leftAt === null || now - w.leftAt <= this.historyWindowMs())
        .sort(([a], [b]) => compareSquidOrder(a, b))
        .map(([address, w]) => ({ address, weight: w.weight, leftAt: w.leftAt })),
    };
  }
}
