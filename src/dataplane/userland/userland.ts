// The userland Redirector: per service, a pcap capture (immediate mode) on each client interface; each packet is
// classified in TypeScript (WCCP hash + bucket table, then the flow table for stickiness) and sent on by GRE
// (raw socket, protocol 47: GRE 0x883E + WCCP redirect header + the client's IPv4 packet unchanged) or L2 (the frame
// re-injected with the engine's MAC). A kernel rule it owns (userland-guard.ts) keeps the kernel from also forwarding
// what userland took over. Packet I/O, the kernel rule, the neighbour lookup, the logger and the clock are injected.
// Its state is one immutable value per service; applyAll() swaps the services' new ones in at once, and a failed
// apply leaves the previous ones.
import { BUCKET_COUNT, type BucketTable, type EngineAddress } from '../../buckets/table.js';
import { lookupBucket } from '../../buckets/hash.js';
import { matchMask } from '../../buckets/mask.js';
import { GRE_REDIRECT_OVERHEAD, writeGreRedirectHeader } from '../../wire/gre.js';
import { DataplaneError } from '../errors.js';
import { byServiceId } from '../redirector.js';
import type {
  BackendDescriptor,
  BackendStatus,
  BucketCounters,
  RedirectCounters,
  Redirector,
  RestoredObjects,
  ServiceRedirect,
} from '../redirector.js';
import { loadPacketIo, type CaptureSession, type CapturedFrame, type PacketIo, type RawSocket } from './native.js';
import { createExec, type Exec } from '../kernel/exec.js';
import { FlowTable, flowKey, type FlowEntry, type FlowTableOptions } from './flows.js';
import { compareServiceOrder } from '../kernel/rules.js';
import { watchLinks, type LinkWatch } from '../kernel/link-watch.js';
import type { MonitorChild } from '../kernel/monitor.js';
import { USERLAND_MARK, USERLAND_TABLE, nftGuard, type GuardMode, type KernelGuard } from './guard.js';
import type { RestoreBackoff } from '../kernel/table-watch.js';
import { TableGuard } from '../kernel/table-guard.js';
import { ipLinks, type EngineLink, type Links } from './links.js';
import { offLinkError } from '../kernel/routes.js';
import { OVERSIZE_REASONS, fitToMtu, packetWithHeadroom, withHeadroom, type OversizeReason } from './segment.js';
import type { Log } from '../../log.js';
import { RateLimitedLog } from '../../rate-limited-log.js';
import {
  ETHERNET_HEADER_LENGTH,
  TCP_FIN,
  TCP_RST,
  completeTransportChecksum,
  isNewConnection,
  parseFrame,
  parseMac,
  writeEthernetHeader,
  type ParsedPacket,
} from './packet.js';

const IP_PROTOCOL_GRE = 47;
const IP_PROTOCOL_RAW = 255;
const SO_MARK = 36;
/** Matches nothing wccpd sends: the filter of sessions opened only to inject frames. */
const INJECT_ONLY_FILTER = 'ip proto 253';
/** Outer IPv4 (20) + GRE (4) + WCCP redirect header (4): what GRE adds to the client's packet. */
const GRE_OVERHEAD = 28;
const DEFAULT_MTU = 1500;
/** Room before every packet sent for the header written in front of it: Ethernet (14) or GRE + redirect (8). */
const HEADROOM = 14;
/** libpcap's largest snapshot: a GRO/GSO super-frame (up to 64 KiB of IP) must be captured whole to be segmented. */
const SNAP_LENGTH = 262_144;

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

/**
 * A line of `ip monitor link` naming a link and whether it is up (administratively: IFF_UP); null for anything else
 * (address lines, continuation lines). A deleted link is not up.
 */
export function parseLinkLine(line: string): { device: string; up: boolean } | null {
  const m = /^(Deleted )?\d+: ([^:@\s]+)(?:@\S*)?: <([^>]*)>/.exec(line);
  if (m === null) return null;
  return { device: m[2]!, up: m[1] === undefined && m[3]!.split(',').includes('UP') };
}

