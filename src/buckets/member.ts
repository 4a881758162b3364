// What the assignment needs to know about each usable engine of a service group.
import type { EngineAddress } from './table.js';
import { BucketsError } from './errors.js';
import { parseIpv4 } from './ipv4.js';

export interface Member {
  readonly address: EngineAddress;
  /** Assignment Weight: share of buckets relative to the others; 0 = standby (buckets only if no one else has weight).
   * */
  readonly weight: number;
  /** primary-standby: the highest priority serves everything. */
  readonly priority: number;
  /** Buckets (or mask values) this engine held before, e.g. its U historical Bucket Block: preferred when it needs
   * some. */
  readonly history?: readonly number[];
  /** When the engine became usable (ms, the caller's clock); primary-standby failback waits on it. */
  readonly usableSince?: number;
}

/** Weights travel as the wire's unsigned Assignment Weight; larger ones would also break exact integer shares. */
const MAX_WEIGHT = 0xffff_ffff;

/** Validates members and returns them sorted by address (numeric), so the result never depends on input order. */
export function sortedMembers(members: readonly Member[]): Member[] {
  const keyed = members.map((m) => {
    if (!Number.isInteger(m.weight) || m.weight < 0 || m.weight > MAX_WEIGHT) {
      throw new BucketsError(
        'bad-weight',
        `engine ${m.address} has weight ${m.weight}: a weight is an integer from 0 (standby) to ${MAX_WEIGHT}`,
      );
    }
    if (!Number.isFinite(m.priority)) {
      throw new BucketsError('bad-priority', `engine ${m.address} has priority ${m.priority}: use a finite number`);
    }
    return { key: parseIpv4(m.address), m };
  });
  keyed.sort((a, b) => a.key - b.key);
  for (let i = 1; i < keyed.length; i++) {
    if (keyed[i]?.key === keyed[i - 1]?.key) {
      throw new BucketsError('duplicate-engine', `engine ${keyed[i]?.m.address} is listed twice in one service group`);
    }
  }
  return keyed.map((k) => k.m);
}
