// Where does a new connection to an address go, and why: the answer behind `wccpctl which` and the API's `which`.
import { bucketOf } from '../buckets/hash.js';
import type { Explanation, ServiceRedirect } from './redirector.js';
import { hasUsableEngine } from './ruleset.js';

/** Pure. `address` is the hashed address (the destination for the standard service). Throws a BucketsError on a malformed one. */
export function explain(service: ServiceRedirect, address: string): Explanation {
  const bucket = bucketOf(address);
  const base = { serviceId: service.serviceId, address, bucket };
  if (!hasUsableEngine(service)) {
    return { ...base, engine: null, why: service.failMode === 'closed' ? 'closed' : 'bypass' };
  }
  const engine = service.table.buckets[bucket] ?? null;
  if (engine !== null && service.engines.includes(engine)) return { ...base, engine, why: 'assigned' };
  return { ...base, engine: null, why: 'unassigned' };
}
