// Mask assignment (draft 4.11.2, 5.7.6-5.7.8): the router ANDs a packet's fields with a mask and compares the result
// with a list of values, each naming an engine. wccpd splits the values the way it splits buckets: weighted, moving
// only what it must. Squid's designated cache uses mask 0x1741 (6 bits -> 64 values) handed out round-robin.
import type { EngineAddress } from './table.js';
import { nextChangeNumber } from './table.js';
import type { Flow } from './hash.js';
import type { AssignOptions, Member } from './assign.js';
import { primaryFor, roundRobin } from './assign.js';
import { sortedMembers } from './member.js';
import { balanceSlots } from './balance.js';
import { consistentSlots } from './consistent.js';
import { BucketsError } from './errors.js';
import { ServiceFlag } from '../wire/wccp2/constants.js';
import type { MaskElement, MaskValueSet, ValueElement } from './mask-sets.js';

export type { MaskElement, MaskValueSet, ValueElement } from './mask-sets.js';

/** Squid's mask (wccp2AssignBuckets): 0x1741 on the destination address, 6 bits -> 64 values. */
export const SQUID_MASK: MaskElement = {
  sourceAddressMask: 0,
  destinationAddressMask: 0x1741,
  sourcePortMask: 0,
  destinationPortMask: 0,
};

/**
 * The mask Squid uses for a service (wccp2AssignBuckets): 0x1741 on the field its hash flags select, the source
 * address first, then the destination address (also the standard service, whose flags say destination), the source
 * port, the destination port.
 */
export function squidMaskFor(serviceFlags: number): MaskElement {
  const zero = { sourceAddressMask: 0, destinationAddressMask: 0, sourcePortMask: 0, destinationPortMask: 0 };
  const f = (primary: number, alternate: number): boolean => (serviceFlags & (primary | alternate)) !== 0;
  if (f(ServiceFlag.SRC_IP_HASH, ServiceFlag.SRC_IP_ALT_HASH)) return { ...zero, sourceAddressMask: 0x1741 };
  if (f(ServiceFlag.DST_IP_HASH, ServiceFlag.DST_IP_ALT_HASH)) return SQUID_MASK;
  if (f(ServiceFlag.SRC_PORT_HASH, ServiceFlag.SRC_PORT_ALT_HASH)) return { ...zero, sourcePortMask: 0x1741 };
  if (f(ServiceFlag.DST_PORT_HASH, ServiceFlag.DST_PORT_ALT_HASH)) return { ...zero, destinationPortMask: 0x1741 };
  return SQUID_MASK;
}

export function sameMask(a: MaskElement, b: MaskElement): boolean {
  return MASK_FIELDS.every((f) => a[f] === b[f]);
}

/** A service group's mask assignment as a value: entry i is the engine of mask value i (see maskValue), or null. */
export interface MaskTable {
  readonly changeNumber: number;
  readonly mask: MaskElement;
  readonly engines: ReadonlyArray<EngineAddress | null>;
}

/** A Mask Element's fields in the draft's order: source address, destination address, source port, destination port. */
export const MASK_FIELDS = [
  'sourceAddressMask',
  'destinationAddressMask',
  'sourcePortMask',
  'destinationPortMask',
] as const;
/** At most 12 mask bits: 4,096 values. */
export const MAX_MASK_BITS = 12;

function maskBits(mask: MaskElement): { field: number; bit: number }[] {
  const bits: { field: number; bit: number }[] = [];
  MASK_FIELDS.forEach((name, field) => {
    const m = mask[name] >>> 0;
    for (let bit = 0; bit < 32; bit++) if ((m >>> bit) & 1) bits.push({ field, bit });
  });
  return bits;
}

/** How many bits the mask sets, over its four fields. */
export function maskBitCount(mask: MaskElement): number {
  return maskBits(mask).length;
}

/** How many distinct values a mask selects: 2 ^ (number of set bits). Throws when that is absurd (> 4096). */
export function maskValueCount(mask: MaskElement): number {
  const n = maskBitCount(mask);
  if (n > MAX_MASK_BITS) {
    throw new BucketsError(
      'bad-mask',
      `a mask with ${n} bits selects ${2 ** n} values; use at most ${MAX_MASK_BITS} bits`,
    );
  }
  return 2 ** n;
}

/** The masked field values of value number `index`: the index's bits spread over the mask's bits, low first. */
export function maskValue(mask: MaskElement, index: number): [number, number, number, number] {
  const fields: [number, number, number, number] = [0, 0, 0, 0];
  maskBits(mask).forEach(({ field, bit }, i) => {
    if ((index >>> i) & 1) fields[field] = ((fields[field] ?? 0) | (1 << bit)) >>> 0;
  });
  return fields;
}

export function emptyMaskTable(mask: MaskElement = SQUID_MASK, changeNumber = 0): MaskTable {
  return { changeNumber, mask, engines: new Array<EngineAddress | null>(maskValueCount(mask)).fill(null) };
}

/**
 * The next mask assignment, with the same modes and guarantees as assignBuckets (a member's `history` lists mask
 * value numbers). The change number advances only when a value changes engine.
 */
export function assignMask(previous: MaskTable, members: readonly Member[], options: AssignOptions): MaskTable {
  const sorted = sortedMembers(members);
  const count = maskValueCount(previous.mask);
  if (previous.engines.length !== count) {
    throw new BucketsError(
      'bad-table',
      `a mask table for this mask has ${count} entries, got ${previous.engines.length}`,
    );
  }
  let engines: (EngineAddress | null)[];
  switch (options.mode) {
    case 'balance':
      engines = balanceSlots(previous.engines, sorted);
      break;
    case 'consistent':
      engines = consistentSlots(count, sorted);
      break;
    case 'primary-standby':
      engines = new Array<EngineAddress | null>(count).fill(primaryFor(previous.engines, sorted, options));
      break;
    case 'round-robin':
      engines = roundRobin(
        sorted.map((m) => m.address),
        count,
      );
      break;
  }
  if (engines.every((e, i) => e === (previous.engines[i] ?? null))) return previous;
  return { changeNumber: nextChangeNumber(previous.changeNumber), mask: previous.mask, engines };
}

/** The Mask/Value Set to send: one value element per assigned value, in value order (unassigned ones are omitted). */
export function toMaskValueSets(table: MaskTable): MaskValueSet[] {
  const values: ValueElement[] = [];
  table.engines.forEach((engine, i) => {
    if (engine === null) return;
    const [sourceAddress, destinationAddress, sourcePort, destinationPort] = maskValue(table.mask, i);
    values.push({ sourceAddress, destinationAddress, sourcePort, destinationPort, engine });
  });
  return [{ mask: table.mask, values }];
}

/**
 * The router's mask lookup (draft 4.11.2): for each set in order, AND the packet with its mask and compare with each
 * value in order; the first match wins. No match anywhere -> null: forward normally.
 */
export function matchMask(sets: readonly MaskValueSet[], flow: Flow): EngineAddress | null {
  for (const { mask, values } of sets) {
    const src = (flow.sourceIp & mask.sourceAddressMask) >>> 0;
    const dst = (flow.destinationIp & mask.destinationAddressMask) >>> 0;
    const sport = flow.sourcePort & mask.sourcePortMask;
    const dport = flow.destinationPort & mask.destinationPortMask;
    for (const v of values) {
      if (
        v.sourceAddress === src &&
        v.destinationAddress === dst &&
        v.sourcePort === sport &&
        v.destinationPort === dport
      )
        return v.engine;
    }
  }
  return null;
}
