// The nft backend's ip objects held against the kernel: the slots' ip rules and routes and the guard pair are read
// back every ipCheckMs and after link, address or route changes, and put back where someone else removed them (a link
// that went down, an `ip rule flush`); an L2 engine found on another device has its routes moved there
// (docs/dataplane/nft.md, "An engine that moves"), and an engine's IPv6 route to its IPv6 neighbour there (or to its
// new MAC's).
import type { EngineAddress } from '../../buckets/table.js';
import type { Log } from '../../log.js';
import { RateLimitedLog } from '../../rate-limited-log.js';
import { DataplaneError } from '../errors.js';
import { watchLinks, type LinkWatch } from '../kernel/link-watch.js';
import { NO_ROUTE_CHANGE, changeRoutes, missingIpObjects, offLinkError } from '../kernel/routes.js';
import type { MissingIp } from '../kernel/routes.js';
import { parseSlotKey } from '../kernel/engine-slots.js';
import { changeRoutes6, ipv6NextHops, missingIpv6Objects } from '../kernel/routes6.js';
import type { SlotBook } from './book.js';
import type { NftCommands } from './commands.js';
import type { SetTimer } from './options.js';

export interface IpRepairOptions {
  readonly book: SlotBook;
  readonly io: NftCommands;
  readonly log: Log | undefined;
  readonly now: () => number;
  readonly setTimer: SetTimer;
  /** How often the ip objects are read back; 0: never on a timer. */
  readonly ipCheckMs: number;
  /** Check them after every link, address or route change too (`ip monitor`). */
  readonly watchLinks: boolean;
  readonly netns: string | undefined;
  /** Runs a job in the backend's queue. */
  readonly serial: <T>(job: () => Promise<T>) => Promise<T>;
  readonly started: () => boolean;
  /**
   * An engine of an IPv6 service is on another device than its IPv6 route and has no IPv6 neighbour entry there: its
   * IPv6 services are to be applied again (their IPv6 goes direct, or is refused, until it has one).
   */
  readonly ipv6Lost?: (engines: readonly EngineAddress[]) => void;
}

export class IpRepair {
  /** The ip objects put back after someone else removed them, and the checks that could not put them back. */
  readonly counts = { rules: 0, routes: 0, guard: 0, failures: 0, moved: 0 };
  private readonly ipLog: RateLimitedLog | null;
  private ipCheckTimer: { cancel(): void } | null = null;
  private linkWatch: LinkWatch | null = null;

  constructor(private readonly o: IpRepairOptions) {
    this.ipLog = o.log !== undefined ? new RateLimitedLog(o.log, { now: o.now }, 60_000) : null;
  }

  /** Checks the slots' ip objects every ipCheckMs and after link or address changes, until stop(). */
  watch(): void {
    this.unwatch();
    const check = (): void => {
      void this.check().catch((e: Error) => {
        this.counts.failures += 1;
        if (e instanceof DataplaneError && e.reason === 'engine-not-attached')
          this.ipLog?.warn('ip', 'engine-off-link', { error: e.message }, `nft data plane: ${e.message}`);
        else
          this.ipLog?.warn(
            'ip',
            'ip-objects-not-restored',
            { error: e.message },
            `cannot put back wccpd's ip rules and routes yet: ${e.message}`,
          );
      });
    };
    if (this.o.ipCheckMs > 0) {
      const tick = (): void => {
        this.ipCheckTimer = this.o.setTimer(() => {
          check();
          tick();
        }, this.o.ipCheckMs);
      };
      tick();
    }
    if (this.o.watchLinks)
      this.linkWatch = watchLinks({
        ...(this.o.netns !== undefined ? { netns: this.o.netns } : {}),
        // An admin's `ip route` change may move an engine to another interface (our own routes' lines are ignored).
        routes: true,
        onChange: check,
        onExit: (why, ms) => this.o.log?.warn({ why }, `ip monitor ended (${why}); started again in ${ms} ms`),
      });
  }

  unwatch(): void {
    this.ipCheckTimer?.cancel();
    this.ipCheckTimer = null;
    void this.linkWatch?.stop();
    this.linkWatch = null;
  }

  /**
   * Puts back the slots' ip rules and routes and the guard pair where someone else removed them: a link that went
   * down takes every route through it along (the kernel announces nothing), `ip rule flush` the rules. Redirection
   * through them stops silently meanwhile (packets find no route in the slot's table and go on to the main one).
   * Throws when something could not be put back (the link is still down): the next check tries again.
   */
  check(): Promise<MissingIp | null> {
    return this.o.serial(() => this.repair());
  }

