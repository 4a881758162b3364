// The ingress backend's apply path: a change of the services in force written as ONE transaction through the nft
// session, as differences to what the last one wrote (again whole when nft refuses that: someone else edited our
// table). Slots are placed as the nft backend places them; a new slot's engine is looked up once (`ip route get`).
// The book (book.ts) follows only what the kernel took.
import type { EngineAddress } from '../../buckets/table.js';
import type { Log } from '../../log.js';
import { DataplaneError } from '../errors.js';
import { placeSlots } from '../kernel/engine-slots.js';
import type { Exec } from '../kernel/exec.js';
import { MAX_SLOT, MIN_SLOT } from '../kernel/names.js';
import type { NftTransactions } from '../kernel/nft-session.js';
import { execBatch, findEngineSegment } from '../kernel/routes.js';
import { maskMapIndexes, planService } from '../kernel/rules.js';
import { familiesOf } from '../redirector.js';
import type { ServiceRedirect } from '../redirector.js';
import { slotKey, type IngressBook } from './book.js';
import { claimsOf, nextMoves, oldClaims, type BucketMove, type MovesTimer } from './moves.js';
import { engineMacs, macKey } from './engine-macs.js';
import { flowKeyKind, recordsMovedOnly } from './names.js';
import type { FlowLimits } from './names.js';
import { hookDevices, ingressServicesWrite } from './ruleset.js';
import type { IngressRemoved } from './ruleset.js';
import { slotRule } from './service-objects.js';
import type { IngressService, IngressSlot } from './service-objects.js';

export interface IngressCommitOptions {
  readonly book: IngressBook;
  /** Runs `ip route get` for a new slot's engine. */
  readonly exec: Exec;
  readonly session: NftTransactions;
  readonly limits: FlowLimits;
  readonly now: () => number;
  readonly log: Log | undefined;
  readonly movesTimer: MovesTimer;
}

export class IngressCommit {
  constructor(private readonly o: IngressCommitOptions) {}