/** Numbers beyond the Redirector's counters, for the admin views (/metrics, status) and tests. */
export interface UserlandStats {
  /** Packets re-sent on the direct path because their bucket had no engine. */
  readonly bypassed: number;
  /** pcap sessions (captures and injection sessions) reopened because their link went down or was re-created. */
  readonly capturesReopened: number;
  /** Packets that could not be sent (raw socket or inject error, or an engine without a known link). */
  readonly sendErrors: number;
  /** Packets whose TCP/UDP checksum was left partial by the sender's checksum offload and completed here. */
  readonly checksumsCompleted: number;
  /** Captured TCP packets larger than the egress MTU (GRO/GSO super-frames) split into MTU-sized segments. */
  readonly segmented: number;
  /** The segments those packets became (each counted as a packet in the engine counters). */
  readonly segments: number;
  /** Packets larger than the egress MTU that could not be segmented, dropped, by reason. */
  readonly oversizeDropped: Readonly<Record<OversizeReason, number>>;
  /** Live flows per service id. */
  readonly flows: ReadonlyMap<number, number>;
  /**
   * Packets a service captured that belong to another service (a connection another one claimed, or a packet an
   * earlier service matches but does not capture), re-sent unchanged on the direct path and counted by no service.
   */
  readonly othersPassedOn: number;
}

interface MutableCounters {
  packets: number;
  bytes: number;
}

interface L2Target {
  readonly device: string;
  readonly engineMac: Buffer;
  readonly deviceMac: Buffer;
  readonly mtu: number;
}

/** What outlives an apply(): the service's flows and traffic counters. */
interface ServiceTraffic {
  readonly flows: FlowTable;
  readonly buckets: readonly MutableCounters[];
  readonly engines: Map<EngineAddress, MutableCounters>;
}

/** What one apply() decided for a service. Never changed: the next apply() builds a new one. */
interface ServiceState {
  readonly service: ServiceRedirect;
  /** The table with every bucket whose engine is not usable set to null. */
  readonly effective: BucketTable;
  readonly usable: ReadonlySet<EngineAddress>;
  readonly mode: GuardMode;
  readonly l2: ReadonlyMap<EngineAddress, L2Target>;
  /** GRE: the MTU of the device towards each engine (the inner packet may use it less GRE_OVERHEAD). */
  readonly greMtu: ReadonlyMap<EngineAddress, number>;
  readonly captures: ReadonlyMap<string, CaptureSession>;
  readonly traffic: ServiceTraffic;
}

/** A service's next state before it is in force, with the one it replaces (its captures reused or not). */
interface Prepared {
  readonly next: ServiceState;
  readonly previous: ServiceState | undefined;
  readonly reuse: boolean;
}

/** Every service's state, by id and in priority order: swapped whole by apply() and removeService(). */
interface Plane {
  readonly byId: ReadonlyMap<number, ServiceState>;
  readonly ordered: readonly ServiceState[];
}

function planeOf(states: Iterable<ServiceState>): Plane {
  const ordered = [...states].sort((a, b) => compareServiceOrder(a.service, b.service));
  return { byId: new Map(ordered.map((st) => [st.service.serviceId, st] as const)), ordered };
}

const EMPTY_PLANE: Plane = planeOf([]);

const SILENT: Log = { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined };

const zeroBuckets = (): MutableCounters[] => Array.from({ length: BUCKET_COUNT }, () => ({ packets: 0, bytes: 0 }));

/** True when the service's match takes this packet arriving on `device` (what its capture filter selects). */
function takes(s: ServiceRedirect, device: string, p: ParsedPacket): boolean {
  if (!s.clientInterfaces.includes(device) || p.protocol !== s.protocol || s.engines.includes(p.source)) return false;
  if (s.ports.length === 0 || (s.protocol !== 6 && s.protocol !== 17)) return true;
  return s.ports.includes(s.portsAreSource ? p.sourcePort : p.destinationPort);
}

