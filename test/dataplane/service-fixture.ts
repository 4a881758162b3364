// A ServiceRedirect for the standard web-cache service, with a table built from a rule per bucket.
import type { EngineAddress } from '../../src/buckets/table.js';
import type { ServiceRedirect } from '../../src/dataplane/redirector.js';

export function webCache(
  owner: (bucket: number) => EngineAddress | null,
  engines: readonly EngineAddress[],
  over: Partial<ServiceRedirect> = {},
): ServiceRedirect {
  return {
    serviceId: 0,
    protocol: 6,
    ports: [80],
    portsAreSource: false,
    serviceFlags: 0x2,
    priority: 0,
    forwarding: 'l2',
    failMode: 'open',
    clientInterfaces: ['c0'],
    engines,
    table: { changeNumber: 1, buckets: Array.from({ length: 256 }, (_, b) => owner(b)) },
    ...over,
  };
}
