// Reads the nft backend's named counters (`nft -j list counters table inet wccpd`) back into RedirectCounters.
import { BUCKET_COUNT } from '../buckets/table.js';
import type { EngineAddress } from '../buckets/table.js';
import type { BucketCounters, RedirectCounters } from './redirector.js';

interface NftCounter { counter?: { name?: string; packets?: number; bytes?: number } }

/** Pure: parses nft's JSON. Bucket counters are `s<id>_b<n>`, engine counters `s<id>_e_<a>_<b>_<c>_<d>`. */
export function parseCounters(json: string): RedirectCounters {
  const doc = JSON.parse(json) as { nftables?: NftCounter[] };
  const buckets = new Map<number, BucketCounters[]>();
  const engines = new Map<number, Map<EngineAddress, BucketCounters>>();
  for (const item of doc.nftables ?? []) {
    const c = item.counter;
    if (c?.name === undefined) continue;
    const value = { packets: c.packets ?? 0, bytes: c.bytes ?? 0 };
    const b = /^s(\d+)_b(\d+)$/.exec(c.name);
    if (b !== null) {
      const id = Number(b[1]);
      let list = buckets.get(id);
      if (list === undefined) {
        list = Array.from({ length: BUCKET_COUNT }, () => ({ packets: 0, bytes: 0 }));
        buckets.set(id, list);
      }
      const n = Number(b[2]);
      if (n < BUCKET_COUNT) list[n] = value;
      continue;
    }
    const e = /^s(\d+)_e_(\d+)_(\d+)_(\d+)_(\d+)$/.exec(c.name);
    if (e !== null) {
      const id = Number(e[1]);
      let m = engines.get(id);
      if (m === undefined) { m = new Map(); engines.set(id, m); }
      m.set(`${e[2]}.${e[3]}.${e[4]}.${e[5]}`, value);
    }
  }
  return { buckets, engines };
}
