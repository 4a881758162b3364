// Reads a counter set (`nft -j list set inet wccpd bseen_0`) back into per-element packets/bytes.
import { BUCKET_COUNT } from '../../buckets/table.js';
import type { EngineAddress } from '../../buckets/table.js';
import type { BucketCounters, CounterScope, RedirectCounters, ServiceRedirect } from '../redirector.js';
import {
  bucketCounterSet,
  bucketCounterSet6,
  deniedCounter,
  deniedCounter6,
  engineCounter,
  engineCounter6,
  unassignedCounter,
  unassignedCounter6,
} from './rules.js';

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
  /** The table counts an IPv6 service's IPv6 apart, in the *6 objects (rules.ts; the nft backend's). */
  countsIpv6 = false,
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
  const sum = (a: BucketCounters, b: BucketCounters | undefined): BucketCounters =>
    b === undefined ? a : { packets: a.packets + b.packets, bytes: a.bytes + b.bytes };
  const v6 = {
    buckets: new Map<number, readonly BucketCounters[]>(),
    engines: new Map<number, ReadonlyMap<EngineAddress, BucketCounters>>(),
    services: new Map<number, { denied: BucketCounters; unassigned: BucketCounters }>(),
  };
  const bucketSet = async (name: string): Promise<BucketCounters[]> => {
    const seen = parseCounterSet(await list(['list', 'set', table.family, table.name, name]));
    return Array.from({ length: BUCKET_COUNT }, (_, b) => seen.get(b) ?? zero);
  };
  for (const s of all) {
    const id = s.serviceId;
    // A service that redirects IPv6 counts it apart (the *6 objects): its figures here are both families'.
    const ipv6 = countsIpv6 && s.families?.includes('ipv6') === true;
    if (scope.buckets === undefined || scope.buckets.includes(id)) {
      const four = await bucketSet(bucketCounterSet(id));
      if (ipv6) {
        const six = await bucketSet(bucketCounterSet6(id));
        v6.buckets.set(id, six);
        buckets.set(
          id,
          four.map((c, b) => sum(c, six[b])),
        );
      } else buckets.set(id, four);
    }
    const perEngine = new Map<EngineAddress, BucketCounters>();
    const perEngine6 = new Map<EngineAddress, BucketCounters>();
    for (const e of s.engines) {
      const slot = slotOf(s, e);
      const c = slot !== undefined ? named.get(engineCounter(slot)) : undefined;
      const c6 = slot !== undefined && ipv6 ? named.get(engineCounter6(slot)) : undefined;
      if (c6 !== undefined) perEngine6.set(e, c6);
      if (c !== undefined) perEngine.set(e, sum(c, c6));
    }
    engines.set(id, perEngine);
    const denied6 = ipv6 ? (named.get(deniedCounter6(id)) ?? zero) : undefined;
    const unassigned6 = ipv6 ? (named.get(unassignedCounter6(id)) ?? zero) : undefined;
    perService.set(id, {
      denied: sum(named.get(deniedCounter(id)) ?? zero, denied6),
      unassigned: sum(named.get(unassignedCounter(id)) ?? zero, unassigned6),
    });
    if (ipv6) {
      v6.engines.set(id, perEngine6);
      v6.services.set(id, { denied: denied6 ?? zero, unassigned: unassigned6 ?? zero });
    }
  }
  return { buckets, engines, services: perService, named, ...(v6.services.size > 0 ? { ipv6: v6 } : {}) };
}
