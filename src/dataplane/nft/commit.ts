// The nft backend's apply path: a change of the services in force written as ONE nft transaction and ONE ip batch.
// Slots are placed from their keys (the same on every gateway), released ones parked (parking.ts); routes come first,
// so a slot is never live without its route, and are undone when the transaction fails (it is atomic: the previous
// ruleset stays in force). The book (book.ts) follows only what the kernel took.
import type { EngineAddress } from '../../buckets/table.js';
import { DataplaneError } from '../errors.js';
import { placeSlots, type DisplacedSlot, type SlotKey } from '../kernel/engine-slots.js';
import { MAX_SLOT, MIN_SLOT } from '../kernel/names.js';
import { NO_ROUTE_CHANGE, changeRoutes, removeSlotRoutes } from '../kernel/routes.js';
import { REFUSE_BUCKET, hasIpv6, maskMapIndexes, planService } from '../kernel/rules.js';
import { changeRoutes6, ipv6NextHops, type Ipv6NextHop, type SlotRoute6 } from '../kernel/routes6.js';
import type { ClosedPlan, ServicePlan } from '../kernel/rules.js';
import type { ServiceRedirect } from '../redirector.js';
import { slotKey, type ServiceSlotRoute, type SlotBook } from './book.js';
import type { NftCommands } from './commands.js';
import type { Parking } from './parking.js';
import { baseRuleset, releaseSlotLines, servicesRuleset } from './ruleset.js';

export interface NftCommitOptions {
  readonly book: SlotBook;
  readonly io: NftCommands;
  readonly parking: Parking;
  /** `dataplane.conntrack: services`: the untrack chain keeps unrelated traffic out of conntrack. */
  readonly untrack: boolean;
  /** The config's service ids; null: an earlier run's refusals stay (NftRedirectorOptions.configuredServices). */
  readonly configured: ReadonlySet<number> | null;
  readonly onSlotDisplaced: ((d: DisplacedSlot) => void) | undefined;
  /** Keeps the slots in force and parked for the next run (slot-memory.ts); never throws. */
  readonly saveSlots: (slots: ReadonlyMap<string, number>) => Promise<void>;
  readonly now: () => number;
  /** A change failed and no rebuild is due: is our table still there? (the table guard's check) */
  readonly hint: () => void;
  /** Engines of an IPv6 service with no IPv6 neighbour entry at this change (each change that finds some). */
  readonly onWithoutIpv6?: (engines: readonly EngineAddress[], services: readonly ServiceRedirect[]) => void;
}

export class NftCommit {
  /** Our table is gone: the next transaction writes it from scratch (a restore, or any apply meanwhile). */
  rebuild = false;

  constructor(private readonly o: NftCommitOptions) {}

  /**
   * In the queue, as a change (ChangeQueue.changing): `changed`, the services whose objects are rewritten; every other
   * one keeps its maps, sets and chain.
   */
  async commit(
    next: Map<number, ServiceRedirect>,
    removed: number[],
    changed: ReadonlySet<number> = new Set(),
  ): Promise<void> {
    const rebuilt = this.rebuild;
    try {
      await this.write(next, removed, changed);
      if (rebuilt) this.rebuild = false;
    } catch (e) {
      // A change naming objects that someone else deleted fails: is our table still there?
      if (!this.rebuild) this.o.hint();
      throw e;
    }
  }

  /** What the closed table holds after a transaction; `leftover` is what stays of an earlier run's refusals. */
  private closedPlan(
    plans: readonly ServicePlan[],
    removed: readonly number[],
  ): ClosedPlan & { leftover: Set<number> } {
    const b = this.o.book;
    const write = plans.filter((p) => p.failClosed);
    const leftover = new Set(
      [...b.closedLeftover].filter(
        (id) => !plans.some((p) => p.serviceId === id) && !removed.includes(id) && (this.o.configured?.has(id) ?? true),
      ),
    );
    const keep = [...leftover];
    const staying = new Set([...write.map((p) => p.serviceId), ...keep]);
    const drop = [...b.closedInTable].filter((id) => !staying.has(id));
    return { write, keep, drop, leftover };
  }

