// Do the peer gateways publish the same tables as we do? Reads each peer's buckets from its admin API and compares
// bucket by bucket, and a mask service's Mask/Value Sets value by value (change numbers differ between gateways by
// design: each counts its own changes).
import type { BucketsView, PeerServiceView, PeerStatusView } from './api-types.js';
import { isIpv4 } from '../address.js';
import { MASK_FIELDS } from '../buckets/mask.js';
import type { WallClock } from '../clock.js';

export interface PeerTarget {
  /** The peer's Router ID (its router.address). */
  readonly address: string;
  /** Its admin API base URL, without a trailing slash. */
  readonly api: string;
}

export interface PeerCheckDeps {
  readonly peers: readonly PeerTarget[];
  readonly serviceIds: () => readonly number[];
  /** Our table of a service now. */
  readonly ours: (service: number) => {
    readonly changeNumber: number;
    readonly buckets: ReadonlyArray<string | null>;
    /** A mask service's Mask/Value Sets (empty for hash assignment). */
    readonly maskSets?: NonNullable<BucketsView['mask']>;
  } | null;
  /** Monotonic time for the reuse, wall time for checkedAt. */
  readonly clock: WallClock;
  /** Per request; a peer slower than this counts as unreachable (default 2 s). */
  readonly timeoutMs?: number;
  /** Tests inject a fetch; the daemon uses the global one. */
  readonly fetch?: typeof fetch;
}

/** A peer's answer larger than this is refused: a buckets view with its counters is ~15 KiB. */
const MAX_ANSWER_BYTES = 256 * 1024;
/** Results are reused this long, so a burst of status requests sends each peer one request per service. */
const REUSE_MS = 1000;
/** How many differing bucket numbers a view lists (the count is always exact). */
const LISTED_DIFFERENCES = 16;

class PeerAnswerError extends Error {}

export class PeerChecker {
  private last: { at: number; value: Promise<PeerStatusView[]> } | null = null;
  private readonly counts = new Map<string, { checks: number; failures: number }>();

  constructor(private readonly deps: PeerCheckDeps) {}

  /** Every configured peer, each service compared; never rejects (a failure is reported in the view). */
  check(): Promise<PeerStatusView[]> {
    if (this.deps.peers.length === 0) return Promise.resolve([]);
    const now = this.deps.clock.now();
    // A last read "in the future" (the clock was set back) is not reused for as long as the step.
    if (this.last === null || now < this.last.at || now - this.last.at >= REUSE_MS) {
      this.last = { at: now, value: Promise.all(this.deps.peers.map((p) => this.checkPeer(p))) };
    }
    return this.last.value;
  }

  private async checkPeer(peer: PeerTarget): Promise<PeerStatusView> {
    const services = await Promise.all(this.deps.serviceIds().map((id) => this.compare(peer, id)));
    const count = this.counts.get(peer.address) ?? { checks: 0, failures: 0 };
    count.checks += 1;
    if (services.some((s) => s.error !== null)) count.failures += 1;
    this.counts.set(peer.address, count);
    return {
      address: peer.address,
      api: peer.api,
      checkedAt: new Date(this.deps.clock.wall()).toISOString(),
      agrees: services.every((s) => s.agrees === true),
      services,
      checks: count.checks,
      failures: count.failures,
    };
  }

  private async compare(peer: PeerTarget, service: number): Promise<PeerServiceView> {
    const unknown = (error: string): PeerServiceView => ({
      id: service,
      agrees: null,
      changeNumber: this.deps.ours(service)?.changeNumber ?? null,
      peerChangeNumber: null,
      differingBuckets: null,
      differing: [],
      differingMaskValues: null,
      error,
    });
    let theirs: PeerTable;
    try {
      theirs = await this.read(peer, service);
    } catch (err) {
      return unknown(err instanceof Error ? err.message : String(err));
    }
    const ours = this.deps.ours(service);
    if (ours === null) return unknown(`service ${service} is no longer configured here`);
    const differing: number[] = [];
    theirs.buckets.forEach((engine, i) => {
      if (engine !== (ours.buckets[i] ?? null)) differing.push(i);
    });
    const ourMask = ours.maskSets ?? [];
    const differingMaskValues =
      ourMask.length === 0 && theirs.mask.length === 0 ? null : maskValuesDiffering(ourMask, theirs.mask);
    return {
      id: service,
      agrees: differing.length === 0 && (differingMaskValues ?? 0) === 0,
      changeNumber: ours.changeNumber,
      peerChangeNumber: theirs.changeNumber,
      differingBuckets: differing.length,
      differing: differing.slice(0, LISTED_DIFFERENCES),
      differingMaskValues,
      error: null,
    };
  }

  private async read(peer: PeerTarget, service: number): Promise<PeerTable> {
    const url = `${peer.api}/api/v1/services/${service}/buckets`;
    const timeoutMs = this.deps.timeoutMs ?? 2000;
    let res: Response;
    try {
      res = await (this.deps.fetch ?? fetch)(url, {
        headers: { accept: 'application/json' },
        signal: AbortSignal.timeout(timeoutMs),
        redirect: 'error',
      });
    } catch (err) {
      if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) {
        throw new PeerAnswerError(`unreachable: no answer from ${url} within ${timeoutMs} ms`);
      }
      const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err);
      throw new PeerAnswerError(`unreachable: ${url}: ${cause}`);
    }
    const text = await readCapped(res, MAX_ANSWER_BYTES, url);
    if (res.status === 404)
      throw new PeerAnswerError(`service ${service} is not configured on the peer (${url}: HTTP 404)`);
    if (!res.ok) throw new PeerAnswerError(`${url}: HTTP ${res.status}`);
    return parseBuckets(text, url);
  }
}

