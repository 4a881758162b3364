// Readable text of the elements components share (buckets, mask/value sets, web caches, capabilities), used by each
// component's `describe` in components/.
import { CapabilityType, ServiceFlag, WebCacheFlag } from './constants.js';
import type { AssignmentBucket, CapabilityElement, MaskValueSet, WebCacheIdentityElement } from './types.js';

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

export function capabilityText(e: CapabilityElement): string {
  const name = CAPABILITY_NAMES[e.type] ?? `type ${e.type}`;
  if (e.form === 'raw') return `{${e.type} ${name} len=${e.data.length / 2} 0x${e.data}}`;
  if (e.type === CapabilityType.TRANSMIT_T)
    return `{${e.type} ${name} upper=${e.value >>> 16}ms lower=${e.value & 0xffff}ms}`;
  if (e.type === CapabilityType.TIMER_SCALE) return `{${e.type} ${name} 0x${e.value.toString(16).padStart(8, '0')}}`;
  return `{${e.type} ${name}=${methodBits(e.type, e.value)}}`;
}

export function serviceFlagsText(flags: number): string {
  const names = Object.entries(ServiceFlag)
    .filter(([, bit]) => (flags & bit) !== 0)
    .map(([n]) => n);
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

export function setsText(s: readonly MaskValueSet[], indent: string): string[] {
  return s.flatMap((set, i) => [
    `${indent}mask/value set ${i}: src_ip 0x${set.mask.srcAddrMask.toString(16)} dst_ip 0x${set.mask.dstAddrMask.toString(16)}` +
      ` src_port 0x${set.mask.srcPortMask.toString(16)} dst_port 0x${set.mask.dstPortMask.toString(16)},` +
      ` ${set.values.length} values`,
    ...set.values.map(
      (v) =>
        `${indent}  value src_ip 0x${v.srcAddrValue.toString(16)} dst_ip 0x${v.dstAddrValue.toString(16)}` +
        ` src_port ${v.srcPortValue} dst_port ${v.dstPortValue} -> ${v.webCache}`,
    ),
  ]);
}

export function webCacheText(e: WebCacheIdentityElement, indent: string): string[] {
  const head =
    `${indent}cache ip=${e.address}, hash_rev=${e.hashRevision}, flags=0x${e.flags.toString(16).padStart(4, '0')}` +
    `${(e.flags & WebCacheFlag.HISTORICAL) !== 0 ? ' (U historical)' : ''}, weight=${e.weight}, status=${e.status}`;
  const a = e.assignment;
  if (a.type === 'hash') return [head, `${indent}  hash buckets: ${bucketRanges(a.buckets)} (${a.buckets.length})`];
  if (a.type === 'mask')
    return [head, `${indent}  mask assignment, ${a.sets.length} sets`, ...setsText(a.sets, `${indent}  `)];
  return [head, `${indent}  assignment data type ${a.assignmentType}: 0x${a.data}`];
}

export function bucketTableText(
  caches: readonly string[],
  buckets: readonly AssignmentBucket[],
  indent: string,
): string[] {
  // Group buckets per cache so 256 entries stay readable.
  const per = new Map<string, number[]>();
  buckets.forEach((b, i) => {
    const k = b === null ? 'unassigned' : `${caches[b.cache] ?? '?'}${b.alternate ? ' (A)' : ''} [${b.cache}]`;
    per.set(k, [...(per.get(k) ?? []), i]);
  });
  return [...per].map(([k, list]) => `${indent}${k}: ${bucketRanges(list)} (${list.length})`);
}
