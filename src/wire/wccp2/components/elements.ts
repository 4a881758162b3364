// The elements components share (draft 5.7), read and written: the Router ID, Router Assignment and Assignment Key
// elements, IPv4 lists, Web-Cache Identity Elements with their assignment data (a bucket vector or Mask/Value Sets),
// the hash and mask assignment bodies, and a sub-length-prefixed body padded to 4 bytes. Readers stay inside their
// Reader's bounds; writers throw Wccp2EncodeError for what the wire cannot carry.
import { fail, Reader, Wccp2EncodeError, Writer } from '../bytes.js';
import {
  AssignmentMethod,
  BUCKET_ALTERNATE_FLAG,
  BUCKET_UNASSIGNED,
  BUCKETS,
  MAX_CACHES,
  MAX_ROUTERS,
  WebCacheFlag,
} from '../constants.js';
import type {
  AssignmentBucket,
  AssignmentKey,
  HashAssignment,
  MaskAssignment,
  MaskValueSet,
  RouterAssignmentElement,
  RouterIdElement,
  WebCacheAssignmentData,
  WebCacheIdentityElement,
} from '../types.js';

// ---------------------------------------------------------------- reading

export function routerIdElement(r: Reader): RouterIdElement {
  return { routerId: r.ipv4('Router ID'), receiveId: r.u32('Receive ID') };
}

export function assignmentKey(r: Reader): AssignmentKey {
  return { address: r.ipv4('Assignment Key IP'), changeNumber: r.u32('Assignment Key change number') };
}

export function ipv4List(r: Reader, what: string, limit: number, reason: string): string[] {
  const n = r.count(what, 4, limit, reason);
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(r.ipv4(what));
  return out;
}

export function routerAssignmentElements(r: Reader): RouterAssignmentElement[] {
  const n = r.count('Number of Routers', 12, MAX_ROUTERS, 'too-many-routers');
  const out: RouterAssignmentElement[] = [];
  for (let i = 0; i < n; i++) {
    out.push({ routerId: r.ipv4('Router ID'), receiveId: r.u32('Receive ID'), changeNumber: r.u32('Change Number') });
  }
  return out;
}

export function maskValueSets(r: Reader): MaskValueSet[] {
  // Smallest set: mask element 12 + value count 4.
  const n = r.count('Number of Mask/Value Set Elements', 16, null, 'truncated');
  const sets: MaskValueSet[] = [];
  for (let i = 0; i < n; i++) {
    const mask = {
      srcAddrMask: r.u32('Source Address Mask'),
      dstAddrMask: r.u32('Destination Address Mask'),
      srcPortMask: r.u16('Source Port Mask'),
      dstPortMask: r.u16('Destination Port Mask'),
    };
    const m = r.count('Number of Value Elements', 16, null, 'truncated');
    const values = [];
    for (let j = 0; j < m; j++) {
      values.push({
        srcAddrValue: r.u32('Source Address Value'),
        dstAddrValue: r.u32('Destination Address Value'),
        srcPortValue: r.u16('Source Port Value'),
        dstPortValue: r.u16('Destination Port Value'),
        webCache: r.ipv4('Web-Cache IP'),
      });
    }
    sets.push({ mask, values });
  }
  return sets;
}

function bucketVector(r: Reader): number[] {
  const bytes = r.bytes(32, 'Bucket Block');
  const buckets: number[] = [];
  for (let n = 0; n < BUCKETS; n++) if (((bytes[n >> 3] as number) & (1 << (n & 7))) !== 0) buckets.push(n);
  return buckets;
}

/** One Web-Cache Identity Element; `bounded` when it is alone in its component (so other data types can be kept). */
export function webCacheIdentityElement(r: Reader, bounded: boolean): WebCacheIdentityElement {
  const address = r.ipv4('WC Address');
  const hashRevision = r.u16('Hash Revision');
  const flagsAt = r.pos;
  const rawFlags = r.u16('Flags');
  const flags = rawFlags & ~WebCacheFlag.ASSIGNMENT_TYPE_MASK;
  const assignmentType = (rawFlags & WebCacheFlag.ASSIGNMENT_TYPE_MASK) >> 1;
  const assignment = webCacheAssignmentData(r, bounded, address, assignmentType, flagsAt);
  return { address, hashRevision, flags, assignment, weight: r.u16('Weight'), status: r.u16('Status') };
}