/** The pcap filter for a service's client -> server packets (the subset the shims understand too). */
export function captureFilter(s: ServiceRedirect): string {
  const proto = s.protocol === 6 ? 'tcp' : s.protocol === 17 ? 'udp' : `ip proto ${s.protocol}`;
  if (s.ports.length === 0 || (s.protocol !== 6 && s.protocol !== 17)) return `ip and ${proto}`;
  const dir = s.portsAreSource ? 'src' : 'dst';
  return `ip and ${proto} and (${s.ports.map((p) => `${dir} port ${p}`).join(' or ')})`;
}

const sameCapture = (a: ServiceRedirect, b: ServiceRedirect): boolean =>
  captureFilter(a) === captureFilter(b) && a.clientInterfaces.join() === b.clientInterfaces.join();

/** The table with every bucket whose engine is not live set to null. */
function effectiveTable(s: ServiceRedirect, usable: ReadonlySet<EngineAddress>): BucketTable {
  return {
    changeNumber: s.table.changeNumber,
    buckets: s.table.buckets.map((e) => (e !== null && usable.has(e) ? e : null)),
  };
}

/** The live engines new connections may go to: those the mask's values name (mask assignment), else the table's. */
function receivingEngines(s: ServiceRedirect, usable: ReadonlySet<EngineAddress>): Set<EngineAddress> {
  const named =
    s.maskSets !== undefined ? s.maskSets.flatMap((set) => set.values.map((v) => v.engine)) : s.table.buckets;
  return new Set(named.filter((e): e is EngineAddress => e !== null && usable.has(e)));
}

function validate(s: ServiceRedirect): void {
  if (!Number.isInteger(s.serviceId) || s.serviceId < 0 || s.serviceId > 255) {
    throw new DataplaneError('unsupported-service', `service id ${s.serviceId} is not 0-255`);
  }
  if (s.table.buckets.length !== BUCKET_COUNT) {
    throw new DataplaneError(
      'unsupported-service',
      `service ${s.serviceId}: the table has ${s.table.buckets.length} buckets, not ${BUCKET_COUNT}`,
    );
  }
  if (s.ports.some((p) => !Number.isInteger(p) || p < 1 || p > 65535)) {
    throw new DataplaneError('unsupported-service', `service ${s.serviceId}: ports must be 1-65535`);
  }
}

