// The data plane's words the config names: its backends, the nft backend's conntrack scope and the ingress backend's
// flow maps (docs/config.md).
export type DataplaneBackend = 'nft' | 'ingress' | 'userland' | 'none';
export const DATAPLANE_BACKENDS: readonly DataplaneBackend[] = ['nft', 'ingress', 'userland', 'none'];
export type ConntrackScope = 'all' | 'services';
export const CONNTRACK_SCOPES: readonly ConntrackScope[] = ['all', 'services'];

/**
 * dataplane.flows (ingress backend): defaults and bounds. The max is also the kernel's first size of the flow map's
 * hash table, kept in 16 bits (rhashtable_params.nelem_hint): 262,144 would be 0 (64 buckets, then a rehash at every
 * doubling as flows arrive); 262,143 is 65,535, the largest, so a new map starts with 131,072 buckets (2 MB).
 */
export const FLOWS_MAX_DEFAULT = 262_143;
export const FLOWS_MAX_RANGE = [1, 16_777_216] as const;
export const FLOWS_IDLE_DEFAULT_MS = 600_000;
/** 10 s: a FIN or RST shortens a flow's entry to 10 s; 24 h: the longest idle connection worth holding. */
export const FLOWS_IDLE_RANGE_MS = [10_000, 86_400_000] as const;
