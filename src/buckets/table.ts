// The 256-bucket redirection table of one service group, as a value.
// Entry i is the IPv4 address (dotted quad) of the engine that serves bucket i, or null (unassigned: forward normally).

import type { AssignmentBucket } from '../wire/wccp2/index.js';
import { BucketsError } from './errors.js';

export const BUCKET_COUNT = 256;

/** An engine is named by its IPv4 address in dotted-quad form, everywhere (wire, cluster, API, logs). */
export type EngineAddress = string;

export interface BucketTable {
  /** Advanced every time the assignment changes; unchanged when a recomputation gives the same buckets. */
  readonly changeNumber: number;
  /** Exactly BUCKET_COUNT entries. */
  readonly buckets: ReadonlyArray<EngineAddress | null>;
}

/**
 * The change number after n. It is a 32-bit field on the wire (Assignment Key, Router Assignment Element), so after
 * 4,294,967,295 it wraps to 0 instead of growing past what the encoder can write; weeks of churn get there.
 */
export function nextChangeNumber(n: number): number {
  return (n + 1) >>> 0;
}

/**
 * The table that follows `previous` with these buckets: `previous` itself when no bucket moved, else the same buckets
 * under the next change number. Every path that decides a table (assignment, heal, restart grace, an obeyed
 * REDIRECT_ASSIGN) advances the change number this way.
 */
export function nextTable(previous: BucketTable, buckets: ReadonlyArray<EngineAddress | null>): BucketTable {
  if (sameBuckets(previous, { buckets })) return previous;
  return { changeNumber: nextChangeNumber(previous.changeNumber), buckets };
}

export function emptyTable(changeNumber = 0): BucketTable {
  return { changeNumber, buckets: new Array<EngineAddress | null>(BUCKET_COUNT).fill(null) };
}

/** Per bucket: true when the bucket carries the alternate-hash flag A. Absent = no A anywhere. */
export type AlternateFlags = ReadonlyArray<boolean>;

/** Bucket bytes hold a cache index 0-31: a service group has at most 32 engines. */
export const MAX_ENGINES = 32;

/** How many buckets each engine serves; engines with none are absent. */
export function countsByEngine(table: Pick<BucketTable, 'buckets'>): Map<EngineAddress, number> {
  const counts = new Map<EngineAddress, number>();
  for (const engine of table.buckets) {
    if (engine !== null) counts.set(engine, (counts.get(engine) ?? 0) + 1);
  }
  return counts;
}

/** The buckets an engine serves, ascending. */
export function bucketsOf(table: Pick<BucketTable, 'buckets'>, engine: EngineAddress): number[] {
  return table.buckets.flatMap((owner, i) => (owner === engine ? [i] : []));
}

/** The buckets whose engine differs between two tables (a bucket going to or from unassigned counts), ascending. */
export function movedBuckets(before: Pick<BucketTable, 'buckets'>, after: Pick<BucketTable, 'buckets'>): number[] {
  const moved: number[] = [];
  for (let i = 0; i < BUCKET_COUNT; i++) {
    if ((before.buckets[i] ?? null) !== (after.buckets[i] ?? null)) moved.push(i);
  }
  return moved;
}

/** The engines of a table in the order their first bucket appears (the cache index order of Assignment Info). */
export function enginesInBucketOrder(table: Pick<BucketTable, 'buckets'>): EngineAddress[] {
  const seen = new Set<EngineAddress>();
  for (const engine of table.buckets) if (engine !== null) seen.add(engine);
  return [...seen];
}

/**
 * An engine's buckets as the 256-bit Bucket Block of a Web-Cache Identity Element: bucket n is byte n >> 3,
 * bit 1 << (n & 7) (the order ATS and Wireshark use).
 */
export function bucketSetOf(table: Pick<BucketTable, 'buckets'>, engine: EngineAddress): Uint8Array {
  const bits = new Uint8Array(BUCKET_COUNT / 8);
  table.buckets.forEach((owner, n) => {
    if (owner === engine) bits[n >> 3] = (bits[n >> 3] ?? 0) | (1 << (n & 7));
  });
  return bits;
}

