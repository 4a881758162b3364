// The userland Redirector: per service, a pcap capture (immediate mode) on each client interface; each packet is
// classified in TypeScript (WCCP hash + bucket table, then the flow table for stickiness) and sent on by GRE
// (raw socket, protocol 47: GRE 0x883E + WCCP redirect header + the client's IPv4 packet unchanged) or L2 (the frame
// re-injected with the engine's MAC). A kernel rule it owns (guard.ts) keeps the kernel from also forwarding what
// userland took over. Packet I/O, the kernel rule, the neighbour lookup, the logger and the clock are injected.
// Its state is one immutable value per service (plane.ts); applyAll() swaps the services' new ones in at once, and a
// failed apply leaves the previous ones. The parts: sessions.ts (captures and sockets), forward.ts (the per-packet
// path), link-events.ts (link flaps, engines that move), counters.ts.
import type { EngineAddress } from '../../buckets/table.js';
import { DataplaneError } from '../errors.js';
import { byServiceId } from '../redirector.js';
import type {
  BackendDescriptor,
  BackendStatus,
  RedirectCounters,
  Redirector,
  RestoredObjects,
  ServiceRedirect,
} from '../redirector.js';
import { loadPacketIo, type CaptureSession, type PacketIo } from './native.js';
import { createExec, type Exec } from '../kernel/exec.js';
import { FlowTable, type FlowTableOptions } from './flows.js';
import { watchLinks, type LinkWatch } from '../kernel/link-watch.js';
import type { MonitorChild } from '../kernel/monitor.js';
import { USERLAND_TABLE, nftGuard, type GuardMode, type KernelGuard } from './guard.js';
import type { RestoreBackoff } from '../kernel/table-watch.js';
import { TableGuard } from '../kernel/table-guard.js';
import { ipLinks, type EngineLink, type Links } from './links.js';
import type { Log } from '../../log.js';
import { RateLimitedLog } from '../../rate-limited-log.js';
import { parseMac } from './packet.js';
import {
  EMPTY_PLANE,
  closeAll,
  effectiveTable,
  planeOf,
  receivingEngines,
  sameCapture,
  validate,
  zeroBuckets,
  type L2Target,
  type Plane,
  type Prepared,
} from './plane.js';
import { UserlandCounters, trafficCounters, type UserlandStats } from './counters.js';
import { PacketSessions } from './sessions.js';
import { Forwarder } from './forward.js';
import { LinkEvents } from './link-events.js';

const DEFAULT_MTU = 1500;

export interface UserlandOptions {
  /** Packet I/O, or how to load it: start() loads it the first time (loadPacketIo never throws). */
  readonly io: PacketIo | (() => Promise<PacketIo>);
  readonly guard: KernelGuard;
  /** Needed for L2 forwarding only. */
  readonly links?: Links;
  /** Monotonic milliseconds (durations only); default performance.now. */
  readonly now?: () => number;
  readonly flows?: Omit<FlowTableOptions, 'now'>;
  /** How often a real timer sweeps ended and idle flows; 0 (default) = never (call sweep()). */
  readonly sweepIntervalMs?: number;
  /** The MTU assumed where the links do not tell (the direct path; engines without a lookup). Default 1500. */
  readonly mtu?: number;
  /** The daemon's logger: packet I/O chosen, captures opened, send failures and oversize drops. Default: silent. */
  readonly log?: Log;
  /** Send failures and oversize drops: at most one line per reason per this many ms, with the count hidden. 10 s. */
  readonly logIntervalMs?: number;
  /**
   * Reopen the pcap sessions of a link that went down (or was deleted) once it is up again (`ip monitor link`): a
   * native session on such a link captures nothing any more, silently. Default false (createUserlandBackend: true).
   */
  readonly watchLinks?: boolean;
  /** Starts the link monitor (tests: a fake `ip monitor link` printing lines). */
  readonly linkMonitor?: () => MonitorChild;
  /** The link watch's debounce and least gap between two reopen checks, ms. Default 200 and 1000. */
  readonly linkDebounceMs?: number;
  readonly linkMinGapMs?: number;
  /**
   * Put the kernel guard back when someone else deletes or empties its table (a firewall reload, `nft flush table`;
   * `nft -j monitor destroy`, docs/userland.md). Default false (createUserlandBackend: true); only with the native
   * addons and a guard that can check itself.
   */
  readonly watchGuard?: boolean;
  /** How guard restores in a row are slowed down (tests shorten it); default DEFAULT_RESTORE_BACKOFF. */
  readonly restoreBackoff?: RestoreBackoff;
}

const SILENT: Log = { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined };

