// The data plane's words the config names: its backends and the nft backend's conntrack scope (docs/config.md).
export type DataplaneBackend = 'nft' | 'ingress' | 'userland' | 'none';
export const DATAPLANE_BACKENDS: readonly DataplaneBackend[] = ['nft', 'ingress', 'userland', 'none'];
export type ConntrackScope = 'all' | 'services';
export const CONNTRACK_SCOPES: readonly ConntrackScope[] = ['all', 'services'];
