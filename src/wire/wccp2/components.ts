// Component bodies (the bytes after a component's 4-byte type/length header): one entry per kind in COMPONENTS, at
// the end, holds its type code, decoder, encoder and description. Each decoder reads only inside its Reader's bounds
// and must consume the body exactly.
import { fail, Reader, Wccp2EncodeError, Writer } from './bytes.js';
import {
  AssignmentMethod,
  BUCKET_ALTERNATE_FLAG,
  BUCKET_UNASSIGNED,
  BUCKETS,
  CapabilityType,
  CommandType,
  ComponentType,
  MAX_CACHES,
  MAX_ROUTERS,
  MD5_DIGEST_LENGTH,
  SecurityOption,
  ServiceType,
  WebCacheFlag,
} from './constants.js';
import { bucketTableText, capabilityText, serviceFlagsText, setsText, webCacheText } from './text.js';
import type {
  AddressTable,
  AlternateAssignment,
  AssignmentBucket,
  AssignmentInfo,
  AssignmentKey,
  AssignmentMap,
  CapabilitiesInfo,
  CapabilityElement,
  CommandExtension,
  Component,
  HashAssignment,
  MaskAssignment,
  MaskValueSet,
  RouterAssignmentElement,
  RouterIdElement,
  RouterIdentityInfo,
  RouterQueryInfo,
  RouterViewInfo,
  SecurityInfo,
  ServiceInfo,
  UnknownComponent,
  WebCacheAssignmentData,
  WebCacheIdentityElement,
  WebCacheIdentityInfo,
  WebCacheViewInfo,
} from './types.js';

// ---------------------------------------------------------------- shared elements

function routerIdElement(r: Reader): RouterIdElement {
  return { routerId: r.ipv4('Router ID'), receiveId: r.u32('Receive ID') };
}

function assignmentKey(r: Reader): AssignmentKey {
  return { address: r.ipv4('Assignment Key IP'), changeNumber: r.u32('Assignment Key change number') };
}

function ipv4List(r: Reader, what: string, limit: number, reason: string): string[] {
  const n = r.count(what, 4, limit, reason);
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(r.ipv4(what));
  return out;
}

function routerAssignmentElements(r: Reader): RouterAssignmentElement[] {
  const n = r.count('Number of Routers', 12, MAX_ROUTERS, 'too-many-routers');
  const out: RouterAssignmentElement[] = [];
  for (let i = 0; i < n; i++) {
    out.push({ routerId: r.ipv4('Router ID'), receiveId: r.u32('Receive ID'), changeNumber: r.u32('Change Number') });
  }
  return out;
}

