// Where does a new connection to an address go, and why: the answer behind `wccpctl which` and the API's `which`.
import { bucketOf } from '../buckets/hash.js';
import { matchMask } from '../buckets/mask.js';
import { ipv4ToNumber, isIpv6 } from '../address.js';
import type { EngineAddress } from '../buckets/table.js';
import { familiesOf, type Explanation, type ServiceRedirect } from './redirector.js';
import { hasUsableEngine } from './kernel/rules.js';

/**
 * Pure. `address` is the hashed address (the destination for the standard service); for a mask service, the masked
 * one (the destination, or the source when no set masks the destination; ports count as 0). IPv4 or IPv6: an address
 * of a family the service does not redirect is `why: 'family'`. Throws a BucketsError on a malformed one.
 */
export function explain(service: ServiceRedirect, address: string): Explanation {
  const bucket = bucketOf(address);
  const family = isIpv6(address) ? 'ipv6' : 'ipv4';
  const base = { serviceId: service.serviceId, address, bucket, family } as const;
  if (!familiesOf(service).includes(family)) return { ...base, engine: null, why: 'family' };
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
