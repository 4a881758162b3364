// What the nft backend holds in the kernel, as its last transaction and ip batch left it: the services applied,
// their engine slots (live, routed, with chains, parked), GRE tunnel devices, the guard pair, each service's counters
// and mask maps, the closed table's refusals and the devices of the L2 engines' routes. The apply path (commit.ts)
// changes it after the kernel took a change; the checks (ip-repair.ts, table-repair.ts) hold the kernel against it.
import type { EngineAddress } from '../../buckets/table.js';
import { parseSlotKey, slotKeyText } from '../kernel/engine-slots.js';
import { greDevice } from '../kernel/names.js';
import type { GreTunnel, SlotRoute } from '../kernel/routes.js';
import type { ForwardingMethod, ServiceRedirect } from '../redirector.js';

/**
 * A slot is one (service, forwarding method, engine) with its own field value, ip rule and routing table: the value
 * names the service that claimed a connection as well as its engine, so overlapping services never count or steer
 * each other's connections (docs/dataplane.md). The value is derived from the key (engine-slots.ts), so two gateways
 * give it the same one (docs/ha.md).
 */
export const slotKey = (serviceId: number, forwarding: ForwardingMethod, engine: EngineAddress): string =>
  slotKeyText({ serviceId, forwarding, engine });

/** A released slot kept for its key's return, until it goes (docs/dataplane/nft.md, "Parked slots"). */
export interface ParkedSlot {
  readonly key: string;
  readonly until: number;
}

export type ServiceSlotRoute = SlotRoute & { serviceId: number };

export class SlotBook {
  services = new Map<number, ServiceRedirect>();
  /** `slotKeyText` -> slot, as in force. */
  slots = new Map<string, number>();
  /** `slotKeyText` -> slot as the last run left it (slot-memory.ts), for its keys not placed yet in this one. */
  remembered = new Map<string, number>();
  /** GRE engine -> the number of its tunnel device (greDevice(n)), shared by all its slots. */
  tunnels = new Map<EngineAddress, number>();
  /** Fail-closed refusals of an earlier run whose service has not been applied yet in this one. */
  closedLeftover = new Set<number>();
  /** Services that have a refusal chain in the closed table now. */
  closedInTable = new Set<number>();
  /** Per service: its engine slots as of the last transaction (its objects and bucket counters are in the kernel). */
  countedSlots = new Map<number, number[]>();
  /** The guard pair around the slots' ip rules is installed (routes.ts changeRoutes). */
  guarded = false;
  /** Slots whose ip rule and route exist (recorded), with the key whose engine the route names. */
  routed = new Map<number, string>();
  /** Slots whose own nft objects (claim and slot chains, counter) are in the table, with the key they were made for. */
  chains = new Map<number, string>();
  /** Released slots kept for their key's return. */
  parked = new Map<number, ParkedSlot>();
  /** Per service: the mask maps (set indexes) its last transaction left in the kernel. */
  maskMaps = new Map<number, number[]>();
  /**
   * Each L2 engine with a routed slot: the device its routes were made on (its `route get` at the change that made
   * them, or at the last check). A check that finds the engine on another device now moves them there.
   */
  engineDevices = new Map<EngineAddress, string>();
  /** Slots whose IPv6 rule and route exist (recorded), with the IPv6 next hop the route names. */
  routed6 = new Map<number, { readonly via: string; readonly dev: string }>();
  /** The IPv6 guard pair is installed. */
  guarded6 = false;
  /** Slots whose IPv6 counter (engine6_<slot>) is in the table. */
  slots6 = new Set<number>();
  /** Services whose IPv6 objects (classify6, bucket6, bseen6, ...) are in the table. */
  ipv6Services = new Set<number>();
  /** Engines of an IPv6 service that had no IPv6 neighbour entry at the last change (docs/dataplane/nft.md, "IPv6"). */
  withoutIpv6 = new Set<EngineAddress>();

  constructor(
    /** How long a released slot stays parked; 0: removed at once. */
    readonly parkMs: number,
    /** At most this many parked slots; beyond it the oldest go. */
    readonly maxParked: number,
  ) {}

  /** Nothing of ours in the kernel (start, stop); the closed table's refusals are not ours to forget. */
  clear(): void {
    this.guarded = false;
    this.guarded6 = false;
    this.routed6 = new Map();
    this.ipv6Services = new Set();
    this.slots6 = new Set();
    this.withoutIpv6 = new Set();
    this.services = new Map();
    this.slots = new Map();
    this.routed = new Map();
    this.chains = new Map();
    this.parked = new Map();
    this.tunnels = new Map();
    this.countedSlots = new Map();
    this.maskMaps = new Map();
  }

  /** Our table went (someone else deleted it): every slot's chains and counters, and the mask maps, went with it. */
  tableGone(): void {
    this.ipv6Services = new Set();
    this.slots6 = new Set();
    this.chains = new Map();
    this.countedSlots = new Map();
    this.maskMaps = new Map();
  }

  /** The parked slots to remove now: all when parking is off, the expired, and the oldest beyond the bound. */
  evictable(parked: ReadonlyMap<number, { until: number }>, now: number): number[] {
    if (this.parkMs <= 0) return [...parked.keys()];
    const byAge = [...parked].sort(([, a], [, b]) => a.until - b.until);
    const over = Math.max(0, byAge.length - this.maxParked);
    return byAge.filter(([, p], i) => i < over || p.until <= now).map(([slot]) => slot);
  }

  /**
   * One tunnel device per GRE engine, whatever the number of its slots (one per service): kept while any of its slots
   * is, numbered from 1 up (the lowest free number). Returns the devices now, those to create and those to delete.
   */
  placeTunnels(keys: Iterable<string>): {
    tunnels: Map<EngineAddress, number>;
    created: GreTunnel[];
    gone: string[];
  } {
    const engines = new Set<EngineAddress>();
    for (const key of keys) {
      const k = parseSlotKey(key);
      if (k.forwarding === 'gre') engines.add(k.engine);
    }
    const tunnels = new Map<EngineAddress, number>();
    for (const [e, n] of this.tunnels) if (engines.has(e)) tunnels.set(e, n);
    // A device going in this change is deleted after the new ones are created: its number is not reused yet.
    const used = new Set(this.tunnels.values());
    const created: GreTunnel[] = [];
    let n = 1;
    for (const e of [...engines].sort()) {
      if (tunnels.has(e)) continue;
      while (used.has(n)) n++;
      used.add(n);
      tunnels.set(e, n);
      created.push({ device: greDevice(n), engine: e });
    }
    const gone = [...this.tunnels].filter(([e]) => !tunnels.has(e)).map(([, k]) => greDevice(k));
    return { tunnels, created, gone };
  }

  /** The route of `slot` for `key`'s engine (through its tunnel device for GRE). */
  slotRoute(key: string, slot: number, tunnels: ReadonlyMap<EngineAddress, number> = this.tunnels): ServiceSlotRoute {
    const { serviceId, forwarding, engine } = parseSlotKey(key);
    const n = tunnels.get(engine);
    return forwarding === 'gre' && n !== undefined
      ? { serviceId, slot, engine, forwarding, device: greDevice(n) }
      : { serviceId, slot, engine, forwarding };
  }
}