function maskValueSets(r: Reader): MaskValueSet[] {
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
function webCacheIdentityElement(r: Reader, bounded: boolean): WebCacheIdentityElement {
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

function hashAssignment(r: Reader): HashAssignment {
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

function maskAssignment(r: Reader): MaskAssignment {
  return { key: assignmentKey(r), routers: routerAssignmentElements(r), sets: maskValueSets(r) };
}

// ---------------------------------------------------------------- component decoders

function security(r: Reader): SecurityInfo {
  const at = r.pos;
  const option = r.u32('Security Option');
  if (option === SecurityOption.NONE && r.remaining === 0) return { kind: 'security', option: 'none' };
  if (option === SecurityOption.MD5 && r.remaining === MD5_DIGEST_LENGTH) {
    return { kind: 'security', option: 'md5', digest: r.hex(MD5_DIGEST_LENGTH, 'MD5 digest') };
  }
  return fail(
    r.where,
    at,
    'bad-security',
    `security option ${option} with a ${r.remaining + 4}-byte body; expected option 0 (4 bytes) or 1 (MD5, 20 bytes)`,
  );
}

function service(r: Reader): ServiceInfo {
  const at = r.pos;
  const t = r.u8('Service Type');
  if (t !== ServiceType.STANDARD && t !== ServiceType.DYNAMIC) {
    fail(r.where, at, 'bad-service-type', `service type ${t}; expected 0 (standard) or 1 (dynamic)`);
  }
  const serviceId = r.u8('Service ID');
  const priority = r.u8('Priority');
  const protocol = r.u8('Protocol');
  const flags = r.u32('Service Flags');
  const ports: number[] = [];
  for (let i = 0; i < 8; i++) ports.push(r.u16(`Port ${i}`));
  return {
    kind: 'service',
    serviceType: t === ServiceType.STANDARD ? 'standard' : 'dynamic',
    serviceId,
    priority,
    protocol,
    flags,
    ports,
  };
}

function routerIdentity(r: Reader): RouterIdentityInfo {
  return {
    kind: 'router-identity',
    router: routerIdElement(r),
    sentTo: r.ipv4('Sent To Address'),
    receivedFrom: ipv4List(r, 'Number Received From', MAX_CACHES, 'too-many-caches'),
  };
}

function webCacheIdentity(r: Reader): WebCacheIdentityInfo {
  return { kind: 'web-cache-identity', element: webCacheIdentityElement(r, true) };
}

function routerView(r: Reader): RouterViewInfo {
  const memberChangeNumber = r.u32('Member Change Number');
  const key = assignmentKey(r);
  const routers = ipv4List(r, 'Number of Routers', MAX_ROUTERS, 'too-many-routers');
  // Smallest Web-Cache Identity Element: 12 bytes + 4 (mask, no sets) = 16.
  const n = r.count('Number of Web-Caches', 16, MAX_CACHES, 'too-many-caches');
  const caches: WebCacheIdentityElement[] = [];
  for (let i = 0; i < n; i++) caches.push(webCacheIdentityElement(r, false));
  return { kind: 'router-view', memberChangeNumber, assignmentKey: key, routers, caches };
}

function webCacheView(r: Reader): WebCacheViewInfo {
  const changeNumber = r.u32('Change Number');
  const nr = r.count('Number of Routers', 8, MAX_ROUTERS, 'too-many-routers');
  const routers: RouterIdElement[] = [];
  for (let i = 0; i < nr; i++) routers.push(routerIdElement(r));
  return {
    kind: 'web-cache-view',
    changeNumber,
    routers,
    caches: ipv4List(r, 'Number of Web-Caches', MAX_CACHES, 'too-many-caches'),
  };
}

function assignmentInfo(r: Reader): AssignmentInfo {
  return { kind: 'assignment-info', ...hashAssignment(r) };
}

function routerQuery(r: Reader): RouterQueryInfo {
  return {
    kind: 'router-query',
    routerId: r.ipv4('Router ID'),
    receiveId: r.u32('Receive ID'),
    sentTo: r.ipv4('Sent To IP'),
    target: r.ipv4('Target IP'),
  };
}

function capabilities(r: Reader): CapabilitiesInfo {
  const elements: CapabilityElement[] = [];
  while (r.remaining > 0) {
    const type = r.u16('Capability Type');
    const length = r.u16('Capability Length');
    if (type >= CapabilityType.FORWARDING_METHOD && type <= CapabilityType.TIMER_SCALE && length === 4) {
      elements.push({ form: 'value', type, value: r.u32('Capability Value') });
    } else {
      elements.push({ form: 'raw', type, data: r.hex(length, 'Capability Value') });
    }
  }
  return { kind: 'capabilities', elements };
}

/** Reads a sub-length-prefixed body (Alternate Assignment, Command Extension) followed only by zero padding. */
function subBody<T>(r: Reader, length: number, what: string, decode: (sub: Reader) => T): T {
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

function alternateAssignment(r: Reader): AlternateAssignment {
  const assignmentType = r.u16('Assignment Type');
  const length = r.u16('Assignment Length');
  const assignment = subBody(r, length, 'Assignment Body', (sub): AlternateAssignment['assignment'] => {
    if (assignmentType === AssignmentMethod.HASH) return { type: 'hash', ...hashAssignment(sub) };
    if (assignmentType === AssignmentMethod.MASK) return { type: 'mask', ...maskAssignment(sub) };
    return { type: 'other', assignmentType, data: sub.hex(sub.remaining, 'Assignment Body') };
  });
  return { kind: 'alternate-assignment', assignment };
}

function assignmentMap(r: Reader): AssignmentMap {
  return { kind: 'assignment-map', sets: maskValueSets(r) };
}

function commandExtension(r: Reader): CommandExtension {
  const commandType = r.u16('Command Type');
  const length = r.u16('Command Length');
  const data = subBody(r, length, 'Command Data', (sub) => sub.hex(sub.remaining, 'Command Data'));
  return { kind: 'command-extension', commandType, data };
}

function addressTable(r: Reader): AddressTable {
  const family = r.u16('Address Family');
  const lenAt = r.pos;
  const addressLength = r.u16('Address Length');
  const expected = family === 1 ? 4 : family === 2 ? 16 : null;
  if ((expected !== null && addressLength !== expected) || addressLength === 0) {
    fail(r.where, lenAt, 'bad-length', `address length ${addressLength} for family ${family}`);
  }
  const n = r.count('Number of Addresses', addressLength, null, 'truncated');
  const addresses: string[] = [];
  for (let i = 0; i < n; i++) {
    const b = r.bytes(addressLength, 'Address');
    addresses.push(
      family === 1
        ? b.join('.')
        : family === 2
          ? Array.from({ length: 8 }, (_, k) =>
              (((b[2 * k] as number) << 8) | (b[2 * k + 1] as number)).toString(16),
            ).join(':')
          : Buffer.from(b).toString('hex'),
    );
  }
  return { kind: 'address-table', family, addressLength, addresses };
}

// ---------------------------------------------------------------- encoders

function limit(n: number, max: number, field: string): void {
  if (n > max) throw new Wccp2EncodeError(field, `${n} entries; the protocol allows at most ${max}`);
}

function putKey(w: Writer, k: AssignmentKey): void {
  w.ipv4(k.address, 'Assignment Key IP');
  w.u32(k.changeNumber, 'Assignment Key change number');
}

function putRouterAssignments(w: Writer, rs: readonly RouterAssignmentElement[]): void {
  limit(rs.length, MAX_ROUTERS, 'Router Assignment Elements');
  w.u32(rs.length, 'Number of Routers');
  for (const r of rs) {
    w.ipv4(r.routerId, 'Router ID');
    w.u32(r.receiveId, 'Receive ID');
    w.u32(r.changeNumber, 'Change Number');
  }
}

function putIpv4List(w: Writer, list: readonly string[], max: number, field: string): void {
  limit(list.length, max, field);
  w.u32(list.length, field);
  for (const a of list) w.ipv4(a, field);
}

function putSets(w: Writer, sets: readonly MaskValueSet[]): void {
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

function putWebCacheElement(w: Writer, e: WebCacheIdentityElement): void {
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

function putHashAssignment(w: Writer, a: HashAssignment): void {
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
function putSubBody(w: Writer, field: string, body: (sub: Writer) => void): void {
  const sub = new Writer();
  body(sub);
  w.u16(sub.length, field);
  w.raw(sub.toBuffer());
  w.pad4();
}

// ---------------------------------------------------------------- the component table

type KnownComponent = Exclude<Component, UnknownComponent>;
export type KnownKind = KnownComponent['kind'];
type Of<K extends KnownKind> = Extract<KnownComponent, { kind: K }>;

/**
 * Everything wccpd knows of one component kind, in one place: its type code (whose ComponentType key is its wire
 * name), and how to decode, encode and describe its body. The table's type demands an entry for every kind.
 */
export interface ComponentDef<K extends KnownKind> {
  readonly type: (typeof ComponentType)[keyof typeof ComponentType];
  /** Reads the whole body from r (the message decoder checks that nothing is left). */
  decode(r: Reader): Of<K>;
  /** Writes the body; throws Wccp2EncodeError for values the wire cannot carry. */
  encode(c: Of<K>, w: Writer): void;
  /** Text for `wccpctl decode`: the first line follows the component's header, the others are indented. */
  describe(c: Of<K>): string[];
}

export const COMPONENTS: { readonly [K in KnownKind]: ComponentDef<K> } = {
  security: {
    type: ComponentType.SECURITY_INFO,
    decode: security,
    encode(c, w) {
      if (c.option === 'none') {
        w.u32(SecurityOption.NONE, 'Security Option');
      } else {
        w.u32(SecurityOption.MD5, 'Security Option');
        w.hex(c.digest, 'MD5 digest', MD5_DIGEST_LENGTH);
      }
    },
    describe: (c) => [c.option === 'none' ? 'option=0 (none)' : `option=1 (MD5) digest=${c.digest}`],
  },
  service: {
    type: ComponentType.SERVICE_INFO,
    decode: service,
    encode(c, w) {
      w.u8(c.serviceType === 'standard' ? ServiceType.STANDARD : ServiceType.DYNAMIC, 'Service Type');
      w.u8(c.serviceId, 'Service ID');
      w.u8(c.priority, 'Priority');
      w.u8(c.protocol, 'Protocol');
      w.u32(c.flags, 'Service Flags');
      if (c.ports.length !== 8) throw new Wccp2EncodeError('Ports', `${c.ports.length} ports, need exactly 8`);
      for (const p of c.ports) w.u16(p, 'Port');
    },
    describe: (c) => [
      `type=${c.serviceType === 'standard' ? 0 : 1} ${c.serviceType}, id=${c.serviceId},` +
        ` priority=${c.priority}, protocol=${c.protocol}, flags=${serviceFlagsText(c.flags)}, ports ${c.ports.join(',')}`,
    ],
  },
  'router-identity': {
    type: ComponentType.ROUTER_ID_INFO,
    decode: routerIdentity,
    encode(c, w) {
      w.ipv4(c.router.routerId, 'Router ID');
      w.u32(c.router.receiveId, 'Receive ID');
      w.ipv4(c.sentTo, 'Sent To Address');
      putIpv4List(w, c.receivedFrom, MAX_CACHES, 'Number Received From');
    },
    describe: (c) => [
      `router ${c.router.routerId} receive_id=${c.router.receiveId}, sent_to=${c.sentTo},` +
        ` received_from=[${c.receivedFrom.join(', ')}]`,
    ],
  },
  'web-cache-identity': {
    type: ComponentType.WC_ID_INFO,
    decode: webCacheIdentity,
    encode: (c, w) => putWebCacheElement(w, c.element),
    describe: (c) => webCacheText(c.element, ''),
  },
  'router-view': {
    type: ComponentType.RTR_VIEW_INFO,
    decode: routerView,
    encode(c, w) {
      w.u32(c.memberChangeNumber, 'Member Change Number');
      putKey(w, c.assignmentKey);
      putIpv4List(w, c.routers, MAX_ROUTERS, 'Number of Routers');
      limit(c.caches.length, MAX_CACHES, 'Number of Web-Caches');
      w.u32(c.caches.length, 'Number of Web-Caches');
      for (const e of c.caches) {
        if (e.assignment.type === 'other') {
          throw new Wccp2EncodeError('Router View', 'a web cache with assignment data type 2/3 cannot be in a view');
        }
        putWebCacheElement(w, e);
      }
    },
    describe: (c) => [
      `member change number=${c.memberChangeNumber},` +
        ` key ${c.assignmentKey.address}/${c.assignmentKey.changeNumber},` +
        ` ${c.routers.length} routers [${c.routers.join(', ')}], ${c.caches.length} caches`,
      ...c.caches.flatMap((e) => webCacheText(e, '  ')),
    ],
  },
  'web-cache-view': {
    type: ComponentType.WC_VIEW_INFO,
    decode: webCacheView,
    encode(c, w) {
      w.u32(c.changeNumber, 'Change Number');
      limit(c.routers.length, MAX_ROUTERS, 'Number of Routers');
      w.u32(c.routers.length, 'Number of Routers');
      for (const r of c.routers) {
        w.ipv4(r.routerId, 'Router ID');
        w.u32(r.receiveId, 'Receive ID');
      }
      putIpv4List(w, c.caches, MAX_CACHES, 'Number of Web-Caches');
    },
    describe: (c) => [
      `change number=${c.changeNumber}, ${c.routers.length} routers` +
        ` [${c.routers.map((r) => `{${r.routerId}, received_id ${r.receiveId}}`).join(', ')}],` +
        ` ${c.caches.length} caches [${c.caches.join(', ')}]`,
    ],
  },
  'assignment-info': {
    type: ComponentType.REDIRECT_ASSIGNMENT,
    decode: assignmentInfo,
    encode: (c, w) => putHashAssignment(w, c),
    describe: (c) => [
      `key ${c.key.address}/${c.key.changeNumber}, routers ` +
        `[${c.routers.map((r) => `{${r.routerId} receive_id ${r.receiveId} change ${r.changeNumber}}`).join(', ')}],` +
        ` caches [${c.caches.join(', ')}]`,
      ...bucketTableText(c.caches, c.buckets, '  '),
    ],
  },
  'router-query': {
    type: ComponentType.QUERY_INFO,
    decode: routerQuery,
    encode(c, w) {
      w.ipv4(c.routerId, 'Router ID');
      w.u32(c.receiveId, 'Receive ID');
      w.ipv4(c.sentTo, 'Sent To IP');
      w.ipv4(c.target, 'Target IP');
    },
    describe: (c) => [`router ${c.routerId} receive_id=${c.receiveId}, sent_to=${c.sentTo}, target=${c.target}`],
  },
  capabilities: {
    type: ComponentType.CAPABILITY_INFO,
    decode: capabilities,
    encode(c, w) {
      for (const e of c.elements) {
        w.u16(e.type, 'Capability Type');
        if (e.form === 'value') {
          w.u16(4, 'Capability Length');
          w.u32(e.value, 'Capability Value');
        } else {
          const data = Buffer.from(e.data, 'hex');
          w.u16(data.length, 'Capability Length');
          w.hex(e.data, 'Capability Value');
        }
      }
    },
    describe: (c) => [c.elements.map(capabilityText).join(' ')],
  },
  'alternate-assignment': {
    type: ComponentType.ALT_ASSIGNMENT,
    decode: alternateAssignment,
    encode(c, w) {
      const a = c.assignment;
      w.u16(
        a.type === 'hash' ? AssignmentMethod.HASH : a.type === 'mask' ? AssignmentMethod.MASK : a.assignmentType,
        'Assignment Type',
      );
      putSubBody(w, 'Assignment Length', (sub) => {
        if (a.type === 'hash') putHashAssignment(sub, a);
        else if (a.type === 'mask') {
          putKey(sub, a.key);
          putRouterAssignments(sub, a.routers);
          putSets(sub, a.sets);
        } else sub.hex(a.data, 'Assignment Body');
      });
    },
    describe(c) {
      const a = c.assignment;
      if (a.type === 'hash') {
        return [
          `hash: key ${a.key.address}/${a.key.changeNumber}, caches [${a.caches.join(', ')}]`,
          ...bucketTableText(a.caches, a.buckets, '  '),
        ];
      }
      if (a.type === 'mask') return [`mask: key ${a.key.address}/${a.key.changeNumber}`, ...setsText(a.sets, '  ')];
      return [`assignment type ${a.assignmentType}: 0x${a.data}`];
    },
  },
  'assignment-map': {
    type: ComponentType.ASSIGN_MAP,
    decode: assignmentMap,
    encode: (c, w) => putSets(w, c.sets),
    describe: (c) => [`${c.sets.length} mask/value sets`, ...setsText(c.sets, '  ')],
  },
  'command-extension': {
    type: ComponentType.COMMAND_EXTENSION,
    decode: commandExtension,
    encode(c, w) {
      w.u16(c.commandType, 'Command Type');
      putSubBody(w, 'Command Length', (sub) => sub.hex(c.data, 'Command Data'));
    },
    describe(c) {
      const name =
        c.commandType === CommandType.SHUTDOWN
          ? 'SHUTDOWN'
          : c.commandType === CommandType.SHUTDOWN_RESPONSE
            ? 'SHUTDOWN_RESPONSE'
            : 'unknown command';
      const ip = c.data.length === 8 ? ` ${Buffer.from(c.data, 'hex').join('.')}` : '';
      return [`command ${c.commandType} ${name}${ip} data=0x${c.data}`];
    },
  },
  'address-table': {
    type: ComponentType.ADDRESS_TABLE,
    decode: addressTable,
    encode(c, w) {
      w.u16(c.family, 'Address Family');
      w.u16(c.addressLength, 'Address Length');
      w.u32(c.addresses.length, 'Number of Addresses');
      for (const a of c.addresses) putAddress(w, c, a);
    },
    describe: (c) => [
      `family=${c.family}, address length=${c.addressLength}, ${c.addresses.length} addresses:` +
        ` ${c.addresses.map((a, i) => `${i + 1}=${a}`).join(' ')}`,
    ],
  },
};

const BY_TYPE: ReadonlyMap<number, ComponentDef<KnownKind>> = new Map(
  (Object.values(COMPONENTS) as ComponentDef<KnownKind>[]).map((d) => [d.type, d]),
);
const NAMES: ReadonlyMap<number, string> = new Map(Object.entries(ComponentType).map(([name, type]) => [type, name]));

/** The definition of a component type code, or undefined for a type kept raw as 'unknown'. */
export function componentDef(type: number): ComponentDef<KnownKind> | undefined {
  return BY_TYPE.get(type);
}

/** Wire name of a component type, as Squid and the draft use it (also DecodeError.component). */
export function componentName(type: number): string {
  return NAMES.get(type) ?? `component type ${type}`;
}

export function componentTypeOf(c: Component): number {
  return c.kind === 'unknown' ? c.type : COMPONENTS[c.kind].type;
}

export function encodeBody(c: Component, w: Writer): void {
  if (c.kind === 'unknown') w.hex(c.data, 'component data');
  else (COMPONENTS[c.kind] as ComponentDef<KnownKind>).encode(c, w);
}

export function describeBody(c: Component): string[] {
  if (c.kind === 'unknown') return [`unknown component, ${c.data.length / 2} bytes kept: 0x${c.data}`];
  return (COMPONENTS[c.kind] as ComponentDef<KnownKind>).describe(c);
}

function putAddress(w: Writer, t: AddressTable, a: string): void {
  if (t.family === 1) {
    w.ipv4(a, 'Address');
  } else if (t.family === 2) {
    const groups = a.split(':');
    if (groups.length !== 8 || groups.some((g) => !/^[0-9a-fA-F]{1,4}$/.test(g))) {
      throw new Wccp2EncodeError('Address', `'${a}' is not 8 uncompressed IPv6 hex groups`);
    }
    for (const g of groups) w.u16(parseInt(g, 16), 'Address');
  } else {
    w.hex(a, 'Address', t.addressLength);
  }
}