export class UserlandRedirector implements Redirector {
  readonly name = 'userland';
  readonly inIpHooks = true;
  private readonly now: () => number;
  private readonly log: Log;
  private readonly limited: RateLimitedLog;
  private readonly defaultMtu: number;
  private io: PacketIo | null;
  private plane: Plane = EMPTY_PLANE;
  /** apply() and removeService() one at a time, so each swaps from the plane the previous one left. */
  private changing: Promise<unknown> = Promise.resolve();
  private started = false;
  private timer: ReturnType<typeof setInterval> | null = null;
  private linkWatch: LinkWatch | null = null;
  /**
   * The guard table's watch, its checks and their backoff, and what it put back (restored()), as the kernel backends'
   * tables (table-guard.ts); made at the first start(), once the packet I/O says whether there is a kernel to watch.
   */
  private tableGuard: TableGuard | null = null;
  private readonly counts = new UserlandCounters();
  private readonly sessions: PacketSessions;
  private readonly forwarder: Forwarder;
  private readonly linkEvents: LinkEvents;

  constructor(private readonly options: UserlandOptions) {
    this.now = options.now ?? (() => performance.now());
    this.log = options.log ?? SILENT;
    this.limited = new RateLimitedLog(this.log, { now: this.now }, options.logIntervalMs ?? 10_000);
    this.defaultMtu = options.mtu ?? DEFAULT_MTU;
    this.io = typeof options.io === 'function' ? null : options.io;
    const counters = this.counts;
    this.sessions = new PacketSessions({
      packets: () => this.packets(),
      onPacket: (serviceId, device, frame) => this.forwarder.onPacket(this.plane, serviceId, device, frame),
      counters,
      log: this.log,
      limited: this.limited,
    });
    this.forwarder = new Forwarder({
      sessions: this.sessions,
      counters,
      limited: this.limited,
      defaultMtu: this.defaultMtu,
    });
    this.linkEvents = new LinkEvents({
      sessions: this.sessions,
      counters,
      links: options.links,
      log: this.log,
      limited: this.limited,
      plane: () => this.plane,
      setPlane: (plane) => {
        this.plane = plane;
      },
      started: () => this.started,
      reapply: (services) => this.applyNow(services),
    });
  }

  /** The packet I/O in use (native addons or shims, and why); null until start() has loaded it. */
  packetIo(): PacketIo | null {
    return this.io;
  }

  async start(): Promise<void> {
    if (this.started) return;
    if (this.io === null && typeof this.options.io === 'function') this.io = await this.options.io();
    await this.options.guard.remove();
    this.started = true;
    const interval = this.options.sweepIntervalMs ?? 0;
    if (interval > 0) {
      this.timer = setInterval(() => this.sweep(), interval);
      this.timer.unref();
    }
    // The shims have no links to watch.
    if (this.options.watchLinks === true && (this.packets().native || this.options.linkMonitor !== undefined)) {
      this.linkWatch = watchLinks({
        onLine: (l) => this.linkEvents.line(l),
        // Routes too: an `ip route` change can move an engine to another interface with no link or address event.
        routes: true,
        onChange: () => {
          void this.oneAtATime(() => this.linkEvents.reopenFlapped());
          void this.oneAtATime(() => this.linkEvents.followEngines()).catch((e: Error) => {
            const moves = this.counts.moves;
            moves.failedEngineChecks++;
            this.limited.warn(
              'engines',
              'userland-engine-check',
              { dataplane: 'userland', error: e.message, failedChecks: moves.failedEngineChecks },
              `userland: ${e.message}`,
            );
          });
        },
        ...(this.options.linkMonitor !== undefined ? { spawnChild: this.options.linkMonitor } : {}),
        ...(this.options.linkDebounceMs !== undefined ? { debounceMs: this.options.linkDebounceMs } : {}),
        ...(this.options.linkMinGapMs !== undefined ? { minGapMs: this.options.linkMinGapMs } : {}),
        onExit: (why, ms) =>
          this.log.warn({ dataplane: 'userland', why }, `ip monitor ended (${why}); started again in ${ms} ms`),
      });
    }
    this.tableGuard ??= new TableGuard({
      subject: 'userland data plane',
      checking: 'the guard table',
      table: 'the guard table',
      failedMeans: "the kernel forwards the services' new connections too until it works",
      fields: { dataplane: 'userland' },
      log: this.log,
      family: 'inet',
      tables: [USERLAND_TABLE],
      watch: this.options.watchGuard === true && this.packets().native && this.options.guard.check !== undefined,
      backoff: this.options.restoreBackoff,
      now: this.now,
      // Every deletion, our own installs' among them (each re-creates the table): the check tells them apart.
      onDeleted: () => 'rules',
      serial: (job) => this.oneAtATime(job),
      check: () => this.checkGuard(),
    });
    this.tableGuard.start();
    const io = this.packets();
    const line = { dataplane: 'userland', native: io.native, reason: io.reason };
    if (io.native) this.log.info(line, 'userland data plane uses the native pcap and raw-socket packages');
    else
      this.log.warn(
        line,
        `userland data plane uses the native-free shims (no packets leave this process): ${io.reason}`,
      );
  }