  /** `changed`: the services whose objects are rewritten; every other one keeps its maps, sets and chains. */
  async write(
    next: Map<number, ServiceRedirect>,
    removedIds: readonly number[],
    changed: ReadonlySet<number>,
  ): Promise<void> {
    const b = this.o.book;
    // Slots as the nft backend places them (engine-slots.ts): held ones kept, a released number not reused at once.
    const wanted = [...next.values()].flatMap((s) =>
      s.engines.map((engine) => ({ serviceId: s.serviceId, engine, forwarding: 'l2' as const })),
    );
    let placed: Map<string, number>;
    try {
      placed = placeSlots(b.slots, wanted, { min: MIN_SLOT, max: MAX_SLOT }).slots;
    } catch (e) {
      throw new DataplaneError(
        'unsupported-service',
        `more than ${MAX_SLOT - MIN_SLOT + 1} engine slots at once: ${(e as Error).message}`,
      );
    }
    const live = new Set(placed.values());
    const released = [...b.slots.values()].filter((s) => !live.has(s)).sort((a, b) => a - b);
    const added = [...live].filter((s) => !b.targets.has(s)).sort((a, b) => a - b);
    // A new slot's engine must be on a segment attached to this gateway, and not one of its own addresses.
    const targets = new Map([...b.targets].filter(([s]) => live.has(s)));
    // One `ip route get` per engine, not per slot: an engine that joins 8 services (or comes back to them) costs one
    // ip process, and one that has a live slot already costs none (its interface is known).
    const engineDevices = new Map([...targets.values()].map((t) => [t.engine, t.device]));
    for (const [key, slot] of placed) {
      if (targets.has(slot)) continue;
      const engine = key.split(' ')[2] ?? '';
      let device = engineDevices.get(engine);
      if (device === undefined) {
        device = (await findEngineSegment(this.o.exec, engine, 'l2')).dev;
        engineDevices.set(engine, device);
      }
      targets.set(slot, { slot, engine, device });
    }
    // IPv6: the slots of the services that redirect it, each with its engine's and device's MAC addresses.
    const live6 = new Set<number>();
    for (const s of next.values())
      if (familiesOf(s).includes('ipv6'))
        for (const e of s.engines) {
          const slot = placed.get(slotKey(s.serviceId, e));
          if (slot !== undefined) live6.add(slot);
        }
    await this.learnMacs(live6, targets);
    const at = this.o.now();
    const idleMs = this.o.limits.idleSeconds * 1000;
    const nextMovesById = new Map<number, Map<number, BucketMove>>();
    const releasedSet = new Set(released);
    // IPv6 slot chains in the kernel whose rule differs now (a MAC address learned or changed).
    const rewrite6 = new Set(
      [...b.slots6].flatMap(([slot, rule]) => {
        const t = targets.get(slot);
        return live6.has(slot) && t !== undefined && slotRule(t, 'ipv6') !== rule ? [slot] : [];
      }),
    );
    const services: IngressService[] = [...next.values()].flatMap((s) => {
      const mine = new Map<EngineAddress, number>();
      for (const e of s.engines) {
        const slot = placed.get(slotKey(s.serviceId, e));
        if (slot !== undefined) mine.set(e, slot);
      }
      const kind = b.flowKinds.get(s.serviceId);
      const plan = {
        ...planService(s, mine),
        countersExist: kind !== undefined,
        unchanged: kind !== undefined && !changed.has(s.serviceId),
        previousMaskMaps: b.maskMaps.get(s.serviceId) ?? [],
      };
      const slots = [...new Set(mine.values())]
        .sort((a, b) => a - b)
        .map((slot) => targets.get(slot))
        .filter((t): t is IngressSlot => t !== undefined);
      const id = s.serviceId;
      let moves = new Map<number, BucketMove>();
      // Only the services that keep moves are listed: bucketMoves() tells them from those that record every flow.
      if (recordsMovedOnly(plan)) {
        moves = b.moves.get(id) ?? moves;
        if (plan.unchanged !== true)
          moves = nextMoves(b.claims.get(id), claimsOf(plan), moves, releasedSet, at, idleMs);
        nextMovesById.set(id, moves);
      }
      const moved = oldClaims(moves);
      const written = b.written.get(id);
      // A service of `families: [ipv6]` keeps its IPv4 objects (the plan, moves and claims are kept by them), unhooked.
      const hooked = familiesOf(s).includes('ipv4') ? {} : { hooked: false };
      const v4: IngressService =
        kind !== undefined
          ? { plan, slots, previousKind: kind, moved, ...hooked, ...(written !== undefined ? { written } : {}) }
          : { plan, slots, moved, ...hooked };
      if (!familiesOf(s).includes('ipv6')) return [v4];
      // The same plan, table and moves; its own objects (familyName's), written when anything of it changed.
      const kind6 = b.flowKinds6.get(id);
      const written6 = b.written6.get(id);
      const plan6 = {
        ...plan,
        countersExist: kind6 !== undefined,
        unchanged: kind6 !== undefined && !changed.has(id) && !slots.some((x) => rewrite6.has(x.slot)),
        previousMaskMaps: [],
      };
      const v6: IngressService = {
        plan: plan6,
        family: 'ipv6',
        keySeed: b.keySeed6,
        slots,
        moved,
        ...(kind6 !== undefined ? { previousKind: kind6 } : {}),
        ...(written6 !== undefined ? { written: written6 } : {}),
      };
      return [v4, v6];
    });
    const removed: IngressRemoved[] = [
      ...removedIds
        .filter((id) => b.flowKinds.has(id))
        .map((id) => ({ serviceId: id, maskMaps: b.maskMaps.get(id) ?? [], kind: b.flowKinds.get(id) ?? 'tcp' })),
      // A service removed, or no longer redirecting IPv6: its IPv6 objects go.
      ...[...b.flowKinds6]
        .filter(([id]) => !services.some((s) => s.family === 'ipv6' && s.plan.serviceId === id))
        .map(([id, kind]) => ({ serviceId: id, maskMaps: [], kind, family: 'ipv6' as const })),
    ];
    const released6 = [...b.slots6.keys()].filter((s) => !live6.has(s)).sort((a, b) => a - b);
    const added6 = [...live6].filter((s) => !b.slots6.has(s)).sort((a, b) => a - b);
    const ipv6 = {
      released: released6,
      added: added6,
      goneBefore: b.gone6,
      rewrite: [...rewrite6].sort((a, b) => a - b).flatMap((s) => targets.get(s) ?? []),
    };
    const devices = hookDevices(services.map((s) => s.plan));
    const devicesText = devices.join(' ');
    const hook =
      devices.length === 0
        ? null
        : b.hook !== null && b.hook.devices === devicesText
          ? b.hook
          : { chain: ++b.hookSerial, devices: devicesText };
    const change = (of: IngressService[]): ReturnType<typeof ingressServicesWrite> =>
      ingressServicesWrite({
        services: of,
        removed,
        released,
        added,
        goneBefore: b.gone,
        ipv6,
        statics6: !b.statics6 && services.some((s) => s.family === 'ipv6'),
        hook: { chain: hook?.chain ?? null, previous: b.hook?.chain ?? null },
        limits: this.o.limits,
      });
    let done = change(services);
    try {
      await this.o.session.run(done.text);
    } catch (e) {
      // Written as changes to what we wrote last, and an element it deletes is not there or one it adds already is
      // (someone else's edit of our table): the same change again, every service's chains and maps whole. Any other
      // refusal stands, the bookkeeping as it was.
      if (
        !services.some((s) => s.written !== undefined) ||
        !/No such file or directory|File exists/.test((e as Error).message)
      )
        throw e;
      this.o.log?.warn(
        { err: (e as Error).message },
        'ingress data plane: nft refused a change written as differences to the last one (something in our table ' +
          'was removed by someone else?); the change written again whole',
      );
      b.written = new Map();
      b.written6 = new Map();
      done = change(services.map(({ written: _, ...rest }) => rest));
      await this.o.session.run(done.text);
    }
    // In force: the state follows.
    b.services = next;
    b.slots = placed;
    b.targets = targets;
    for (const s of added) b.gone.delete(s);
    for (const s of released) b.gone.add(s);
    b.flowKinds = new Map(services.map((s) => [s.plan.serviceId, flowKeyKind(s.plan.protocol)]));
    b.maskMaps = new Map(services.map((s) => [s.plan.serviceId, maskMapIndexes(s.plan)]));
    b.claims = new Map(services.map((s) => [s.plan.serviceId, claimsOf(s.plan)]));
    b.moves = nextMovesById;
    for (const id of removedIds) b.written.delete(id);
    for (const [id, w] of done.written) b.written.set(id, w);
    b.statics6 ||= services.some((s) => s.family === 'ipv6');
    b.flowKinds6 = new Map(
      services.filter((s) => s.family === 'ipv6').map((s) => [s.plan.serviceId, flowKeyKind(s.plan.protocol)]),
    );
    for (const r of removed) if (r.family === 'ipv6') b.written6.delete(r.serviceId);
    for (const [id, w] of done.written6) b.written6.set(id, w);
    b.slots6 = new Map(
      [...live6].flatMap((s) => {
        const t = targets.get(s);
        return t !== undefined ? [[s, slotRule(t, 'ipv6')] as const] : [];
      }),
    );
    for (const s of added6) b.gone6.delete(s);
    for (const s of released6) b.gone6.add(s);
    b.hook = hook;
    this.o.movesTimer.schedule();
  }

