// Reads a counter set (`nft -j list set inet wccpd bseen_0`) back into per-element packets/bytes.
import type { BucketCounters } from './redirector.js';

interface NftElem {
  elem?: { val?: unknown; counter?: { packets?: number; bytes?: number } };
}

/** Pure: parses nft's JSON for one set whose elements carry counters; keys are the numeric element values. */
export function parseCounterSet(json: string): Map<number, BucketCounters> {
  const doc = JSON.parse(json) as { nftables?: { set?: { elem?: (NftElem | number)[] } }[] };
  const out = new Map<number, BucketCounters>();
  for (const item of doc.nftables ?? []) {
    for (const e of item.set?.elem ?? []) {
      if (typeof e === 'number') {
        out.set(e, { packets: 0, bytes: 0 });
        continue;
      }
      const val = elementValue(e.elem?.val);
      if (val === null) continue;
      out.set(val, { packets: e.elem?.counter?.packets ?? 0, bytes: e.elem?.counter?.bytes ?? 0 });
    }
  }
  return out;
}

/**
 * A set element's value: a number (type mark), or a TC class id as nft prints `meta priority` values ("none" = 0,
 * "0:ff" = 0x0000_00ff, major and minor in hex).
 */
export function elementValue(val: unknown): number | null {
  if (typeof val === 'number') return val;
  if (val === 'none') return 0;
  const m = typeof val === 'string' ? /^([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(val) : null;
  return m !== null ? parseInt(m[1] ?? '0', 16) * 0x10000 + parseInt(m[2] ?? '0', 16) : null;
}

/** Pure: parses `nft -j list counters table ...` (every named counter of the table) into name -> packets/bytes. */
export function parseNamedCounters(json: string): Map<string, BucketCounters> {
  const doc = JSON.parse(json) as { nftables?: { counter?: { name?: string; packets?: number; bytes?: number } }[] };
  const out = new Map<string, BucketCounters>();
  for (const item of doc.nftables ?? []) {
    const c = item.counter;
    if (c?.name !== undefined) out.set(c.name, { packets: c.packets ?? 0, bytes: c.bytes ?? 0 });
  }
  return out;
}