  apply(s: ServiceRedirect): Promise<void> {
    return this.applyAll([s]);
  }

  /** Every listed service's state swapped in at once: a packet sees all the new tables or all the old ones. */
  applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    return this.oneAtATime(() => this.applyNow([...byServiceId(services).values()]));
  }

  removeService(serviceId: number): Promise<void> {
    return this.oneAtATime(async () => {
      this.requireStarted();
      const before = this.plane;
      const st = before.byId.get(serviceId);
      if (st === undefined) return;
      await this.swap(planeOf(before.ordered.filter((o) => o !== st)), before);
      closeAll(st.captures.values());
    });
  }

  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    // What stop() deletes is meant: no check or restore from now on.
    await this.tableGuard?.stop();
    void this.linkWatch?.stop();
    this.linkWatch = null;
    this.linkEvents.clear();
    for (const st of this.plane.ordered) closeAll(st.captures.values());
    this.sessions.close();
    this.plane = EMPTY_PLANE;
    this.started = false;
    await this.options.guard.remove();
  }

  async counters(): Promise<RedirectCounters> {
    return trafficCounters(this.plane);
  }

  /** Forgets ended and idle flows now; returns how many. */
  sweep(): number {
    let n = 0;
    for (const st of this.plane.ordered) n += st.traffic.flows.sweep();
    return n;
  }

  /** The guard table put back after someone else deleted or emptied it (as `nftTables`), and failed checks. */
  restored(): RestoredObjects {
    return {
      ipRules: 0,
      ipRoutes: 0,
      ipGuard: 0,
      enginesMoved: this.counts.moves.enginesMoved,
      nftTables: this.tableGuard?.restores() ?? 0,
      failedChecks: (this.tableGuard?.failedChecks() ?? 0) + this.counts.moves.failedEngineChecks,
    };
  }

  /** In the change queue: the guard as last installed, or else installed again (the current plane, one transaction). */
  private async checkGuard(): Promise<void> {
    if (!this.started || this.tableGuard === null) return;
    const damage = await this.options.guard.check?.();
    if (damage === null || damage === undefined) return;
    await this.options.guard.install(this.plane.ordered.map((st) => ({ service: st.service, mode: st.mode })));
    const restored = this.tableGuard.restored();
    const applied = this.plane.ordered.map(
      (st) => `service ${st.service.serviceId} change ${st.service.table.changeNumber}`,
    );
    this.log.warn(
      { dataplane: 'userland', damage, restored },
      `nftables table inet ${USERLAND_TABLE} (the userland guard) was ${damage} by someone else (a firewall ` +
        `reload, nft flush table?); put back with ${applied.length > 0 ? applied.join(', ') : 'no service applied yet'}`,
    );
  }

  /** The packet I/O in words once start() loaded it, and the counters as the admin views show them. */
  status(): BackendStatus {
    return this.counts.status(this.io, this.plane);
  }

  stats(): UserlandStats {
    return this.counts.stats(this.plane);
  }

  private oneAtATime(change: () => Promise<void>): Promise<void> {
    const run = this.changing.then(change, change);
    this.changing = run.catch(() => undefined);
    return run;
  }

  /** The services' new states, prepared one by one, put in force by one swap (one guard transaction). */
  private async applyNow(services: readonly ServiceRedirect[]): Promise<void> {
    this.requireStarted();
    for (const s of services) validate(s);
    if (services.length === 0) return;
    const before = this.plane;
    const made: Prepared[] = [];
    try {
      for (const s of services) made.push(await this.prepare(s, before));
      const replaced = new Set(made.map((m) => m.previous));
      await this.swap(planeOf([...before.ordered.filter((o) => !replaced.has(o)), ...made.map((m) => m.next)]), before);
    } catch (e) {
      for (const m of made) if (!m.reuse) closeAll(m.next.captures.values());
      throw e;
    }
    for (const { next, previous, reuse } of made) {
      if (previous !== undefined && !reuse) closeAll(previous.captures.values());
      next.traffic.flows.dropEngines(next.usable);
      if (next.mode !== 'redirect') next.traffic.flows.clear();
    }
  }

  /** One service's next state: its links and MTUs resolved, its captures reused or opened (not yet in force). */
  private async prepare(s: ServiceRedirect, before: Plane): Promise<Prepared> {
    const usable = new Set(s.engines);
    const table = effectiveTable(s, usable);
    const receiving = receivingEngines(s, usable);
    const mode: GuardMode = receiving.size > 0 ? 'redirect' : s.failMode === 'closed' ? 'refuse' : 'none';
    const l2 = mode === 'redirect' ? await this.resolveLinks(s, receiving) : new Map<EngineAddress, L2Target>();
    const greMtu = mode === 'redirect' ? await this.resolveGreMtu(s, receiving) : new Map<EngineAddress, number>();
    // stop() may have run while the links were resolved (it does not wait for the queue).
    this.requireStarted();
    const previous = before.byId.get(s.serviceId);
    const reuse =
      previous !== undefined && previous.mode === 'redirect' && mode === 'redirect' && sameCapture(previous.service, s);
    const captures =
      mode !== 'redirect'
        ? new Map<string, CaptureSession>()
        : reuse
          ? previous.captures
          : this.sessions.openCaptures(s);
    const traffic = previous?.traffic ?? {
      flows: new FlowTable({ ...this.options.flows, now: this.now }),
      buckets: zeroBuckets(),
      engines: new Map(),
    };
    return { next: { service: s, effective: table, usable, mode, l2, greMtu, captures, traffic }, previous, reuse };
  }

  /**
   * Puts `next` in force with the kernel guard that goes with it. The packets captured while nft runs already see
   * `next`; when the transaction fails, `before` is back (the previous rules are still in force: one transaction).
   */
  private async swap(next: Plane, before: Plane): Promise<void> {
    this.plane = next;
    try {
      // In priority order, so an earlier service's reject (fail closed) comes before a later one's rules.
      await this.options.guard.install(next.ordered.map((st) => ({ service: st.service, mode: st.mode })));
    } catch (e) {
      this.plane = before;
      throw e;
    }
  }

  private requireStarted(): void {
    if (!this.started)
      throw new DataplaneError('not-started', 'the userland data plane was not started: call start() first');
  }

  private packets(): PacketIo {
    if (this.io === null)
      throw new DataplaneError('not-started', 'the userland data plane has no packet I/O: call start() first');
    return this.io;
  }

  private async resolveLinks(
    s: ServiceRedirect,
    engines: ReadonlySet<EngineAddress>,
  ): Promise<Map<EngineAddress, L2Target>> {
    const out = new Map<EngineAddress, L2Target>();
    if (s.forwarding !== 'l2') return out;
    const links = this.options.links;
    if (links === undefined) {
      throw new DataplaneError('engine-not-attached', `service ${s.serviceId}: L2 forwarding needs a neighbour lookup`);
    }
    for (const engine of engines) {
      const link: EngineLink = await links.engineLink(engine);
      out.set(engine, {
        device: link.device,
        engineMac: parseMac(link.engineMac),
        deviceMac: parseMac(link.deviceMac),
        mtu: link.mtu ?? this.defaultMtu,
      });
    }
    return out;
  }

  /** GRE: the egress MTU towards each engine, when the links can tell (the default otherwise). */
  private async resolveGreMtu(
    s: ServiceRedirect,
    engines: ReadonlySet<EngineAddress>,
  ): Promise<Map<EngineAddress, number>> {
    const out = new Map<EngineAddress, number>();
    const links = this.options.links;
    if (s.forwarding !== 'gre' || links?.routeMtu === undefined) return out;
    for (const engine of engines) out.set(engine, await links.routeMtu(engine));
    return out;
  }
}

export interface UserlandBackendOptions extends Omit<UserlandOptions, 'io' | 'guard' | 'links'> {
  /** Runs nft and ip; default: createExec(). */
  readonly exec?: Exec;
  readonly prefer?: 'native' | 'shims';
}

/**
 * The userland backend as the daemon runs it: start() loads native packet I/O when the addons load (shims otherwise,
 * which redirect nothing real: it logs which and why, and packetIo() tells), the nft guard and `ip -j` neighbour
 * lookups via `exec`, a flow sweep every 10 s, and with the native addons a link watch (`ip monitor link`) that
 * reopens the pcap sessions of a link that went down, once it is up again.
 */
export function createUserlandBackend(options: UserlandBackendOptions = {}): UserlandRedirector {
  const { exec = createExec(), prefer, ...rest } = options;
  return new UserlandRedirector({
    sweepIntervalMs: 10_000,
    watchLinks: true,
    watchGuard: true,
    ...rest,
    io: () => loadPacketIo(prefer === undefined ? {} : { prefer }),
    guard: nftGuard(exec),
    links: ipLinks(exec),
  });
}

export const userlandBackend: BackendDescriptor<UserlandBackendOptions> = {
  name: 'userland',
  create: (options) => createUserlandBackend(options),
};
