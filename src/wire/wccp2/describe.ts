// A readable multi-line rendering of a decoded message, for `wccpctl decode` and for comparing with tshark.
import { Writer } from './bytes.js';
import { CapabilityType, CommandType, MessageType, ServiceFlag } from './constants.js';
import { componentName } from './message.js';
import { componentTypeOf, encodeBody } from './components.js';
import type {
  AssignmentBucket, CapabilityElement, Component, MaskValueSet, WebCacheIdentityElement, Wccp2Message,
} from './types.js';

const CAPABILITY_NAMES: Readonly<Record<number, string>> = {
  [CapabilityType.FORWARDING_METHOD]: 'forwarding',
  [CapabilityType.ASSIGNMENT_METHOD]: 'assignment',
  [CapabilityType.PACKET_RETURN_METHOD]: 'return',
  [CapabilityType.TRANSMIT_T]: 'transmit_t',
  [CapabilityType.TIMER_SCALE]: 'timer_scale',
};

function methodBits(type: number, v: number): string {
  const names = type === CapabilityType.ASSIGNMENT_METHOD ? ['hash', 'mask'] : ['GRE', 'L2'];
  const set = names.filter((_, i) => (v & (1 << i)) !== 0);
  return `0x${v.toString(16)}${set.length > 0 ? ` ${set.join('+')}` : ''}`;
}

function capability(e: CapabilityElement): string {
  const name = CAPABILITY_NAMES[e.type] ?? `type ${e.type}`;
  if (e.form === 'raw') return `{${e.type} ${name} len=${e.data.length / 2} 0x${e.data}}`;
  if (e.type === CapabilityType.TRANSMIT_T) return `{${e.type} ${name} upper=${e.value >>> 16}ms lower=${e.value & 0xffff}ms}`;
  if (e.type === CapabilityType.TIMER_SCALE) return `{${e.type} ${name} 0x${e.value.toString(16).padStart(8, '0')}}`;
  return `{${e.type} ${name}=${methodBits(e.type, e.value)}}`;
}

function serviceFlags(flags: number): string {
  const names = Object.entries(ServiceFlag).filter(([, bit]) => (flags & bit) !== 0).map(([n]) => n);
  return `0x${flags.toString(16)}${names.length > 0 ? ` (${names.join('|')})` : ''}`;
}

/** Buckets as ranges: "0-63,128". */
export function bucketRanges(buckets: readonly number[]): string {
  const out: string[] = [];
  for (let i = 0; i < buckets.length; i++) {
    const start = buckets[i] as number;
    let end = start;
    while (i + 1 < buckets.length && buckets[i + 1] === end + 1) end = buckets[++i] as number;
    out.push(start === end ? `${start}` : `${start}-${end}`);
  }
  return out.length > 0 ? out.join(',') : 'none';
}

function sets(s: readonly MaskValueSet[], indent: string): string[] {
  return s.flatMap((set, i) => [
    `${indent}mask/value set ${i}: src_ip 0x${set.mask.srcAddrMask.toString(16)} dst_ip 0x${set.mask.dstAddrMask.toString(16)}` +
      ` src_port 0x${set.mask.srcPortMask.toString(16)} dst_port 0x${set.mask.dstPortMask.toString(16)},` +
      ` ${set.values.length} values`,
    ...set.values.map((v) => `${indent}  value src_ip 0x${v.srcAddrValue.toString(16)} dst_ip 0x${v.dstAddrValue.toString(16)}` +
      ` src_port ${v.srcPortValue} dst_port ${v.dstPortValue} -> ${v.webCache}`),
  ]);
}

function webCache(e: WebCacheIdentityElement, indent: string): string[] {
  const head = `${indent}cache ip=${e.address}, hash_rev=${e.hashRevision}, flags=0x${e.flags.toString(16).padStart(4, '0')}` +
    `${(e.flags & 1) !== 0 ? ' (U historical)' : ''}, weight=${e.weight}, status=${e.status}`;
  const a = e.assignment;
  if (a.type === 'hash') return [head, `${indent}  hash buckets: ${bucketRanges(a.buckets)} (${a.buckets.length})`];
  if (a.type === 'mask') return [head, `${indent}  mask assignment, ${a.sets.length} sets`, ...sets(a.sets, `${indent}  `)];
  return [head, `${indent}  assignment data type ${a.assignmentType}: 0x${a.data}`];
}

function bucketTable(caches: readonly string[], buckets: readonly AssignmentBucket[], indent: string): string[] {
  // Group buckets per cache so 256 entries stay readable.
  const per = new Map<string, number[]>();
  buckets.forEach((b, i) => {
    const k = b === null ? 'unassigned' : `${caches[b.cache] ?? '?'}${b.alternate ? ' (A)' : ''} [${b.cache}]`;
    per.set(k, [...(per.get(k) ?? []), i]);
  });
  return [...per].map(([k, list]) => `${indent}${k}: ${bucketRanges(list)} (${list.length})`);
}