  private async write(
    next: Map<number, ServiceRedirect>,
    removed: number[],
    changed: ReadonlySet<number>,
  ): Promise<void> {
    const b = this.o.book;
    // Slots: derived from the key (the same on every gateway), those held kept, those no service needs released.
    const wanted: SlotKey[] = [];
    for (const s of next.values())
      for (const e of s.engines) wanted.push({ serviceId: s.serviceId, forwarding: s.forwarding, engine: e });
    let placement;
    try {
      placement = placeSlots(b.slots, wanted, { min: MIN_SLOT, max: MAX_SLOT }, b.remembered);
    } catch (e) {
      throw new DataplaneError(
        'unsupported-service',
        `more than ${MAX_SLOT - MIN_SLOT + 1} engine slots at once: ${(e as Error).message}`,
      );
    }
    const slots = placement.slots;
    for (const d of placement.displaced) this.o.onSlotDisplaced?.(d);
    const now = this.o.now();
    const live = new Set(slots.values());
    const wasLive = new Set(b.slots.values());
    // Released slots are parked; a slot placed again (for its key, or for another whose home it is) is not. Placement
    // ignores parked slots, so every key gets the slot it would get without parking (the same on every gateway).
    const parked = new Map(b.parked);
    for (const [key, slot] of b.slots) if (!slots.has(key)) parked.set(slot, { key, until: now + b.parkMs });
    for (const slot of live) parked.delete(slot);
    const evicted = b.evictable(parked, now);
    for (const slot of evicted) parked.delete(slot);
    // An evicted slot that was live until this transaction loses its route after it; a parked one at once.
    const removeNow = evicted.filter((slot) => b.routed.has(slot) && !wasLive.has(slot));
    const removeAfter = evicted.filter((slot) => b.routed.has(slot) && wasLive.has(slot));
    const { tunnels, created, gone } = b.placeTunnels([...slots.keys(), ...[...parked.values()].map((p) => p.key)]);
    const create: ServiceSlotRoute[] = [];
    const retarget: ServiceSlotRoute[] = [];
    for (const [key, slot] of slots) {
      const had = b.routed.get(slot);
      if (had === key) continue;
      (had === undefined ? create : retarget).push(b.slotRoute(key, slot, tunnels));
    }
    const routedAfter = new Set([...b.routed.keys(), ...live].filter((slot) => !evicted.includes(slot)));
    // The guard pair exists while any slot's rule does: unredirected packets then skip every slot's rule.
    const dropGuard = b.guarded && routedAfter.size === 0;
    // A slot's nft objects are made when it comes; a parked slot's are reused by its own key, and made again (its
    // counter from zero) for another key, deleted first in the same transaction.
    const renewed = [...slots].filter(([key, slot]) => (b.chains.get(slot) ?? key) !== key).map(([, s]) => s);
    const addedChains = [...live].filter((slot) => !b.chains.has(slot) || renewed.includes(slot));
    // Chains of evicted slots (and of any slot whose routes an earlier failure removed) go in this transaction.
    const deadChains = [...b.chains.keys()].filter((slot) => !live.has(slot) && !parked.has(slot));
    const plans: ServicePlan[] = [...next.values()]
      .sort((a, b) => a.serviceId - b.serviceId)
      .map((s) => {
        const mine = new Map<EngineAddress, number>();
        for (const e of s.engines) {
          const slot = slots.get(slotKey(s.serviceId, s.forwarding, e));
          if (slot !== undefined) mine.set(e, slot);
        }
        const counted = b.countedSlots.get(s.serviceId);
        // A service not in `changed` cannot differ from its last transaction's plan: its slots are its own and kept
        // while its engines are, so its objects stay and only its hook rule is written again.
        return {
          ...planService(s, mine),
          countersExist: counted !== undefined,
          unchanged: counted !== undefined && !changed.has(s.serviceId),
          previousMaskMaps: b.maskMaps.get(s.serviceId) ?? [],
        };
      });
    // Routes first, in one ip process, so a slot is never live without its route; undone if anything fails.
    const made = [...create, ...retarget];
    let routesDone = false;
    let made6: SlotRoute6[] = [];
    let closed = this.closedPlan(plans, removed);
    try {
      const devices = await changeRoutes(
        this.o.io.exec,
        this.o.io.record,
        {
          create,
          retarget,
          tunnels: created,
          addGuard: !b.guarded && create.length > 0,
          remove: removeNow,
          removeDevices: removeAfter.length === 0 ? gone : [],
          removeGuard: removeAfter.length === 0 && dropGuard,
        },
        this.o.io.batch,
      );
      routesDone = true;
      for (const [engine, device] of devices) b.engineDevices.set(engine, device);
      if (create.length > 0) b.guarded = true;
      const v6 = await this.ipv6(next, slots, plans, parked);
      made6 = v6.made;
      for (const [i, p] of plans.entries()) plans[i] = { ...p, ...v6.plans.get(p.serviceId) };
      await this.o.io.transact(
        (this.rebuild ? baseRuleset({ untrack: this.o.untrack }) : '') +
          releaseSlotLines(renewed, b.slots6).join('\n') +
          (renewed.length > 0 ? '\n' : '') +
          servicesRuleset(
            plans,
            this.rebuild ? [] : removed,
            { added: addedChains, released: deadChains },
            (closed = this.closedPlan(plans, removed)),
            (id) => b.maskMaps.get(id) ?? [],
            { untrack: this.o.untrack, ipv6Slots: b.slots6 },
            this.rebuild ? [] : removed.filter((id) => b.ipv6Services.has(id)),
          ),
      );
    } catch (e) {
      await this.undoRoutes6(made6);
      await removeSlotRoutes(
        this.o.io.exec,
        this.o.io.record,
        made.map((r) => r.slot),
        created.map((t) => t.device),
      ).catch(() => undefined);
      for (const r of made) {
        b.routed.delete(r.slot);
        b.parked.delete(r.slot);
      }
      if (routesDone) for (const slot of removeNow) b.routed.delete(slot);
      this.o.parking.schedule();
      throw e;
    }
    if (removeAfter.length > 0)
      await changeRoutes(
        this.o.io.exec,
        this.o.io.record,
        {
          ...NO_ROUTE_CHANGE,
          remove: removeAfter,
          removeDevices: gone,
          removeGuard: dropGuard,
        },
        this.o.io.batch,
      );
    for (const slot of evicted) b.routed.delete(slot);
    for (const r of made) b.routed.set(r.slot, slotKey(r.serviceId, r.forwarding, r.engine));
    if (dropGuard) b.guarded = false;
    for (const slot of deadChains) b.chains.delete(slot);
    for (const [key, slot] of slots) b.chains.set(slot, key);
    b.parked = parked;
    b.slots = slots;
    b.tunnels = tunnels;
    b.services = next;
    b.countedSlots = new Map(plans.map((p) => [p.serviceId, [...p.engineSlots.values()]]));
    b.maskMaps = new Map(plans.map((p) => [p.serviceId, maskMapIndexes(p)]));
    b.ipv6Services = new Set(plans.filter(hasIpv6).map((p) => p.serviceId));
    // Slots keep their IPv6 counter while parked; one released or renewed loses it; an IPv6 service's have one.
    for (const slot of [...renewed, ...deadChains]) b.slots6.delete(slot);
    for (const p of plans) {
      const mine = [...p.engineSlots.values()];
      if (hasIpv6(p) && p.clientInterfaces.length > 0) for (const s of mine) b.slots6.add(s);
      else if (p.dropIpv6 === true) for (const s of mine) b.slots6.delete(s);
    }
    b.closedLeftover = closed.leftover;
    b.closedInTable = new Set([...closed.write.map((p) => p.serviceId), ...closed.keep]);
    this.o.parking.schedule();
    // A remembered slot is for its key's first placement in this run, and only while no other key holds it.
    for (const [key, slot] of b.remembered) if (slots.has(key) || live.has(slot)) b.remembered.delete(key);
    // Parked keys too: an engine that leaves and comes back then costs no write (nor does it lose its slot).
    await this.o.saveSlots(new Map([...slots, ...[...parked].map(([slot, p]): [string, number] => [p.key, slot])]));
  }

