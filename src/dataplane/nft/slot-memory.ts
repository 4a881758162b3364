// The engine slots in force and parked, kept in `<stateDir>/engine-slots` so that a restart hands each key back the
// slot it had (engine-slots.ts `remembered`): on a collision the order the keys arrive in decides which one is
// displaced, and a restart sees them arrive together; connections still marked with the old value would then reach
// the other engine. Written (atomically) after a change that placed or dropped a slot, not when a key is parked or
// comes back to its parked slot; read at start. Format (docs/operations.md, "Upgrade"):
//   wccpd-engine-slots 1
//   3570 0 gre 192.0.2.1         slot, then the key: service, forwarding, engine
// A line that is not one is ignored: the file only ever steers placement, never touches a kernel object.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ipv4ToNumber } from '../../address.js';
import type { Log } from '../../log.js';
import { writeFileAtomic } from '../kernel/atomic-file.js';
import { slotKeyText, type SlotForwarding } from '../kernel/engine-slots.js';
import { MAX_SLOT, MIN_SLOT } from '../kernel/names.js';

export const SLOT_MEMORY_FILE = 'engine-slots';
const HEADER = 'wccpd-engine-slots 1';

/** `<slot> <service> <forwarding> <engine>` -> [key, slot]; null when the line is not one. */
function parseLine(line: string): [string, number] | null {
  const m = /^(\d+) (\d+) (l2|gre) (\S+)$/.exec(line.trim());
  if (m === null) return null;
  const slot = Number(m[1]);
  const serviceId = Number(m[2]);
  const engine = m[4] ?? '';
  if (slot < MIN_SLOT || slot > MAX_SLOT || serviceId > 255 || ipv4ToNumber(engine) === null) return null;
  return [slotKeyText({ serviceId, forwarding: m[3] as SlotForwarding, engine }), slot];
}

export class SlotMemory {
  /** What was last written (or read): a change that moved no slot writes nothing. */
  private kept = new Map<string, number>();
  private failing = false;

  constructor(
    readonly file: string | null,
    private readonly log: Log | undefined,
  ) {}

  static inStateDir(stateDir: string | undefined, log: Log | undefined): SlotMemory {
    return new SlotMemory(stateDir !== undefined ? join(stateDir, SLOT_MEMORY_FILE) : null, log);
  }

  /** The slots the last run left in force; empty when there is no file or it cannot be read (logged). */
  async load(): Promise<Map<string, number>> {
    const slots = new Map<string, number>();
    if (this.file === null) return slots;
    let text = '';
    try {
      text = await readFile(this.file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT')
        this.log?.warn(
          { file: this.file, err: (e as Error).message },
          'engine slots of the last run unreadable: colliding keys are placed afresh',
        );
      return slots;
    }
    let ignored = 0;
    for (const [i, line] of text.split('\n').entries()) {
      if (line.trim() === '' || (i === 0 && line === HEADER)) continue;
      const entry = parseLine(line);
      if (entry === null) ignored++;
      else slots.set(...entry);
    }
    if (ignored > 0) this.log?.warn({ file: this.file, ignored }, 'engine slots of the last run: lines ignored');
    this.kept = new Map(slots);
    return slots;
  }

  /** Keeps the slots now in force; a failure is logged (once until one works) and changes nothing in the kernel. */
  async save(slots: ReadonlyMap<string, number>): Promise<void> {
    if (this.file === null || sameSlots(slots, this.kept)) return;
    const body = [HEADER, ...[...slots].map(([key, slot]) => `${slot} ${key}`).sort(), ''].join('\n');
    try {
      await writeFileAtomic(this.file, body);
      this.kept = new Map(slots);
      if (this.failing) this.log?.info({ file: this.file }, 'engine slots saved again');
      this.failing = false;
    } catch (e) {
      if (!this.failing)
        this.log?.warn(
          { file: this.file, err: (e as Error).message },
          'engine slots not saved: after a restart colliding keys may swap slots',
        );
      this.failing = true;
    }
  }
}

function sameSlots(a: ReadonlyMap<string, number>, b: ReadonlyMap<string, number>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}
