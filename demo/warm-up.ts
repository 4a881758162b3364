// What the demo reads to say where an engine's misses came from: Squid's own access.log (the engine's, and the
// previous owner's for what the broker relayed) and the origin's fetch counts. wccpd's counters are not used here: the
// demo's claims about the warm-up are checked against what the caches and the origin themselves recorded.
import { bucketOf, originAddressForBucket, ROUTER_ADDRESS, type AccessLogEntry } from '../test/lab/lab.js';

/** The client's working set: one cacheable object per bucket (the origin's /long/: max-age 3600), asked each time. */
export const WORKING_SET = '/long/demo/';

/** The working-set object of bucket b. */
export function objectUrl(b: number): string {
  return `http://${originAddressForBucket(b)}${WORKING_SET}${b}`;
}

/** The bucket of a working-set object's URL, or null for any other URL. */
export function objectBucket(url: string): number | null {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return null;
  }
  if (!u.pathname.startsWith(WORKING_SET)) return null;
  const b = bucketOf(u.hostname);
  return u.pathname === `${WORKING_SET}${b}` ? b : null;
}

/**
 * An engine's misses among `lines` in `buckets`: requests for a working-set object it fetched from somewhere (a
 * sibling or the origin) instead of answering from its own cache (HIER_NONE).
 */
export function missesIn(lines: readonly AccessLogEntry[], buckets: ReadonlySet<number>): AccessLogEntry[] {
  return lines.filter((e) => {
    const b = objectBucket(e.url);
    return b !== null && buckets.has(b) && e.hierarchy !== 'HIER_NONE' && e.status === 200;
  });
}

/** A miss served through the warm-up broker: Squid fetched it from its sibling, the router. */
export function viaBroker(e: AccessLogEntry): boolean {
  return e.hierarchy === 'SIBLING_HIT' && e.peer === ROUTER_ADDRESS;
}

/** Whether a source's access.log shows it served `url` to the broker from its cache (a HIT asked by the router). */
export function servedToBroker(sourceLines: readonly AccessLogEntry[], url: string): boolean {
  return sourceLines.some(
    (e) => e.url === url && e.client === ROUTER_ADDRESS && /HIT/.test(e.result) && e.status === 200,
  );
}

/** Fetches the origin made of the working-set objects of `buckets` between two readings of its counts. */
export function originFetches(before: readonly number[], after: readonly number[], buckets: Iterable<number>): number {
  let n = 0;
  for (const b of buckets) n += (after[b] ?? 0) - (before[b] ?? 0);
  return n;
}

/** The warm-up line scripts read (issue 34): exactly these words. */
export function warmupLine(misses: number, fromPrevious: number, fromOrigin: number): string {
  return `warm-up: ${misses} misses, ${fromPrevious} from previous owners, ${fromOrigin} from the origin`;
}

/** What `--ci` requires of the warm-up: enough misses to judge, and at most 10% of them fetched from the origin. */
export function warmupShortfalls(misses: number, fromOrigin: number): string[] {
  const out: string[] = [];
  if (misses < 20) out.push(`the newcomer had ${misses} misses in its gained buckets, fewer than 20 to judge by`);
  if (fromOrigin > 0.1 * misses) out.push(`${fromOrigin} of its ${misses} misses came from the origin, over 10%`);
  return out;
}
