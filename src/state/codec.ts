// The state file format: one header line `wccpd-state <version> <body length> <sha256 of body>` and a JSON body.
// A file cut short at any byte, with extra bytes, or with any byte changed fails the length or checksum check;
// a body that passes but does not have the PersistedState shape is rejected too.
import { createHash } from 'node:crypto';
import { isIpv4 } from '../address.js';
import { BUCKET_COUNT } from '../buckets/table.js';
import { MASK_FIELDS, MAX_MASK_BITS, maskBitCount, type MaskElement } from '../buckets/mask.js';
import { STATE_VERSION, type PersistedState } from './types.js';

const MAGIC = 'wccpd-state';
const HEADER = /^wccpd-state (\d+) (\d+) ([0-9a-f]{64})$/;

export function encodeState(state: PersistedState): Buffer {
  const body = Buffer.from(JSON.stringify(state), 'utf8');
  const sha = createHash('sha256').update(body).digest('hex');
  return Buffer.concat([Buffer.from(`${MAGIC} ${STATE_VERSION} ${body.length} ${sha}\n`, 'ascii'), body]);
}

export type DecodedState =
  { readonly ok: true; readonly state: PersistedState } | { readonly ok: false; readonly reason: string };

function isUint32(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0xffffffff;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

const END_REASONS: readonly unknown[] = ['duration', 'max-peer-hits', 'min-hit-ratio', null];

function isDuration(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0;
}

/** The rest of a sentence naming the first wrong field of a PersistedWarmup, or null. */
function warmupProblem(w: unknown): string | null {
  if (!isRecord(w) || !Array.isArray(w.sessions) || !Array.isArray(w.gained)) return ' is not {sessions, gained}';
  for (const [i, x] of (w.sessions as unknown[]).entries()) {
    if (
      !isRecord(x) ||
      !isIpv4(x.engine) ||
      !isDuration(x.elapsedMs) ||
      !isUint32(x.queries) ||
      !isUint32(x.peerHits) ||
      !END_REASONS.includes(x.endReason)
    )
      return `.sessions[${i}] is not a warm-up session`;
  }
  for (const [i, g] of (w.gained as unknown[]).entries()) {
    if (
      !Array.isArray(g) ||
      g.length !== 4 ||
      !Number.isInteger(g[0]) ||
      (g[0] as number) < 0 ||
      (g[0] as number) >= BUCKET_COUNT ||
      !isIpv4(g[1]) ||
      !isIpv4(g[2]) ||
      !isDuration(g[3])
    ) {
      return `.gained[${i}] is not [bucket, owner, previous owner, age]`;
    }
  }
  return null;
}

/** The rest of a sentence naming the first wrong field of a persisted mask table, or null. */
function maskProblem(m: unknown): string | null {
  if (!isRecord(m)) return ' is not {changeNumber, mask, engines}';
  if (!isUint32(m.changeNumber)) return '.changeNumber is not a 32-bit number';
  const mask = m.mask;
  if (!isRecord(mask)) return '.mask is not a Mask Element';
  for (const f of MASK_FIELDS) if (!isUint32(mask[f])) return `.mask.${f} is not a 32-bit mask`;
  const bits = maskBitCount(mask as unknown as MaskElement);
  if (bits > MAX_MASK_BITS) return `.mask has ${bits} bits set (at most ${MAX_MASK_BITS})`;
  if (!Array.isArray(m.engines)) return '.engines is not a list';
  if (m.engines.length !== 2 ** bits)
    return `.engines has ${m.engines.length} entries; its mask's ${bits} bits select ${2 ** bits} values`;
  if (!m.engines.every((e: unknown) => e === null || isIpv4(e)))
    return '.engines holds something other than an IPv4 address or null';
  return null;
}

/**
 * More admin weights than any wccpd keeps (32 engines present and 64 gone per service) is not a file it wrote; the
 * bound leaves room for a later, larger one.
 */
const MAX_ADMIN_WEIGHTS = 1024;

/** The rest of a sentence naming the first wrong entry of a service's admin weights, or null. */
function adminWeightsProblem(w: unknown): string | null {
  if (!Array.isArray(w)) return ' is not a list';
  if (w.length > MAX_ADMIN_WEIGHTS) return ` has ${w.length} entries (at most ${MAX_ADMIN_WEIGHTS})`;
  const seen = new Set<string>();
  for (const [i, x] of (w as unknown[]).entries()) {
    if (!isRecord(x) || !isIpv4(x.address)) return `[${i}].address is not an IPv4 address`;
    if (!isUint32(x.weight) || x.weight > 0xffff) return `[${i}].weight is not a 16-bit weight`;
    if (x.leftAt !== null && (typeof x.leftAt !== 'number' || !Number.isFinite(x.leftAt)))
      return `[${i}].leftAt is not a time or null`;
    if (seen.has(x.address)) return `[${i}] names ${x.address} again`;
    seen.add(x.address);
  }
  return null;
}

/** The rest of a sentence naming what is wrong with a service's load-aware memory, or null. */
function loadProblem(l: unknown): string | null {
  if (!isRecord(l)) return ' is not an object';
  const pairs = (v: unknown, first: (x: unknown) => boolean, second: (x: unknown) => boolean): boolean =>
    Array.isArray(v) &&
    v.length <= 4 * BUCKET_COUNT &&
    v.every((p: unknown) => Array.isArray(p) && p.length === 2 && first(p[0]) && second(p[1]));
  const bucket = (x: unknown): boolean => isUint32(x) && x < BUCKET_COUNT;
  const time = (x: unknown): boolean => typeof x === 'number' && Number.isFinite(x);
  const count = (x: unknown): boolean => typeof x === 'number' && Number.isInteger(x) && Math.abs(x) <= BUCKET_COUNT;
  if (!pairs(l.holds, bucket, time)) return '.holds is not a list of [bucket, time]';
  if (!pairs(l.spent, time, count)) return '.spent is not a list of [time, moves]';
  if (!pairs(l.offsets, isIpv4, count)) return '.offsets is not a list of [IPv4 address, count]';
  if (!pairs(l.pins, bucket, isIpv4)) return '.pins is not a list of [bucket, IPv4 address]';
  return null;
}

/** A sentence naming the first field that is wrong, or null when the value is a PersistedState. */
function shapeProblem(v: unknown): string | null {
  if (!isRecord(v)) return 'body is not an object';
  if (v.version !== STATE_VERSION)
    return `unsupported state version ${JSON.stringify(v.version)} (this wccpd reads ${STATE_VERSION})`;
  if (typeof v.savedAt !== 'number' || !Number.isFinite(v.savedAt)) return 'savedAt is not a number';
  if (!Array.isArray(v.services)) return 'services is not a list';
  // A service listed twice would be restored twice into one group, each half overwriting the other.
  const seen = new Map<number, number>();
  for (const [i, s] of (v.services as unknown[]).entries()) {
    const at = `services[${i}]`;
    if (!isRecord(s)) return `${at} is not an object`;
    if (!isUint32(s.id) || s.id > 255) return `${at}.id is not a service id`;
    const first = seen.get(s.id);
    if (first !== undefined) return `${at}.id ${s.id} is listed already (services[${first}])`;
    seen.set(s.id, i);
    if (!isUint32(s.receiveId)) return `${at}.receiveId is not a 32-bit counter`;
    const t = s.table;
    if (!isRecord(t) || !isUint32(t.changeNumber)) return `${at}.table.changeNumber is not a 32-bit number`;
    if (!Array.isArray(t.buckets) || t.buckets.length !== BUCKET_COUNT)
      return `${at}.table.buckets does not have ${BUCKET_COUNT} entries`;
    if (!t.buckets.every((b: unknown) => b === null || isIpv4(b))) {
      return `${at}.table.buckets holds something other than an IPv4 address or null`;
    }
    if (s.mask !== undefined) {
      const problem = maskProblem(s.mask);
      if (problem !== null) return `${at}.mask${problem}`;
    }
    if (!isRecord(s.counters) || !Object.values(s.counters).every((c) => typeof c === 'number' && Number.isFinite(c))) {
      return `${at}.counters is not a map of names to numbers`;
    }
    if (
      s.adminDrained !== undefined &&
      !(Array.isArray(s.adminDrained) && s.adminDrained.every((a: unknown) => isIpv4(a)))
    ) {
      return `${at}.adminDrained is not a list of IPv4 addresses`;
    }
    if (s.adminWeights !== undefined) {
      const problem = adminWeightsProblem(s.adminWeights);
      if (problem !== null) return `${at}.adminWeights${problem}`;
    }
    if (s.load !== undefined) {
      const problem = loadProblem(s.load);
      if (problem !== null) return `${at}.load${problem}`;
    }
    if (s.warmup !== undefined) {
      const problem = warmupProblem(s.warmup);
      if (problem !== null) return `${at}.warmup${problem}`;
    }
    if (!Array.isArray(s.engines)) return `${at}.engines is not a list`;
    for (const [j, e] of (s.engines as unknown[]).entries()) {
      const eat = `${at}.engines[${j}]`;
      if (!isRecord(e) || !isIpv4(e.address)) return `${eat}.address is not an IPv4 address`;
      if (!isUint32(e.weight) || e.weight > 0xffff) return `${eat}.weight is not a 16-bit weight`;
      if (typeof e.lastState !== 'string' || e.lastState === '') return `${eat}.lastState is not a state name`;
      if (e.leftAt !== null && (typeof e.leftAt !== 'number' || !Number.isFinite(e.leftAt)))
        return `${eat}.leftAt is not a time or null`;
      if (
        !Array.isArray(e.historicalBuckets) ||
        !e.historicalBuckets.every(
          (b: unknown) => Number.isInteger(b) && (b as number) >= 0 && (b as number) < BUCKET_COUNT,
        )
      ) {
        return `${eat}.historicalBuckets is not a list of bucket numbers`;
      }
    }
  }
  return null;
}

export function decodeState(file: Buffer): DecodedState {
  const nl = file.indexOf(0x0a);
  if (nl < 0) return { ok: false, reason: file.length === 0 ? 'empty file' : 'truncated: no complete header line' };
  const header = HEADER.exec(file.subarray(0, nl).toString('latin1'));
  if (header === null) return { ok: false, reason: 'not a wccpd state file (bad header line)' };
  if (Number(header[1]) !== STATE_VERSION)
    return { ok: false, reason: `unsupported state format version ${header[1]}` };
  const body = file.subarray(nl + 1);
  const declared = Number(header[2]);
  if (body.length < declared) return { ok: false, reason: `truncated: body has ${body.length} of ${declared} bytes` };
  if (body.length > declared) return { ok: false, reason: `${body.length - declared} unexpected bytes after the body` };
  if (createHash('sha256').update(body).digest('hex') !== header[3])
    return { ok: false, reason: 'checksum mismatch (the file is corrupt)' };
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch (e) {
    return { ok: false, reason: `body is not JSON: ${(e as Error).message}` };
  }
  const problem = shapeProblem(value);
  if (problem !== null) return { ok: false, reason: problem };
  return { ok: true, state: value as PersistedState };
}