  /** check() in the queue (also a table restore's first step). */
  async repair(): Promise<MissingIp | null> {
    const b = this.o.book;
    if (!this.o.started() || b.routed.size === 0) return null;
    const wanted = new Map([...b.routed].map(([slot, key]) => [slot, b.slotRoute(key, slot)]));
    const l2 = [...new Set([...wanted.values()].filter((r) => r.forwarding === 'l2').map((r) => r.engine))];
    const missing = await missingIpObjects(this.o.io.batch, [...wanted.values()], b.guarded, l2);
    // An engine on another device than its routes (an `ip route` change, a renumbering: docs/dataplane/nft.md, "An
    // engine that moves"), or no longer on-link (its routes cannot be made again; said below, after the others are
    // repaired).
    const moved = new Map<EngineAddress, { from: string; to: string; slots: number[] }>();
    const offLink = new Map<EngineAddress, DataplaneError>();
    for (const [engine, segment] of missing.segments) {
      if ('error' in segment) {
        offLink.set(engine, segment.error);
        continue;
      }
      const slots = [...wanted.values()].filter((r) => r.forwarding === 'l2' && r.engine === engine).map((r) => r.slot);
      const on = slots.map((slot) => missing.routeDevices.get(slot)).find((d) => d !== undefined && d !== segment.dev);
      const from = on ?? b.engineDevices.get(engine);
      if (from !== undefined && from !== segment.dev) moved.set(engine, { from, to: segment.dev, slots });
    }
    const reachable = (slot: number): boolean => {
      const r = wanted.get(slot);
      return r !== undefined && !(r.forwarding === 'l2' && offLink.has(r.engine));
    };
    const rules = missing.rules.filter(reachable);
    const routesOnly = missing.routes.filter((s) => !missing.rules.includes(s) && reachable(s));
    const movedSlots = new Set([...moved.values()].flatMap((m) => m.slots));
    const removedRoutes = missing.routes.filter((s) => !movedSlots.has(s));
    if (rules.length + routesOnly.length > 0 || missing.guard) {
      if (removedRoutes.length + rules.length > 0 || missing.guard) {
        const what =
          `${removedRoutes.length} route(s) [slots ${removedRoutes.join(' ')}], ` +
          `${rules.length} rule(s) [slots ${rules.join(' ')}]${missing.guard ? ', the guard pair' : ''}`;
        this.o.log?.warn(
          { routes: removedRoutes, rules, guard: missing.guard },
          `wccpd's ip objects were removed by someone else (a link that went down, an ip rule flush?): ${what}; putting them back`,
        );
      }
      await changeRoutes(
        this.o.io.exec,
        this.o.io.record,
        {
          ...NO_ROUTE_CHANGE,
          create: rules.flatMap((s) => wanted.get(s) ?? []),
          retarget: routesOnly.flatMap((s) => wanted.get(s) ?? []),
          addGuard: missing.guard,
        },
        this.o.io.batch,
      );
      this.counts.rules += rules.length;
      this.counts.routes += removedRoutes.filter(reachable).length;
      if (missing.guard) this.counts.guard += 1;
    }
    for (const [engine, m] of moved) {
      this.counts.moved += 1;
      this.o.log?.warn(
        { engine, from: m.from, to: m.to, slots: m.slots, enginesMoved: this.counts.moved },
        `engine ${engine} moved from ${m.from} to ${m.to}: its redirected traffic follows it ` +
          `(the routes of slot${m.slots.length > 1 ? 's' : ''} ${m.slots.join(' ')} now go out ${m.to})`,
      );
    }
    const devices = new Map(
      [...missing.segments].flatMap(([e, seg]) =>
        'dev' in seg ? [[e, seg.dev] as const] : b.engineDevices.has(e) ? [[e, b.engineDevices.get(e)!] as const] : [],
      ),
    );
    await this.repair6(devices, moved);
    b.engineDevices = devices;
    if (offLink.size > 0) throw offLinkError(offLink, b.engineDevices);
    return missing;
  }