/** A peer's answer as text, at most `limit` bytes: past it the body is cancelled and PeerAnswerError thrown. */
export async function readCapped(res: Response, limit: number, url: string): Promise<string> {
  const reader = res.body?.getReader();
  if (reader === undefined) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel();
      throw new PeerAnswerError(`bad answer from ${url}: more than ${limit} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

type MaskSets = NonNullable<BucketsView['mask']>;

interface PeerTable {
  readonly changeNumber: number;
  readonly buckets: (string | null)[];
  /** Empty for hash assignment (the view's `mask: null`). */
  readonly mask: MaskSets;
}

/** Values (over the sets in order) whose mask, value fields or engine differ; a set on one side only counts whole. */
function maskValuesDiffering(ours: MaskSets, theirs: MaskSets): number {
  const key = (o: object): string => JSON.stringify(o, Object.keys(o).sort());
  let n = 0;
  for (let i = 0; i < Math.max(ours.length, theirs.length); i++) {
    const a = ours[i];
    const b = theirs[i];
    if (a === undefined || b === undefined || key(a.mask) !== key(b.mask)) {
      n += Math.max(a?.values.length ?? 0, b?.values.length ?? 0);
      continue;
    }
    for (let j = 0; j < Math.max(a.values.length, b.values.length); j++) {
      const x = a.values[j];
      const y = b.values[j];
      if (x === undefined || y === undefined || key(x) !== key(y)) n++;
    }
  }
  return n;
}

const VALUE_FIELDS = ['sourceAddress', 'destinationAddress', 'sourcePort', 'destinationPort'] as const;
const isUint32 = (v: unknown): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0xffff_ffff;

/** The view's `mask`: null, or sets of {mask, values} with numeric fields and an IPv4 engine per value. */
function parseMask(v: unknown, url: string): MaskSets {
  if (v === null || v === undefined) return [];
  const bad = (what: string): never => {
    throw new PeerAnswerError(`bad answer from ${url}: ${what}`);
  };
  if (!Array.isArray(v)) return bad('mask is neither null nor a list of Mask/Value Sets');
  return v.map((set: unknown, i) => {
    const s = set as { mask?: Record<string, unknown>; values?: unknown };
    if (typeof set !== 'object' || set === null || typeof s.mask !== 'object' || s.mask === null)
      return bad(`mask set ${i} has no mask`);
    const m = s.mask;
    if (!MASK_FIELDS.every((f) => isUint32(m[f]))) return bad(`mask set ${i}: a mask field is not a uint32`);
    if (!Array.isArray(s.values)) return bad(`mask set ${i} has no list of values`);
    const values = s.values.map((x: unknown, j) => {
      const val = x as Record<string, unknown> | null;
      if (typeof x !== 'object' || val === null || !VALUE_FIELDS.every((f) => isUint32(val[f])))
        return bad(`mask set ${i} value ${j}: a value field is not a uint32`);
      if (typeof val.engine !== 'string' || !isIpv4(val.engine))
        return bad(`mask set ${i} value ${j}: engine is not an IPv4 address`);
      return {
        sourceAddress: val.sourceAddress as number,
        destinationAddress: val.destinationAddress as number,
        sourcePort: val.sourcePort as number,
        destinationPort: val.destinationPort as number,
        engine: val.engine,
      };
    });
    return {
      mask: {
        sourceAddressMask: m.sourceAddressMask as number,
        destinationAddressMask: m.destinationAddressMask as number,
        sourcePortMask: m.sourcePortMask as number,
        destinationPortMask: m.destinationPortMask as number,
      },
      values,
    };
  });
}

/**
 * A peer's GET services/:id/buckets, checked field by field: 256 entries, each an IPv4 string or null; and for a mask
 * service its Mask/Value Sets.
 */
export function parseBuckets(text: string, url: string): PeerTable {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new PeerAnswerError(`bad answer from ${url}: not JSON`);
  }
  if (typeof v !== 'object' || v === null) throw new PeerAnswerError(`bad answer from ${url}: not a JSON object`);
  const { changeNumber, buckets, mask } = v as { changeNumber?: unknown; buckets?: unknown; mask?: unknown };
  if (!isUint32(changeNumber)) throw new PeerAnswerError(`bad answer from ${url}: changeNumber is not a uint32`);
  if (!Array.isArray(buckets) || buckets.length !== 256) {
    throw new PeerAnswerError(`bad answer from ${url}: buckets is not a list of 256 entries`);
  }
  const bad = buckets.findIndex((b) => b !== null && (typeof b !== 'string' || !isIpv4(b)));
  if (bad >= 0) throw new PeerAnswerError(`bad answer from ${url}: bucket ${bad} is neither an IPv4 address nor null`);
  return { changeNumber, buckets: buckets as (string | null)[], mask: parseMask(mask, url) };
}