  /**
   * The IPv6 side of a change (docs/dataplane/nft.md, "IPv6"): each IPv6 service's engines' IPv6 next hops (ONE `neigh
   * show`), the IPv6 twins of their slots' rules and routes (ONE `ip -6` batch; those no IPv6 service needs any more
   * go), and what the plans need: the IPv6 bucket slots (an engine without a next hop: direct, or refused when the
   * service fails closed) and the engines' IPv6 addresses. Nothing at all when no service redirects IPv6 and none did.
   * A slot parked by this change keeps its IPv6 twins, as it keeps its IPv4 objects (parking.ts removes both).
   */
  private async ipv6(
    next: ReadonlyMap<number, ServiceRedirect>,
    slots: ReadonlyMap<string, number>,
    plans: readonly ServicePlan[],
    parked: ReadonlyMap<number, unknown>,
  ): Promise<{ made: SlotRoute6[]; plans: Map<number, Partial<ServicePlan>> }> {
    const b = this.o.book;
    const out = new Map<number, Partial<ServicePlan>>();
    const services = [...next.values()].filter((s) => s.families?.includes('ipv6') === true);
    for (const p of plans) if (!hasIpv6(p) && b.ipv6Services.has(p.serviceId)) out.set(p.serviceId, { dropIpv6: true });
    const engines = new Map<EngineAddress, string>();
    for (const s of services)
      for (const e of s.engines) {
        const dev = b.engineDevices.get(e);
        if (dev !== undefined && s.forwarding === 'l2') engines.set(e, dev);
      }
    const hops: Map<EngineAddress, Ipv6NextHop | null> =
      engines.size > 0 ? await ipv6NextHops(this.o.io.batch, engines) : new Map();
    const wanted = new Map<number, { via: string; dev: string }>();
    const without = new Set<EngineAddress>();
    for (const s of services) {
      const plan = plans.find((p) => p.serviceId === s.serviceId);
      if (plan === undefined) continue;
      const slotOf6 = new Map<number, number>();
      for (const e of s.engines) {
        const slot = slots.get(slotKey(s.serviceId, s.forwarding, e));
        if (slot === undefined) continue;
        const hop = hops.get(e) ?? null;
        if (hop === null) {
          without.add(e);
          slotOf6.set(slot, s.failMode === 'closed' ? REFUSE_BUCKET : 0);
        } else {
          wanted.set(slot, { via: hop.via, dev: hop.dev });
          slotOf6.set(slot, slot);
        }
      }
      const addresses = [...new Set(s.engines.flatMap((e) => hops.get(e)?.addresses ?? []))].sort();
      out.set(s.serviceId, {
        bucketSlots6: plan.bucketSlots.map((slot) => (slot === 0 ? 0 : (slotOf6.get(slot) ?? 0))),
        engines6: addresses,
        counters6Exist: b.ipv6Services.has(s.serviceId),
      });
    }
    const create: SlotRoute6[] = [];
    const retarget: SlotRoute6[] = [];
    for (const [slot, hop] of wanted) {
      const had = b.routed6.get(slot);
      if (had === undefined) create.push({ slot, ...hop });
      else if (had.via !== hop.via || had.dev !== hop.dev) retarget.push({ slot, ...hop });
    }
    const remove = [...b.routed6.keys()].filter((slot) => !wanted.has(slot) && !parked.has(slot));
    const addGuard = !b.guarded6 && create.length > 0;
    const removeGuard = b.guarded6 && wanted.size === 0 && [...b.routed6.keys()].every((s) => remove.includes(s));
    if (create.length + retarget.length + remove.length > 0 || addGuard || removeGuard)
      await changeRoutes6(this.o.io.exec, this.o.io.record, { create, retarget, remove, addGuard, removeGuard });
    for (const slot of remove) b.routed6.delete(slot);
    for (const r of [...create, ...retarget]) b.routed6.set(r.slot, { via: r.via, dev: r.dev });
    if (addGuard) b.guarded6 = true;
    if (removeGuard) b.guarded6 = false;
    b.withoutIpv6 = without;
    if (without.size > 0) this.o.onWithoutIpv6?.([...without].sort(), services);
    return { made: create, plans: out };
  }

  /** A change that failed after its IPv6 routes were made: the ones it created go (their slots never went live). */
  private async undoRoutes6(made: readonly SlotRoute6[]): Promise<void> {
    if (made.length === 0) return;
    const b = this.o.book;
    const removeGuard = b.guarded6 && [...b.routed6.keys()].every((s) => made.some((m) => m.slot === s));
    await changeRoutes6(this.o.io.exec, this.o.io.record, {
      create: [],
      retarget: [],
      remove: made.map((m) => m.slot),
      addGuard: false,
      removeGuard,
    }).catch(() => undefined);
    for (const m of made) b.routed6.delete(m.slot);
    if (removeGuard) b.guarded6 = false;
  }
}