  /**
   * The IPv6 twins of the slots of IPv6 services (docs/dataplane/nft.md, "IPv6"): each engine's IPv6 next hop looked
   * up again on the device it is on now (`devices`; ONE `neigh show` in the persistent ip), so a route follows an
   * engine that moved to another segment or changed its MAC; then the same check and repair as IPv4's. An engine that
   * moved and has no IPv6 neighbour entry on its new device is handed to `ipv6Lost` (its route stays as it was).
   */
  private async repair6(
    devices: ReadonlyMap<EngineAddress, string>,
    movedIpv4: ReadonlyMap<EngineAddress, unknown>,
  ): Promise<void> {
    const b = this.o.book;
    if (b.routed6.size === 0) return;
    const engineOf = new Map<number, EngineAddress>();
    for (const slot of b.routed6.keys()) {
      const key = b.routed.get(slot);
      if (key !== undefined) engineOf.set(slot, parseSlotKey(key).engine);
    }
    const on = new Map<EngineAddress, string>();
    for (const e of new Set(engineOf.values())) {
      const dev = devices.get(e);
      if (dev !== undefined) on.set(e, dev);
    }
    const hops = await ipv6NextHops(this.o.io.batch, on);
    // What each route should name now: a next hop that is no longer the engine's (another device, another MAC) is a
    // move; none found on another device than the route's is a loss (an entry that aged out on the same device changes
    // nothing: the kernel solicits the next hop again).
    const wanted = new Map(b.routed6);
    const moved = new Map<EngineAddress, { from: string; to: string; slots: number[] }>();
    const lost = new Set<EngineAddress>();
    for (const [slot, had] of b.routed6) {
      const e = engineOf.get(slot);
      const hop = e === undefined ? undefined : hops.get(e);
      if (e === undefined || hop === undefined) continue;
      if (hop === null) {
        if (had.dev !== on.get(e)) {
          lost.add(e);
          wanted.delete(slot);
        }
        continue;
      }
      // Still one of the engine's addresses on its device: kept (a change, not a check, prefers its link-local).
      if (hop.dev === had.dev && hop.addresses.includes(had.via)) continue;
      wanted.set(slot, { via: hop.via, dev: hop.dev });
      const m = moved.get(e) ?? { from: `${had.via} dev ${had.dev}`, to: `${hop.via} dev ${hop.dev}`, slots: [] };
      m.slots.push(slot);
      moved.set(e, m);
    }
    const missing = await missingIpv6Objects(this.o.io.exec, wanted, b.guarded6);
    const movedSlots = new Set([...moved.values()].flatMap((m) => m.slots));
    const routesOnly = missing.routes.filter((s) => !missing.rules.includes(s));
    const removedRoutes = missing.routes.filter((s) => !movedSlots.has(s));
    if (missing.rules.length + routesOnly.length > 0 || missing.guard) {
      if (removedRoutes.length + missing.rules.length > 0 || missing.guard)
        this.o.log?.warn(
          { routes: removedRoutes, rules: missing.rules, guard: missing.guard, family: 'ipv6' },
          `wccpd's IPv6 ip objects were removed by someone else (a link that went down, an ip -6 rule flush?): ` +
            `${removedRoutes.length} route(s) [slots ${removedRoutes.join(' ')}], ${missing.rules.length} rule(s) ` +
            `[slots ${missing.rules.join(' ')}]${missing.guard ? ', the guard pair' : ''}; putting them back`,
        );
      const route = (slot: number) => {
        const r = wanted.get(slot);
        return r === undefined ? [] : [{ slot, ...r }];
      };
      await changeRoutes6(this.o.io.exec, this.o.io.record, {
        create: missing.rules.flatMap(route),
        retarget: routesOnly.flatMap(route),
        remove: [],
        addGuard: missing.guard,
        removeGuard: false,
      });
      this.counts.rules += missing.rules.length;
      this.counts.routes += removedRoutes.length;
      if (missing.guard) this.counts.guard += 1;
    }
    for (const slot of movedSlots) b.routed6.set(slot, wanted.get(slot)!);
    for (const [engine, m] of moved) {
      // An engine whose IPv4 moved in this check was counted there.
      if (!movedIpv4.has(engine)) this.counts.moved += 1;
      this.o.log?.warn(
        { engine, from: m.from, to: m.to, slots: m.slots, family: 'ipv6', enginesMoved: this.counts.moved },
        `engine ${engine}'s IPv6 next hop moved from ${m.from} to ${m.to}: its redirected IPv6 traffic follows it ` +
          `(the IPv6 route${m.slots.length > 1 ? 's' : ''} of slot${m.slots.length > 1 ? 's' : ''} ${m.slots.join(' ')} ` +
          `now go${m.slots.length > 1 ? '' : 'es'} via ${m.to})`,
      );
    }
    if (lost.size > 0) this.o.ipv6Lost?.([...lost].sort());
  }

  /** The `ip monitor` process's id while one runs (tests check stop() ends it). */
  monitorPid(): number | undefined {
    return this.linkWatch?.pid();
  }
}