function body(c: Component): string[] {
  switch (c.kind) {
    case 'security':
      return [c.option === 'none' ? 'option=0 (none)' : `option=1 (MD5) digest=${c.digest}`];
    case 'service':
      return [`type=${c.serviceType === 'standard' ? 0 : 1} ${c.serviceType}, id=${c.serviceId}, priority=${c.priority},` +
        ` protocol=${c.protocol}, flags=${serviceFlags(c.flags)}, ports ${c.ports.join(',')}`];
    case 'router-identity':
      return [`router ${c.router.routerId} receive_id=${c.router.receiveId}, sent_to=${c.sentTo},` +
        ` received_from=[${c.receivedFrom.join(', ')}]`];
    case 'web-cache-identity':
      return webCache(c.element, '');
    case 'router-view':
      return [`member change number=${c.memberChangeNumber}, key ${c.assignmentKey.address}/${c.assignmentKey.changeNumber},` +
        ` ${c.routers.length} routers [${c.routers.join(', ')}], ${c.caches.length} caches`,
      ...c.caches.flatMap((e) => webCache(e, '  '))];
    case 'web-cache-view':
      return [`change number=${c.changeNumber}, ${c.routers.length} routers` +
        ` [${c.routers.map((r) => `{${r.routerId}, received_id ${r.receiveId}}`).join(', ')}],` +
        ` ${c.caches.length} caches [${c.caches.join(', ')}]`];
    case 'assignment-info':
      return [`key ${c.key.address}/${c.key.changeNumber}, routers ` +
        `[${c.routers.map((r) => `{${r.routerId} receive_id ${r.receiveId} change ${r.changeNumber}}`).join(', ')}],` +
        ` caches [${c.caches.join(', ')}]`, ...bucketTable(c.caches, c.buckets, '  ')];
    case 'router-query':
      return [`router ${c.routerId} receive_id=${c.receiveId}, sent_to=${c.sentTo}, target=${c.target}`];
    case 'capabilities':
      return [c.elements.map(capability).join(' ')];
    case 'alternate-assignment': {
      const a = c.assignment;
      if (a.type === 'hash') {
        return [`hash: key ${a.key.address}/${a.key.changeNumber}, caches [${a.caches.join(', ')}]`,
          ...bucketTable(a.caches, a.buckets, '  ')];
      }
      if (a.type === 'mask') return [`mask: key ${a.key.address}/${a.key.changeNumber}`, ...sets(a.sets, '  ')];
      return [`assignment type ${a.assignmentType}: 0x${a.data}`];
    }
    case 'assignment-map':
      return [`${c.sets.length} mask/value sets`, ...sets(c.sets, '  ')];
    case 'command-extension': {
      const name = c.commandType === CommandType.SHUTDOWN ? 'SHUTDOWN'
        : c.commandType === CommandType.SHUTDOWN_RESPONSE ? 'SHUTDOWN_RESPONSE' : 'unknown command';
      const ip = c.data.length === 8 ? ` ${Buffer.from(c.data, 'hex').join('.')}` : '';
      return [`command ${c.commandType} ${name}${ip} data=0x${c.data}`];
    }
    case 'address-table':
      return [`family=${c.family}, address length=${c.addressLength}, ${c.addresses.length} addresses:` +
        ` ${c.addresses.map((a, i) => `${i + 1}=${a}`).join(' ')}`];
    case 'unknown':
      return [`unknown component, ${c.data.length / 2} bytes kept: 0x${c.data}`];
  }
}

function encodedLength(c: Component): number | undefined {
  try {
    const w = new Writer();
    encodeBody(c, w);
    return w.length;
  } catch {
    return undefined; // a hand-built value the wire cannot carry: describe it without offsets
  }
}

/** Multi-line text: the header, then one line per component with its offset and length as encoded. */
export function describeMessage(msg: Wccp2Message): string {
  const lengths = msg.components.map(encodedLength);
  const known = lengths.every((l) => l !== undefined);
  const total = lengths.reduce<number>((s, l) => s + 4 + (l ?? 0), 8);
  const lines = [`type=${MessageType[msg.type]} ${msg.type} version=0x${msg.version.toString(16).padStart(4, '0')}` +
    (known ? ` length=${total - 8} (${total} bytes with the 8-byte header)` : '')];
  let offset = 8;
  msg.components.forEach((c, i) => {
    const t = componentTypeOf(c);
    const len = lengths[i];
    const [first = '', ...rest] = body(c);
    lines.push(`${known ? `@${offset} ` : ''}${t} ${componentName(t)}${len !== undefined ? ` len=${len}` : ''}: ${first}`);
    for (const l of rest) lines.push(`    ${l}`);
    offset += 4 + (len ?? 0);
  });
  return lines.join('\n');
}
