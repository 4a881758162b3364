// Which slot (field value, ip rule, routing table) each (service, engine, forwarding method) gets: derived from the
// key itself, so two gateways in front of the same engines give it the same value, and a connection that conntrackd
// replicated from one to the other keeps its engine after a failover (docs/ha.md, docs/dataplane.md "Engine slots").
//
// Home slot: MIN + ((address + service offset + forwarding offset) mod P), with the engine's IPv4 address as an
// unsigned 32-bit integer, P the largest prime not above the slot range (7,933 of 1..7,935), the forwarding offset 0
// for l2 and floor(P / 2) for gre, and the service offset 360 x k (k = 0 for service 0, id - 50 for 51-255).
// Consecutive addresses have consecutive homes, so within one service engines within any P/2 consecutive addresses
// (a /21 and more) never share a home, whatever their forwarding methods; and engines of one /24 never share a home
// across services whose ids lie within 10 of each other (0 and 51-60, or 80-90), whatever their forwarding methods.
//
// Collisions (engines farther apart, services far apart): keys already holding a slot keep it (their connections
// carry its value); a new key that held a slot before a restart (`remembered`: the nft backend's
// `<stateDir>/engine-slots`) takes it back if free, so the connections still marked with it keep their engine; the
// others are placed in a fixed order (home, then address, then forwarding l2 first, then service), each at the first
// slot from its home upwards (wrapping) that is neither held nor being released. Two gateways that placed two
// colliding keys in a different order (one saw them arrive one by one, the other after its own restart) can still
// give them different values: `displaced` names every key not at its home, and the daemon logs it.
import type { EngineAddress } from '../../buckets/table.js';
import { parseIpv4 } from '../../buckets/ipv4.js';

export type SlotForwarding = 'l2' | 'gre';

export interface SlotKey {
  readonly serviceId: number;
  readonly engine: EngineAddress;
  readonly forwarding: SlotForwarding;
}

export interface SlotRange {
  readonly min: number;
  readonly max: number;
}

export interface DisplacedSlot {
  readonly key: SlotKey;
  readonly home: number;
  readonly slot: number;
}

export interface SlotPlacement {
  /** slotKeyText(key) -> slot, for every wanted key. */
  readonly slots: Map<string, number>;
  /** Keys placed now that are not at their home slot. */
  readonly displaced: readonly DisplacedSlot[];
}

/** `<service> <forwarding> <engine>`, e.g. `0 l2 192.0.2.11`. */
export const slotKeyText = (k: SlotKey): string => `${k.serviceId} ${k.forwarding} ${k.engine}`;

export function parseSlotKey(text: string): SlotKey {
  const [id, forwarding, engine] = text.split(' ') as [string, SlotForwarding, EngineAddress];
  return { serviceId: Number(id), forwarding, engine };
}

/** Spacing of the services' homes: 11 consecutive ids x 2 forwarding methods stay >= 256 apart (a /24 fits). */
const SERVICE_STRIDE = 360;

function largestPrimeUpTo(n: number): number {
  for (let p = n; p >= 2; p--) {
    let prime = true;
    for (let d = 2; d * d <= p; d++)
      if (p % d === 0) {
        prime = false;
        break;
      }
    if (prime) return p;
  }
  return 1;
}

const primes = new Map<number, number>();
function modulusFor(range: SlotRange): number {
  const span = range.max - range.min + 1;
  let p = primes.get(span);
  if (p === undefined) {
    p = largestPrimeUpTo(span);
    primes.set(span, p);
  }
  return p;
}

/** The slot a key takes when nothing else holds it. The same on every gateway with the same range. */
export function homeSlot(key: SlotKey, range: SlotRange): number {
  const p = modulusFor(range);
  const k = key.serviceId === 0 ? 0 : key.serviceId - 50;
  const offset = (key.forwarding === 'gre' ? Math.floor(p / 2) : 0) + ((k * SERVICE_STRIDE) % p);
  return range.min + (((parseIpv4(key.engine) % p) + offset) % p);
}

/**
 * The slots of the wanted keys: held ones kept, new ones at their remembered slot when it is free, the others at their
 * home or, on a collision, the next free slot. `held` maps slotKeyText -> slot as now in force, `remembered` the same
 * as an earlier run left it. Throws RangeError when the range is full.
 */
export function placeSlots(
  held: ReadonlyMap<string, number>,
  wanted: readonly SlotKey[],
  range: SlotRange,
  remembered: ReadonlyMap<string, number> = new Map(),
): SlotPlacement {
  const slots = new Map<string, number>();
  const taken = new Set<number>(held.values());
  const fresh: { key: SlotKey; home: number; address: number }[] = [];
  const seen = new Set<string>();
  for (const key of wanted) {
    const text = slotKeyText(key);
    if (seen.has(text)) continue;
    seen.add(text);
    const slot = held.get(text);
    if (slot !== undefined) slots.set(text, slot);
    else fresh.push({ key, home: homeSlot(key, range), address: parseIpv4(key.engine) });
  }
  fresh.sort(
    (a, b) =>
      a.home - b.home ||
      a.address - b.address ||
      (a.key.forwarding === b.key.forwarding ? 0 : a.key.forwarding === 'l2' ? -1 : 1) ||
      a.key.serviceId - b.key.serviceId,
  );
  const span = range.max - range.min + 1;
  const displaced: DisplacedSlot[] = [];
  const place = (f: (typeof fresh)[number], slot: number): void => {
    taken.add(slot);
    slots.set(slotKeyText(f.key), slot);
    if (slot !== f.home) displaced.push({ key: f.key, home: f.home, slot });
  };
  // Remembered slots first, so a colliding key that takes its turn earlier cannot have one of them.
  const rest = fresh.filter((f) => {
    const slot = remembered.get(slotKeyText(f.key));
    if (slot === undefined || slot < range.min || slot > range.max || taken.has(slot)) return true;
    place(f, slot);
    return false;
  });
  for (const f of rest) {
    let slot = -1;
    for (let i = 0; i < span; i++) {
      const s = range.min + ((f.home - range.min + i) % span);
      if (!taken.has(s)) {
        slot = s;
        break;
      }
    }
    if (slot < 0) throw new RangeError(`no free engine slot in ${range.min}..${range.max} for ${slotKeyText(f.key)}`);
    place(f, slot);
  }
  return { slots, displaced };
}
