// Components the codec tests build messages from, and read back from Squid's datagrams: no security, and the
// standard web-cache service (id 0, no ports: what Squid sends for service 0).
import type { SecurityInfo, ServiceInfo } from '../../src/wire/wccp2/index.js';

export const NO_SECURITY: SecurityInfo = { kind: 'security', option: 'none' };

export const WEB_CACHE_SERVICE: ServiceInfo = {
  kind: 'service',
  serviceType: 'standard',
  serviceId: 0,
  priority: 0,
  protocol: 0,
  flags: 0,
  ports: [0, 0, 0, 0, 0, 0, 0, 0],
};