  /**
   * Every IPv6 slot's MAC addresses looked up again (the engine watch, after a link, address, route or neighbour
   * change): where one changed (an engine with a new network card, one whose ARP entry came at last), its chain and its
   * services' engines sets are written again in one transaction.
   */
  async refreshMacs(): Promise<void> {
    const b = this.o.book;
    if (b.slots6.size === 0) return;
    const targets = new Map(b.targets);
    await this.learnMacs(new Set(b.slots6.keys()), targets, true);
    const moved = new Set(
      [...b.slots6].flatMap(([slot, rule]) => {
        const t = targets.get(slot);
        return t !== undefined && slotRule(t, 'ipv6') !== rule ? [slot] : [];
      }),
    );
    if (moved.size === 0) return;
    b.targets = targets;
    const ids = [...b.services.values()]
      .filter((s) => s.engines.some((e) => moved.has(b.slots.get(slotKey(s.serviceId, e)) ?? 0)))
      .map((s) => s.serviceId);
    await this.write(new Map(b.services), [], new Set(ids));
  }

  /**
   * The MAC addresses of the IPv6 slots' engines and devices (engine-macs.ts), looked up where a target has none yet
   * (a new slot, or no neighbour entry the last time): one `ip` batch. An engine with no neighbour entry is said once
   * per lookup: its buckets' IPv6 connections are routed normally until it has one (the engine watch looks again).
   */
  async learnMacs(live6: ReadonlySet<number>, targets: Map<number, IngressSlot>, all = false): Promise<void> {
    const need = [...live6].flatMap((s) => {
      const t = targets.get(s);
      return t !== undefined && (all || t.mac == null || t.deviceMac == null) ? [t] : [];
    });
    if (need.length === 0) return;
    const pairs = [...new Map(need.map((t) => [macKey(t.engine, t.device), t])).values()];
    const macs = await engineMacs(execBatch(this.o.exec), pairs);
    const missing = new Set<string>();
    for (const t of need) {
      const m = macs.get(macKey(t.engine, t.device));
      targets.set(t.slot, { ...t, mac: m?.mac ?? null, deviceMac: m?.deviceMac ?? null });
      if (m?.mac == null || m.deviceMac == null) missing.add(`${t.engine} on ${t.device}`);
    }
    if (missing.size > 0)
      this.o.log?.warn(
        { engines: [...missing] },
        `ingress data plane: no MAC address for engine ${[...missing].join(', ')} (no ARP entry of the gateway's, or ` +
          `a device without one): its buckets' IPv6 connections are routed normally until it has one`,
      );
  }
}
