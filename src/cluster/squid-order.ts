// The order Squid sorts caches in (wccp2SortCacheList): raw in_addr.s_addr compared as an integer. s_addr holds the
// address in network byte order, so on the little-endian hosts Squid runs on the LAST octet is the most significant.
// The designated engine is the lowest in this order (docs/architecture.md, decision 2), so wccpd must use it to agree
// with Squid.
import { squidSortKey } from '../buckets/ipv4.js';

export const squidOrderKey = squidSortKey;

export function compareSquidOrder(a: string, b: string): number {
  return squidOrderKey(a) - squidOrderKey(b);
}

/** The lowest address in Squid's order, or null for none. */
export function designatedEngineOf(addresses: Iterable<string>): string | null {
  let best: string | null = null;
  for (const a of addresses) if (best === null || compareSquidOrder(a, best) < 0) best = a;
  return best;
}