function closeAll(captures: Iterable<CaptureSession>): void {
  for (const c of captures) c.close();
}

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
  private readonly injectors = new Map<string, CaptureSession>();
  private greSocket: RawSocket | null = null;
  private directSocket: RawSocket | null = null;
  private started = false;
  private timer: ReturnType<typeof setInterval> | null = null;
  private linkWatch: LinkWatch | null = null;
  /**
   * The guard table's watch, its checks and their backoff, and what it put back (restored()), as the kernel backends'
   * tables (table-guard.ts); made at the first start(), once the packet I/O says whether there is a kernel to watch.
   */
  private tableGuard: TableGuard | null = null;
  /** Links in use that went down or were deleted since their sessions were opened, with why (for the log). */
  private readonly linksDown = new Map<string, string>();
  /** The last state `ip monitor` told of each link in linksDown. */
  private readonly linkUp = new Map<string, boolean>();
  private readonly counts = {
    bypassed: 0,
    capturesReopened: 0,
    sendErrors: 0,
    checksumsCompleted: 0,
    segmented: 0,
    segments: 0,
    othersPassedOn: 0,
  };
  /** Engines found on another interface and followed there, and engine look-ups that failed (restored()). */
  private readonly moves = { enginesMoved: 0, failedEngineChecks: 0 };
  private readonly oversizeDropped = Object.fromEntries(OVERSIZE_REASONS.map((r) => [r, 0])) as Record<
    OversizeReason,
    number
  >;

  constructor(private readonly options: UserlandOptions) {
    this.now = options.now ?? (() => performance.now());
    this.log = options.log ?? SILENT;
    this.limited = new RateLimitedLog(this.log, { now: this.now }, options.logIntervalMs ?? 10_000);
    this.defaultMtu = options.mtu ?? DEFAULT_MTU;
    this.io = typeof options.io === 'function' ? null : options.io;
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
        onLine: (l) => this.linkLine(l),
        // Routes too: an `ip route` change can move an engine to another interface with no link or address event.
        routes: true,
        onChange: () => {
          void this.oneAtATime(() => this.reopenFlapped());
          void this.oneAtATime(() => this.followEngines()).catch((e: Error) => {
            this.moves.failedEngineChecks++;
            this.limited.warn(
              'engines',
              'userland-engine-check',
              { dataplane: 'userland', error: e.message, failedChecks: this.moves.failedEngineChecks },
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
    this.linksDown.clear();
    this.linkUp.clear();
    for (const st of this.plane.ordered) closeAll(st.captures.values());
    closeAll(this.injectors.values());
    this.injectors.clear();
    this.greSocket?.close();
    this.directSocket?.close();
    this.greSocket = this.directSocket = null;
    this.plane = EMPTY_PLANE;
    this.started = false;
    await this.options.guard.remove();
  }

  async counters(): Promise<RedirectCounters> {
    const buckets = new Map<number, readonly BucketCounters[]>();
    const engines = new Map<number, ReadonlyMap<EngineAddress, BucketCounters>>();
    for (const [id, st] of this.plane.byId) {
      buckets.set(
        id,
        st.traffic.buckets.map((c) => ({ ...c })),
      );
      engines.set(id, new Map([...st.traffic.engines].map(([e, c]) => [e, { ...c }] as const)));
    }
    return { buckets, engines };
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
      enginesMoved: this.moves.enginesMoved,
      nftTables: this.tableGuard?.restores() ?? 0,
      failedChecks: (this.tableGuard?.failedChecks() ?? 0) + this.moves.failedEngineChecks,
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
    const io = this.io;
    const s = this.stats();
    return {
      detail: io === null ? '' : io.native ? 'native pcap and raw-socket' : `native-free shims: ${io.reason}`,
      userland: {
        bypassed: s.bypassed,
        capturesReopened: s.capturesReopened,
        sendErrors: s.sendErrors,
        checksumsCompleted: s.checksumsCompleted,
        segmented: s.segmented,
        segments: s.segments,
        oversizeDropped: { ...s.oversizeDropped },
        othersPassedOn: s.othersPassedOn,
        flows: [...s.flows].map(([service, flows]) => ({ service, flows })),
      },
    };
  }

  stats(): UserlandStats {
    return {
      ...this.counts,
      oversizeDropped: { ...this.oversizeDropped },
      flows: new Map(this.plane.ordered.map((st) => [st.service.serviceId, st.traffic.flows.size] as const)),
    };
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
      mode !== 'redirect' ? new Map<string, CaptureSession>() : reuse ? previous.captures : this.openCaptures(s);
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

  private sendFailed(what: string, to: string, detail: string): void {
    this.counts.sendErrors++;
    this.limited.warn(
      to,
      `userland-send-failed-${what}`,
      { what, to, error: detail, sendErrors: this.counts.sendErrors },
      `userland could not send a packet (${what}) to ${to}: ${detail}`,
    );
  }

  private afterSend(what: string, to: string): (error: Error | null) => void {
    return (error) => {
      if (error !== null) this.sendFailed(what, to, error.message);
    };
  }

  private gre(): RawSocket {
    if (this.greSocket === null) {
      const socket = this.packets().rawSocket.createSocket({ protocol: IP_PROTOCOL_GRE });
      this.greSocket = this.onSocketError(socket, 'gre', () => {
        if (this.greSocket === socket) this.greSocket = null;
      });
    }
    return this.greSocket;
  }

  /**
   * raw-socket emits a failed receive as 'error' (and closes the socket): with no listener that would end the process.
   * Counted as a send error and closed; the next send opens a new socket.
   */
  private onSocketError(socket: RawSocket, what: string, forget: () => void): RawSocket {
    socket.on('error', (e: Error) => {
      forget();
      this.sendFailed(what, 'its raw socket', e.message);
      try {
        socket.close();
      } catch {
        // closed already
      }
    });
    return socket;
  }

  private direct(): RawSocket {
    if (this.directSocket === null) {
      const raw = this.packets().rawSocket;
      const socket = raw.createSocket({ protocol: IP_PROTOCOL_RAW });
      this.directSocket = this.onSocketError(socket, 'direct', () => {
        if (this.directSocket === socket) this.directSocket = null;
      });
      // The guard's output rule tags the conntrack entry of re-sent packets, so later packets of the flow stay ours.
      this.directSocket.setOption(raw.SocketLevel.SOL_SOCKET, SO_MARK, USERLAND_MARK);
    }
    return this.directSocket;
  }

  /** A session to inject L2 frames on a device: a capture already open there, or one that captures nothing. */
  private injector(device: string): CaptureSession {
    for (const st of this.plane.ordered) {
      const c = st.captures.get(device);
      if (c !== undefined) return c;
    }
    let s = this.injectors.get(device);
    if (s === undefined) {
      s = this.packets().pcap.createSession(device, { filter: INJECT_ONLY_FILTER, buffer_timeout: 0 });
      this.injectors.set(device, s);
    }
    return s;
  }

  /**
   * The packet as it may leave: a copy of it when it fits `maxIpLength`, its TCP segments when it does not, nothing
   * (counted and logged with the reason) when it cannot be made to fit. Each has HEADROOM bytes of its own allocation
   * before it for the Ethernet or GRE header (withHeadroom): the capture's buffer is the addon's, reused for the next
   * packet, while a raw-socket send may complete later; this is the one copy of every byte sent.
   */
  private fitted(p: ParsedPacket, maxIpLength: number, to: string): readonly Buffer[] {
    const r = fitToMtu(p.ip, maxIpLength, HEADROOM);
    if (r.kind === 'fits') {
      const ip = packetWithHeadroom(p.ip.length, HEADROOM);
      p.ip.copy(ip);
      if (completeTransportChecksum(ip)) this.counts.checksumsCompleted++;
      return [ip];
    }
    if (r.kind === 'segmented') {
      this.counts.segmented++;
      this.counts.segments += r.segments.length;
      return r.segments;
    }
    const count = ++this.oversizeDropped[r.reason];
    // Rate-limited per reason: a bulk flow would otherwise log per packet.
    this.limited.warn(
      p.source,
      `userland-oversize-${r.reason}`,
      { oversize: r.reason, detail: r.detail, to, count },
      `userland dropped a packet towards ${to} larger than the MTU (${r.reason}): ${r.detail}`,
    );
    return [];
  }

  private forward(st: ServiceState, flow: FlowEntry, p: ParsedPacket): void {
    const engine = flow.engine;
    if (engine === null) {
      for (const ip of this.fitted(p, this.defaultMtu, p.destination)) {
        this.counts.bypassed++;
        this.direct().send(ip, 0, ip.length, p.destination, null, this.afterSend('direct', p.destination));
      }
      return;
    }
    let c = st.traffic.engines.get(engine);
    if (c === undefined) st.traffic.engines.set(engine, (c = { packets: 0, bytes: 0 }));
    if (st.service.forwarding === 'gre') {
      const mtu = st.greMtu.get(engine) ?? this.defaultMtu;
      const header = {
        serviceId: st.service.serviceId,
        dynamic: st.service.serviceId !== 0,
        alternate: flow.altBucket !== null,
        altBucket: flow.altBucket ?? 0,
        priBucket: flow.bucket,
      };
      for (const ip of this.fitted(p, mtu - GRE_OVERHEAD, engine)) {
        const payload = withHeadroom(ip, GRE_REDIRECT_OVERHEAD);
        writeGreRedirectHeader(header, payload, 0);
        this.gre().send(payload, 0, payload.length, engine, null, this.afterSend('gre', engine));
        c.packets++;
        c.bytes += ip.length;
      }
      return;
    }
    const link = st.l2.get(engine);
    if (link === undefined) {
      this.sendFailed('l2', engine, 'no link to the engine is known (its MAC was not resolved at apply)');
      return;
    }
    for (const ip of this.fitted(p, link.mtu, engine)) {
      try {
        const frame = writeEthernetHeader(withHeadroom(ip, ETHERNET_HEADER_LENGTH), link.engineMac, link.deviceMac);
        this.injector(link.device).inject(frame);
      } catch (e) {
        this.sendFailed('l2', engine, (e as Error).message);
        continue;
      }
      c.packets++;
      c.bytes += ip.length;
    }
  }

  /**
   * Overlapping services, as the nft backend does them: a connection belongs to the service that claimed it first
   * (a flow in its table, in either direction), else to the first service in priority order whose match takes the
   * packet. 'mine'; 'theirs' when that service sees the packet itself (its capture, or its kernel reject);
   * 'direct' when it does not: this service's kernel guard dropped the packet, so it is re-sent unchanged.
   */
  private ownerOf(
    plane: Plane,
    st: ServiceState,
    device: string,
    p: ParsedPacket,
    key: string,
  ): 'mine' | 'theirs' | 'direct' {
    const reverse = flowKey(p.protocol, p.destination, p.destinationPort, p.source, p.sourcePort);
    for (const o of plane.ordered) {
      if (o !== st && (o.traffic.flows.has(key) || o.traffic.flows.has(reverse))) {
        return o.mode === 'redirect' && takes(o.service, device, p) ? 'theirs' : 'direct';
      }
    }
    for (const o of plane.ordered) {
      if (o === st) return 'mine';
      if (takes(o.service, device, p)) return o.mode === 'none' ? 'direct' : 'theirs';
    }
    return 'mine';
  }

  private onPacket(serviceId: number, device: string, captured: CapturedFrame): void {
    const plane = this.plane;
    const st = plane.byId.get(serviceId);
    if (st === undefined || st.mode !== 'redirect') return;
    const p = parseFrame(captured);
    if (p === null || p.protocol !== st.service.protocol) return;
    // Never redirect what an engine sends (draft 4.10): its own fetches must reach the origin.
    if (st.usable.has(p.source)) return;
    const key = flowKey(p.protocol, p.source, p.sourcePort, p.destination, p.destinationPort);
    if (plane.ordered.length > 1) {
      const owner = this.ownerOf(plane, st, device, p, key);
      if (owner === 'theirs') return;
      if (owner === 'direct') {
        for (const ip of this.fitted(p, this.defaultMtu, p.destination)) {
          this.counts.othersPassedOn++;
          this.direct().send(ip, 0, ip.length, p.destination, null, this.afterSend('direct', p.destination));
        }
        return;
      }
    }
    const flows = st.traffic.flows;
    let flow = isNewConnection(p) ? undefined : flows.touch(key);
    if (flow !== undefined && flow.engine !== null && !st.usable.has(flow.engine)) flow = undefined;
    flow ??= this.classify(st, key, p);
    this.forward(st, flow, p);
    if (p.protocol === 6 && (p.tcpFlags & TCP_RST) !== 0) flows.end(key);
    else if (p.protocol === 6 && (p.tcpFlags & TCP_FIN) !== 0) flows.finSeen(key);
  }

  /**
   * A new connection's flow. Mask assignment (draft 4.11.2): the Mask/Value Sets in order, the first equal value names
   * the engine (no value, or an engine not live: the direct path); the redirect header's buckets are hash-only, so 0.
   * Hash assignment: the bucket of the hash of the fields the service flags select, counted per bucket.
   */
  private classify(st: ServiceState, key: string, p: ParsedPacket): FlowEntry {
    const sets = st.service.maskSets;
    if (sets !== undefined) {
      const engine = matchMask(sets, p);
      return st.traffic.flows.start(key, engine !== null && st.usable.has(engine) ? engine : null, 0);
    }
    const r = lookupBucket(st.effective, p, st.service.serviceFlags);
    const b = st.traffic.buckets[r.bucket];
    if (b !== undefined) {
      b.packets++;
      b.bytes += p.ip.length;
    }
    const bucket = r.kind === 'alternate' ? r.primaryBucket : r.bucket;
    return st.traffic.flows.start(
      key,
      r.kind === 'unassigned' ? null : r.engine,
      bucket,
      r.kind === 'alternate' ? r.bucket : null,
    );
  }

  private openCapture(s: ServiceRedirect, device: string): CaptureSession {
    const session = this.packets().pcap.createSession(device, {
      filter: captureFilter(s),
      buffer_timeout: 0,
      snap_length: SNAP_LENGTH,
    });
    session.on('packet', (frame: CapturedFrame) => this.onPacket(s.serviceId, device, frame));
    return session;
  }

  private openCaptures(s: ServiceRedirect): Map<string, CaptureSession> {
    const io = this.packets();
    const opened = new Map<string, CaptureSession>();
    const filter = captureFilter(s);
    try {
      for (const device of s.clientInterfaces) {
        opened.set(device, this.openCapture(s, device));
        this.log.info(
          { dataplane: 'userland', service: s.serviceId, device, filter, native: io.native },
          `userland captures service ${s.serviceId} on ${device} (${filter})`,
        );
      }
    } catch (e) {
      closeAll(opened.values());
      throw new DataplaneError(
        'command-failed',
        `service ${s.serviceId}: cannot capture on ${s.clientInterfaces.join(', ')}: ${(e as Error).message}`,
      );
    }
    return opened;
  }

  /** True when this backend captures or injects on `device`, or reaches an engine through it (L2). */
  private usesDevice(device: string): boolean {
    if (this.injectors.has(device)) return true;
    for (const st of this.plane.ordered) {
      if (st.captures.has(device)) return true;
      for (const t of st.l2.values()) if (t.device === device) return true;
    }
    return false;
  }

  /**
   * A line of `ip monitor link`: a link in use that goes down or is deleted is remembered (a native pcap session on
   * it captures nothing from then on, even once it is up again; an injection session fails on a re-created one), with
   * the last state told, for reopenFlapped().
   */
  private linkLine(line: string): void {
    const l = parseLinkLine(line);
    if (l === null || !this.usesDevice(l.device)) return;
    if (line.startsWith('Deleted')) this.linksDown.set(l.device, 'was deleted');
    else if (!l.up && !this.linksDown.has(l.device)) this.linksDown.set(l.device, 'went down');
    if (!this.linksDown.has(l.device)) return;
    this.linkUp.set(l.device, l.up);
    if (!l.up)
      this.limited.warn(
        l.device,
        'userland-link-down',
        { dataplane: 'userland', device: l.device, why: this.linksDown.get(l.device) },
        `userland: ${l.device} ${this.linksDown.get(l.device)}: nothing is captured or injected there until it is up`,
      );
  }

  /**
   * Reopens the sessions on the links that went down or were deleted and are up again. Runs in the apply queue, at
   * most once a second (the link watch's gap), so a link flapping in a loop costs one reopen a second.
   */
  private async reopenFlapped(): Promise<void> {
    if (!this.started) return;
    for (const [device, why] of [...this.linksDown]) {
      if (!this.usesDevice(device)) {
        this.linksDown.delete(device);
        this.linkUp.delete(device);
        continue;
      }
      // Still down, or deleted and not back: its sessions wait for the line telling it is up.
      if (this.linkUp.get(device) !== true) continue;
      this.linksDown.delete(device);
      this.linkUp.delete(device);
      try {
        await this.reopenOn(device, why);
      } catch (e) {
        if (!this.started) return; // stop() ran meanwhile: nothing to reopen
        // Tried again at the next link event.
        this.linksDown.set(device, why);
        this.linkUp.set(device, true);
        this.limited.warn(
          device,
          'userland-reopen-failed',
          { dataplane: 'userland', device, error: (e as Error).message },
          `userland could not reopen its pcap sessions on ${device}: ${(e as Error).message}`,
        );
      }
    }
  }

  private async reopenOn(device: string, why: string): Promise<void> {
    const plane = this.plane;
    const replaced = new Map<ServiceState, ServiceState>();
    try {
      for (const st of plane.ordered) {
        if (!st.captures.has(device)) continue;
        const session = this.openCapture(st.service, device);
        replaced.set(st, { ...st, captures: new Map(st.captures).set(device, session) });
      }
    } catch (e) {
      for (const st of replaced.values()) st.captures.get(device)?.close();
      throw e;
    }
    this.plane = planeOf(plane.ordered.map((st) => replaced.get(st) ?? st));
    for (const st of replaced.keys()) {
      st.captures.get(device)?.close();
      this.reopened(device, `service ${st.service.serviceId}`, why, 'capture');
    }
    const injector = this.injectors.get(device);
    if (injector !== undefined) {
      this.injectors.delete(device);
      injector.close();
      this.injector(device);
      this.reopened(device, 'L2 forwarding', why, 'injection');
    }
    // A re-created link has a new MAC, and so may the engine behind it: resolved again (captures kept).
    if (why !== 'was deleted') return;
    const l2 = this.plane.ordered.filter(
      (st) => st.mode === 'redirect' && [...st.l2.values()].some((t) => t.device === device),
    );
    await this.applyNow(l2.map((st) => st.service));
  }

  /**
   * After a link, address or route change (in the apply queue, at most once a second): every L2 engine looked up again
   * in one `ip -batch`; the services of an engine now on another device are prepared again (its MAC learnt there) and
   * swapped in, with a log line per engine; one no longer on-link is reported with the error its join would get, and
   * its frames still go out of the device it was on until it is on-link again (docs/userland.md, "An engine that
   * moves").
   */
  private async followEngines(): Promise<void> {
    const lookup = this.options.links?.engineSegments;
    if (!this.started || lookup === undefined) return;
    const on = new Map<EngineAddress, string>();
    for (const st of this.plane.ordered)
      if (st.mode === 'redirect') for (const [engine, t] of st.l2) on.set(engine, t.device);
    if (on.size === 0) return;
    const segments = await lookup([...on.keys()]);
    const moved = new Map<EngineAddress, { from: string; to: string }>();
    const offLink = new Map<EngineAddress, DataplaneError>();
    for (const [engine, segment] of segments) {
      const from = on.get(engine);
      if ('error' in segment) offLink.set(engine, segment.error);
      else if (from !== undefined && from !== segment.dev) moved.set(engine, { from, to: segment.dev });
    }
    if (moved.size > 0) {
      const services = this.plane.ordered
        .filter((st) => st.mode === 'redirect' && [...st.l2.keys()].some((e) => moved.has(e)))
        .map((st) => st.service);
      await this.applyNow(services);
      for (const [engine, m] of moved) {
        this.moves.enginesMoved++;
        this.log.warn(
          { dataplane: 'userland', engine, from: m.from, to: m.to, enginesMoved: this.moves.enginesMoved },
          `engine ${engine} moved from ${m.from} to ${m.to}: its redirected traffic follows it ` +
            `(its frames now go out ${m.to})`,
        );
      }
    }
    if (offLink.size > 0) throw offLinkError(offLink, on);
  }

  private reopened(device: string, what: string, why: string, kind: 'capture' | 'injection'): void {
    this.counts.capturesReopened++;
    this.log.info(
      { dataplane: 'userland', device, session: kind, for: what, why, capturesReopened: this.counts.capturesReopened },
      `userland reopened its ${kind} session on ${device} (${what}): ${device} ${why} and is up again`,
    );
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