/** The bucket numbers set in a 256-bit Bucket Block (e.g. an engine's historical buckets, flag U), ascending. */
export function bucketsInSet(bits: Uint8Array): number[] {
  if (bits.length !== BUCKET_COUNT / 8) {
    throw new BucketsError('bad-table', `a Bucket Block is ${BUCKET_COUNT / 8} bytes, got ${bits.length}`);
  }
  const out: number[] = [];
  for (let n = 0; n < BUCKET_COUNT; n++) if (((bits[n >> 3] ?? 0) >> (n & 7)) & 1) out.push(n);
  return out;
}

/** The hash part of Assignment Info (draft 5.6.7), as decoded: engine list (position = cache index) and 256 buckets. */
export interface AssignmentBuckets {
  readonly engines: readonly EngineAddress[];
  /** 256 entries: the cache index and A flag, or null (unassigned). */
  readonly buckets: readonly AssignmentBucket[];
}

/**
 * Encodes a table for Assignment Info. `engines` lists every engine to name (e.g. all usable ones, even those with no
 * bucket); by default, the engines of the table in bucket order. Throws BucketsError when an assigned engine is not
 * listed or more than 32 engines would need an index.
 */
export function toAssignmentBuckets(
  table: Pick<BucketTable, 'buckets'>,
  alternate?: AlternateFlags,
  engines?: readonly EngineAddress[],
): AssignmentBuckets {
  const list = engines ?? enginesInBucketOrder(table);
  if (list.length > MAX_ENGINES) {
    throw new BucketsError(
      'too-many-engines',
      `Assignment Info can index at most ${MAX_ENGINES} engines, got ${list.length}: remove engines from the group`,
    );
  }
  const index = new Map(list.map((e, i) => [e, i] as const));
  const buckets: AssignmentBucket[] = [];
  for (let n = 0; n < BUCKET_COUNT; n++) {
    const owner = table.buckets[n] ?? null;
    if (owner === null) {
      buckets.push(null);
      continue;
    }
    const i = index.get(owner);
    if (i === undefined) {
      throw new BucketsError('bad-table', `bucket ${n} belongs to ${owner}, which is not in the engine list`);
    }
    buckets.push({ cache: i, alternate: alternate?.[n] === true });
  }
  return { engines: [...list], buckets };
}

export type AssignmentBucketsDecoded =
  | { readonly ok: true; readonly table: BucketTable; readonly alternate: boolean[] }
  | { readonly ok: false; readonly bucket: number; readonly detail: string };

/**
 * The table an Assignment Info describes (e.g. a designated engine's REDIRECT_ASSIGN). A bucket whose cache index
 * names no listed engine is reported with its bucket number, never guessed.
 */
export function fromAssignmentBuckets(info: AssignmentBuckets, changeNumber: number): AssignmentBucketsDecoded {
  if (info.buckets.length !== BUCKET_COUNT) {
    return {
      ok: false,
      bucket: -1,
      detail: `Assignment Info carries ${BUCKET_COUNT} buckets, got ${info.buckets.length}`,
    };
  }
  const buckets: (EngineAddress | null)[] = [];
  const alternate: boolean[] = [];
  for (let n = 0; n < BUCKET_COUNT; n++) {
    const b = info.buckets[n] ?? null;
    if (b === null) {
      buckets.push(null);
      alternate.push(false);
      continue;
    }
    const engine = info.engines[b.cache];
    if (engine === undefined) {
      return {
        ok: false,
        bucket: n,
        detail: `bucket ${n} names cache index ${b.cache} but only ${info.engines.length} engines are listed`,
      };
    }
    buckets.push(engine);
    alternate.push(b.alternate);
  }
  return { ok: true, table: { changeNumber, buckets }, alternate };
}

/** True when two tables send every bucket to the same engine (change numbers aside). */
export function sameBuckets(a: Pick<BucketTable, 'buckets'>, b: Pick<BucketTable, 'buckets'>): boolean {
  return movedBuckets(a, b).length === 0;
}