/** The element's assignment data: a bucket vector (hash), Mask/Value Sets (mask), or opaque bytes (v2.01's others). */
function webCacheAssignmentData(
  r: Reader,
  bounded: boolean,
  address: string,
  assignmentType: number,
  flagsAt: number,
): WebCacheAssignmentData {
  if (assignmentType === AssignmentMethod.HASH) return { type: 'hash', buckets: bucketVector(r) };
  if (assignmentType === AssignmentMethod.MASK) return { type: 'mask', sets: maskValueSets(r) };
  if (!bounded || r.remaining < 4) {
    fail(
      r.where,
      flagsAt,
      'unsupported-assignment-type',
      `web cache ${address} uses assignment data type ${assignmentType} (v2.01), whose length is only known when the ` +
        'element is alone in a WC_ID_INFO component',
    );
  }
  return { type: 'other', assignmentType: assignmentType as 2 | 3, data: r.hex(r.remaining - 4, 'Assignment Data') };
}

export function hashAssignment(r: Reader): HashAssignment {
  const key = assignmentKey(r);
  const routers = routerAssignmentElements(r);
  const caches = ipv4List(r, 'Number of Web-Caches', MAX_CACHES, 'too-many-caches');
  const at = r.pos;
  const bytes = r.bytes(BUCKETS, 'Buckets');
  const buckets: AssignmentBucket[] = [];
  for (let i = 0; i < BUCKETS; i++) {
    const b = bytes[i] as number;
    if (b === BUCKET_UNASSIGNED) {
      buckets.push(null);
      continue;
    }
    const cache = b & ~BUCKET_ALTERNATE_FLAG;
    if (cache >= caches.length) {
      fail(
        r.where,
        at + i,
        'bad-bucket',
        `bucket ${i} names web-cache index ${cache} but the assignment lists ${caches.length} web caches`,
      );
    }
    buckets.push({ cache, alternate: (b & BUCKET_ALTERNATE_FLAG) !== 0 });
  }
  return { key, routers, caches, buckets };
}

export function maskAssignment(r: Reader): MaskAssignment {
  return { key: assignmentKey(r), routers: routerAssignmentElements(r), sets: maskValueSets(r) };
}

/** Reads a sub-length-prefixed body (Alternate Assignment, Command Extension) followed only by zero padding. */
export function subBody<T>(r: Reader, length: number, what: string, decode: (sub: Reader) => T): T {
  r.need(length, what);
  const sub = new Reader(r.buf, r.pos, r.pos + length, r.where);
  const value = decode(sub);
  if (sub.remaining !== 0) {
    fail(r.where, sub.pos, 'trailing-bytes', `${sub.remaining} bytes after the ${what} inside its stated length`);
  }
  r.pos += length;
  // The component is padded to 4 bytes (draft 5.6) with exactly the zeros that alignment needs, so it re-encodes
  // exactly.
  const padAt = r.pos;
  const expected = (4 - ((4 + length) % 4)) % 4;
  const pad = r.bytes(r.remaining, 'padding');
  if (pad.length !== expected || pad.some((b) => b !== 0)) {
    fail(
      r.where,
      padAt,
      'bad-padding',
      `${pad.length} bytes follow the ${length}-byte ${what}; expected ${expected} zero bytes of 4-byte alignment`,
    );
  }
  return value;
}

// ---------------------------------------------------------------- writing

export function limit(n: number, max: number, field: string): void {
  if (n > max) throw new Wccp2EncodeError(field, `${n} entries; the protocol allows at most ${max}`);
}

