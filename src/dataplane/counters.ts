// Reads a counter set (`nft -j list set inet wccpd bseen_0`) back into per-element packets/bytes.
import type { BucketCounters } from './redirector.js';

interface NftElem { elem?: { val?: unknown; counter?: { packets?: number; bytes?: number } } }

/** Pure: parses nft's JSON for one set whose elements carry counters; keys are the numeric element values. */
export function parseCounterSet(json: string): Map<number, BucketCounters> {
  const doc = JSON.parse(json) as { nftables?: { set?: { elem?: (NftElem | number)[] } }[] };
  const out = new Map<number, BucketCounters>();
  for (const item of doc.nftables ?? []) {
    for (const e of item.set?.elem ?? []) {
      if (typeof e === 'number') { out.set(e, { packets: 0, bytes: 0 }); continue; }
      const val = e.elem?.val;
      if (typeof val !== 'number') continue;
      out.set(val, { packets: e.elem?.counter?.packets ?? 0, bytes: e.elem?.counter?.bytes ?? 0 });
    }
  }
  return out;
}

/** Pure: parses `nft -j list counter ...` (one named counter) into packets/bytes. */
export function parseNamedCounter(json: string): BucketCounters {
  const doc = JSON.parse(json) as { nftables?: { counter?: { packets?: number; bytes?: number } }[] };
  const c = doc.nftables?.find((item) => item.counter !== undefined)?.counter;
  return { packets: c?.packets ?? 0, bytes: c?.bytes ?? 0 };
}
