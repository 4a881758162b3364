// Where does a new connection to an address go, and why: the answer behind `wccpctl which` and the API's `which`.
import { bucketOf } from '../buckets/hash.js';
import { matchMask } from '../buckets/mask.js';
import { ipv4ToNumber } from '../address.js';
import type { EngineAddress } from '../buckets/table.js';
import type { Explanation, ServiceRedirect } from './redirector.js';
import { hasUsableEngine } from './kernel/rules.js';

/**
 * Pure. `address` is the hashed address (the destination for the standard service); for a mask service, the masked
 * one (the destination, or the source when no set masks the destination; ports count as 0). Throws a BucketsError on
 * a malformed one.
 */
export function explain(service: ServiceRedirect, address: string): Explanation {
  const bucket = bucketOf(address);
  const base = { serviceId: service.serviceId, address, bucket };
  if (!hasUsableEngine(service)) {
    return { ...base, engine: null, why: service.failMode === 'closed' ? 'closed' : 'bypass' };
  }
  const engine =
    service.maskSets !== undefined ? maskEngine(service.maskSets, address) : (service.table.buckets[bucket] ?? null);
  if (engine !== null && service.engines.includes(engine)) return { ...base, engine, why: 'assigned' };
  return { ...base, engine: null, why: 'unassigned' };
}

function maskEngine(sets: NonNullable<ServiceRedirect['maskSets']>, address: string): EngineAddress | null {
  const n = ipv4ToNumber(address) ?? 0;
  const byDestination = sets.some((s) => s.mask.destinationAddressMask !== 0);
  return matchMask(sets, {
    sourceIp: byDestination ? 0 : n,
    destinationIp: byDestination ? n : 0,
    sourcePort: 0,
    destinationPort: 0,
  });
}
