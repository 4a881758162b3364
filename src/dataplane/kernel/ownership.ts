// The record of the kernel objects wccpd created: `<stateDir>/kernel-objects`, one object a line, written atomically
// (temp file, fsync, rename, fsync of the directory) BEFORE an object is created and after it is removed, so after a
// crash it lists everything that may exist. The daemon's start-up and `systemd/wccpd-cleanup` remove exactly what it
// lists; a line that does not name one of wccpd's own objects (names.ts) is ignored, so an edited or corrupt record
// can never make them touch someone else's table, rule or device. Format (docs/operations.md):
//   wccpd-kernel-objects 1
//   rule 2048 0x80000/0xfff80000 2048000001     ip rule: priority, fwmark value/mask, table
//   route 2048000001                             the default route of that routing table
//   link wccpd-gre1                              a GRE tunnel device
//   rule6 ... / route6 ... / guard6 2047 2049    the same three in IPv6 (`ip -6`): an IPv6 service's slots
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from './atomic-file.js';
import {
  FIELD_MAX,
  GUARD_PRIORITY,
  LANDING_PRIORITY,
  MARK_MASK,
  RULE_PRIORITY,
  fieldMark,
  fwmarkSelector,
  isOurGreDevice,
  isOurRouteTable,
  isOurRule,
  routeTable,
} from './names.js';

export const RECORD_FILE = 'kernel-objects';
const HEADER = 'wccpd-kernel-objects 1';

export type OwnedObject =
  | { readonly kind: 'rule'; readonly value: number }
  | { readonly kind: 'route'; readonly table: number }
  | { readonly kind: 'link'; readonly name: string }
  /** The guard pair around the slots' rules (names.ts): one object, created and removed together. */
  | { readonly kind: 'guard' }
  /** The same rule, route and guard pair in IPv6 (`ip -6`): the slots of a service that redirects IPv6. */
  | { readonly kind: 'rule6'; readonly value: number }
  | { readonly kind: 'route6'; readonly table: number }
  | { readonly kind: 'guard6' };

export function objectLine(o: OwnedObject): string {
  switch (o.kind) {
    case 'rule':
      return `rule ${RULE_PRIORITY} ${fwmarkSelector(o.value)} ${routeTable(o.value)}`;
    case 'route':
      return `route ${o.table}`;
    case 'link':
      return `link ${o.name}`;
    case 'guard':
      return `guard ${GUARD_PRIORITY} ${LANDING_PRIORITY}`;
    case 'rule6':
      return `rule6 ${RULE_PRIORITY} ${fwmarkSelector(o.value)} ${routeTable(o.value)}`;
    case 'route6':
      return `route6 ${o.table}`;
    case 'guard6':
      return `guard6 ${GUARD_PRIORITY} ${LANDING_PRIORITY}`;
  }
}

/** Parses one record line; null when it does not name one of wccpd's own objects. */
export function parseObjectLine(line: string): OwnedObject | null {
  const f = line.trim().split(/\s+/);
  const six = f[0]?.endsWith('6') === true;
  if (six) f[0] = f[0]!.slice(0, -1);
  const o = parseIpv4Object(f);
  if (!six || o === null) return o;
  if (o.kind === 'rule') return { kind: 'rule6', value: o.value };
  if (o.kind === 'route') return { kind: 'route6', table: o.table };
  if (o.kind === 'guard') return { kind: 'guard6' };
  return null;
}

function parseIpv4Object(f: string[]): OwnedObject | null {
  if (f[0] === 'rule' && f.length === 4) {
    const [mark, mask] = (f[2] ?? '').split('/');
    const rule = { priority: Number(f[1]), fwmark: mark, fwmask: mask, table: f[3] };
    if (!isOurRule(rule)) return null;
    const value = (Number(mark) >>> 0) / fieldMark(1);
    return Number.isInteger(value) && value >= 1 && value <= FIELD_MAX && Number(mask) === MARK_MASK
      ? { kind: 'rule', value }
      : null;
  }
  if (f[0] === 'route' && f.length === 2) {
    const t = Number(f[1]);
    return /^[0-9]+$/.test(f[1] ?? '') && isOurRouteTable(t) ? { kind: 'route', table: t } : null;
  }
  if (f[0] === 'link' && f.length === 2 && isOurGreDevice(f[1] ?? '')) return { kind: 'link', name: f[1] ?? '' };
  if (f[0] === 'guard' && f.length === 3 && f[1] === String(GUARD_PRIORITY) && f[2] === String(LANDING_PRIORITY))
    return { kind: 'guard' };
  return null;
}

export interface LoadedRecord {
  readonly objects: readonly OwnedObject[];
  /** Lines that were ignored (not one of wccpd's objects), for the log. */
  readonly ignored: readonly string[];
}

/** What may exist: kept in memory, and in `<stateDir>/kernel-objects` when a state directory is given. */
export class OwnershipRecord {
  private readonly lines = new Set<string>();

  constructor(readonly file: string | null) {}

  static inStateDir(stateDir: string | undefined): OwnershipRecord {
    return new OwnershipRecord(stateDir !== undefined ? join(stateDir, RECORD_FILE) : null);
  }

  /** Reads the record a previous run left (missing = nothing recorded) and adopts it. */
  async load(): Promise<LoadedRecord> {
    if (this.file === null) return { objects: this.objects(), ignored: [] };
    let text: string;
    try {
      text = await readFile(this.file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { objects: this.objects(), ignored: [] };
      throw e;
    }
    const ignored: string[] = [];
    for (const [i, line] of text.split('\n').entries()) {
      if (line.trim() === '' || (i === 0 && line === HEADER)) continue;
      const o = parseObjectLine(line);
      if (o === null) ignored.push(line);
      else this.lines.add(objectLine(o));
    }
    return { objects: this.objects(), ignored };
  }

  objects(): OwnedObject[] {
    return [...this.lines].map(parseObjectLine).filter((o): o is OwnedObject => o !== null);
  }

  has(o: OwnedObject): boolean {
    return this.lines.has(objectLine(o));
  }

  /** Records objects about to be created; resolves once the record is on disk. */
  async add(objects: readonly OwnedObject[]): Promise<void> {
    const before = this.lines.size;
    for (const o of objects) this.lines.add(objectLine(o));
    if (this.lines.size !== before) await this.write();
  }

  /** Forgets objects that were removed. */
  async remove(objects: readonly OwnedObject[]): Promise<void> {
    let changed = false;
    for (const o of objects) changed = this.lines.delete(objectLine(o)) || changed;
    if (changed) await this.write();
  }

  private async write(): Promise<void> {
    if (this.file === null) return;
    await writeFileAtomic(this.file, [HEADER, ...[...this.lines].sort(), ''].join('\n'));
  }
}
