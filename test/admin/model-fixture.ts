// The admin model's dependencies that a test of something else leaves idle: a test build, nothing in force yet,
// nothing dropped, no peer, no event client, nothing refused.
import type { ClusterModelDeps } from '../../src/admin/cluster-model.js';

export const idleDeps = {
  build: { version: '0.0.0-test', commit: 'unknown' },
  inForce: () => null,
  dropped: () => ({}),
  which: () => null,
  admin: () => ({
    eventClients: 0,
    eventClientsMax: 64,
    eventClientsRefused: 0,
    eventClientsDropped: 0,
    hostRefused: 0,
    connectionsRefused: 0,
    badRequests: 0,
    unauthorized: 0,
    internalErrors: 0,
  }),
} satisfies Partial<ClusterModelDeps>;
