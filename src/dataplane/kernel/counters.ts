// Reads a counter set (`nft -j list set inet wccpd bseen_0`) back into per-element packets/bytes.
import { BUCKET_COUNT } from '../../buckets/table.js';
import type { EngineAddress } from '../../buckets/table.js';
import type { BucketCounters, CounterScope, RedirectCounters, ServiceRedirect } from '../redirector.js';
import { bucketCounterSet, deniedCounter, engineCounter, unassignedCounter } from './rules.js';

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

/** What readServiceCounters reads a listing through (`nft -j <args>`). */
export type ListJson = (args: readonly string[]) => Promise<string>;

/**
 * The counters of the nft and ingress tables (the same objects, ruleset.ts's names): every named counter in one
 * listing (nft loads as much of the table for one named counter as for all), and the bucket counter set of each
 * service the scope asks for. `named` is the whole listing, for a backend's own counters.
 */
export async function readServiceCounters(
  list: ListJson,
  table: { readonly family: string; readonly name: string },
  services: Iterable<ServiceRedirect>,
  slotOf: (service: ServiceRedirect, engine: EngineAddress) => number | undefined,
  scope: CounterScope,
): Promise<RedirectCounters & { readonly named: ReadonlyMap<string, BucketCounters> }> {
  const all = [...services];
  const buckets = new Map<number, readonly BucketCounters[]>();
  const engines = new Map<number, ReadonlyMap<EngineAddress, BucketCounters>>();
  const perService = new Map<number, { denied: BucketCounters; unassigned: BucketCounters }>();
  const named =
    all.length > 0
      ? parseNamedCounters(await list(['list', 'counters', 'table', table.family, table.name]))
      : new Map<string, BucketCounters>();
  const zero = { packets: 0, bytes: 0 };
  for (const s of all) {
    const id = s.serviceId;
    if (scope.buckets === undefined || scope.buckets.includes(id)) {
      const seen = parseCounterSet(await list(['list', 'set', table.family, table.name, bucketCounterSet(id)]));
      buckets.set(
        id,
        Array.from({ length: BUCKET_COUNT }, (_, b) => seen.get(b) ?? zero),
      );
    }
    const perEngine = new Map<EngineAddress, BucketCounters>();
    for (const e of s.engines) {
      const slot = slotOf(s, e);
      const c = slot !== undefined ? named.get(engineCounter(slot)) : undefined;
      if (c !== undefined) perEngine.set(e, c);
    }
    engines.set(id, perEngine);
    perService.set(id, {
      denied: named.get(deniedCounter(id)) ?? zero,
      unassigned: named.get(unassignedCounter(id)) ?? zero,
    });
  }
  return { buckets, engines, services: perService, named };
}