export function putKey(w: Writer, k: AssignmentKey): void {
  w.ipv4(k.address, 'Assignment Key IP');
  w.u32(k.changeNumber, 'Assignment Key change number');
}

export function putRouterAssignments(w: Writer, rs: readonly RouterAssignmentElement[]): void {
  limit(rs.length, MAX_ROUTERS, 'Router Assignment Elements');
  w.u32(rs.length, 'Number of Routers');
  for (const r of rs) {
    w.ipv4(r.routerId, 'Router ID');
    w.u32(r.receiveId, 'Receive ID');
    w.u32(r.changeNumber, 'Change Number');
  }
}

export function putIpv4List(w: Writer, list: readonly string[], max: number, field: string): void {
  limit(list.length, max, field);
  w.u32(list.length, field);
  for (const a of list) w.ipv4(a, field);
}

export function putSets(w: Writer, sets: readonly MaskValueSet[]): void {
  w.u32(sets.length, 'Number of Mask/Value Set Elements');
  for (const s of sets) {
    w.u32(s.mask.srcAddrMask, 'Source Address Mask');
    w.u32(s.mask.dstAddrMask, 'Destination Address Mask');
    w.u16(s.mask.srcPortMask, 'Source Port Mask');
    w.u16(s.mask.dstPortMask, 'Destination Port Mask');
    w.u32(s.values.length, 'Number of Value Elements');
    for (const v of s.values) {
      w.u32(v.srcAddrValue, 'Source Address Value');
      w.u32(v.dstAddrValue, 'Destination Address Value');
      w.u16(v.srcPortValue, 'Source Port Value');
      w.u16(v.dstPortValue, 'Destination Port Value');
      w.ipv4(v.webCache, 'Web-Cache IP');
    }
  }
}

export function putWebCacheElement(w: Writer, e: WebCacheIdentityElement): void {
  w.ipv4(e.address, 'WC Address');
  w.u16(e.hashRevision, 'Hash Revision');
  const a = e.assignment;
  const t = a.type === 'hash' ? AssignmentMethod.HASH : a.type === 'mask' ? AssignmentMethod.MASK : a.assignmentType;
  w.u16(((e.flags & ~WebCacheFlag.ASSIGNMENT_TYPE_MASK) | (t << 1)) & 0xffff, 'Flags');
  if (a.type === 'hash') {
    const block = new Array<number>(32).fill(0);
    for (const n of a.buckets) {
      if (!Number.isInteger(n) || n < 0 || n >= BUCKETS) throw new Wccp2EncodeError('Bucket Block', `bucket ${n}`);
      block[n >> 3] = (block[n >> 3] as number) | (1 << (n & 7));
    }
    w.raw(block);
  } else if (a.type === 'mask') {
    putSets(w, a.sets);
  } else {
    w.hex(a.data, 'Assignment Data');
  }
  w.u16(e.weight, 'Weight');
  w.u16(e.status, 'Status');
}

export function putHashAssignment(w: Writer, a: HashAssignment): void {
  putKey(w, a.key);
  putRouterAssignments(w, a.routers);
  putIpv4List(w, a.caches, MAX_CACHES, 'Number of Web-Caches');
  if (a.buckets.length !== BUCKETS) throw new Wccp2EncodeError('Buckets', `${a.buckets.length} entries, need 256`);
  for (const b of a.buckets) {
    if (b === null) {
      w.u8(BUCKET_UNASSIGNED, 'Bucket');
      continue;
    }
    if (b.cache >= a.caches.length) {
      throw new Wccp2EncodeError('Bucket', `web-cache index ${b.cache} but only ${a.caches.length} web caches`);
    }
    w.u8(b.cache | (b.alternate ? BUCKET_ALTERNATE_FLAG : 0), 'Bucket');
  }
}

/** Writes a sub-length-prefixed body and pads the component to 4 bytes. */
export function putSubBody(w: Writer, field: string, body: (sub: Writer) => void): void {
  const sub = new Writer();
  body(sub);
  w.u16(sub.length, field);
  w.raw(sub.toBuffer());
  w.pad4();
}
