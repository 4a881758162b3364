// The 256-bucket redirection table of one service group, as a value.
// Entry i is the IPv4 address (dotted quad) of the engine that serves bucket i, or null (unassigned: forward normally).

export const BUCKET_COUNT = 256;

/** An engine is named by its IPv4 address in dotted-quad form, everywhere (wire, cluster, API, logs). */
export type EngineAddress = string;

export interface BucketTable {
  /** Advanced every time the assignment changes; unchanged when a recomputation gives the same buckets. */
  readonly changeNumber: number;
  /** Exactly BUCKET_COUNT entries. */
  readonly buckets: ReadonlyArray<EngineAddress | null>;
}

export function emptyTable(changeNumber = 0): BucketTable {
  return { changeNumber, buckets: new Array<EngineAddress | null>(BUCKET_COUNT).fill(null) };
}
