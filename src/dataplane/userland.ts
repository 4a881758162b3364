// The userland Redirector: per service, a pcap capture (immediate mode) on each client interface; each packet is
// classified in TypeScript (WCCP hash + bucket table, then the flow table for stickiness) and sent on by GRE
// (raw socket, protocol 47: GRE 0x883E + WCCP redirect header + the client's IPv4 packet unchanged) or L2 (the frame
// re-injected with the engine's MAC). A kernel rule it owns (userland-guard.ts) keeps the kernel from also forwarding
// what userland took over. Packet I/O, the kernel rule, the neighbour lookup and the clock are injected.
import { BUCKET_COUNT, type BucketTable, type EngineAddress } from '../buckets/table.js';
import { lookupBucket } from '../buckets/hash.js';
import { encodeGreRedirect } from '../wire/gre.js';
import { DataplaneError } from './errors.js';
import type { BucketCounters, RedirectCounters, Redirector, ServiceRedirect } from './redirector.js';
import { loadPacketIo, type CaptureSession, type CapturedFrame, type PacketIo, type RawSocket } from './native.js';
import type { Exec } from './nft-exec.js';
import { FlowTable, flowKey, type FlowEntry, type FlowTableOptions } from './userland-flows.js';
import { USERLAND_MARK, nftGuard, type GuardMode, type KernelGuard } from './userland-guard.js';
import { ipLinks, type EngineLink, type Links } from './userland-links.js';
import { TCP_FIN, TCP_RST, completeTransportChecksum, isNewConnection, parseFrame, parseMac, rewriteMacs, type ParsedPacket } from './userland-packet.js';

const IP_PROTOCOL_GRE = 47;
const IP_PROTOCOL_RAW = 255;
const SO_MARK = 36;
/** Matches nothing wccpd sends: the filter of sessions opened only to inject frames. */
const INJECT_ONLY_FILTER = 'ip proto 253';

export interface UserlandOptions {
  readonly io: PacketIo;
  readonly guard: KernelGuard;
  /** Needed for L2 forwarding only. */
  readonly links?: Links;
  /** Milliseconds; default Date.now. */
  readonly now?: () => number;
  readonly flows?: Omit<FlowTableOptions, 'now'>;
  /** How often a real timer sweeps ended and idle flows; 0 (default) = never (call sweep()). */
  readonly sweepIntervalMs?: number;
  /** One event line per notable thing (capture opened, send failed ...). */
  readonly log?: (event: string, fields: Readonly<Record<string, unknown>>) => void;
}

/** Numbers beyond the Redirector's counters, for the admin views and tests. */
export interface UserlandStats {
  /** Packets re-sent on the direct path because their bucket had no engine. */
  readonly bypassed: number;
  /** Packets that could not be sent (raw socket or inject error, or an engine without a known link). */
  readonly sendErrors: number;
  /** Packets whose TCP/UDP checksum was left partial by the sender's checksum offload and completed here. */
  readonly checksumsCompleted: number;
  /** Live flows per service id. */
  readonly flows: ReadonlyMap<number, number>;
}

export interface UserlandRedirector extends Redirector {
  /** Forgets ended and idle flows now; returns how many. */
  sweep(): number;
  stats(): UserlandStats;
}

interface MutableCounters { packets: number; bytes: number }

interface L2Target { readonly device: string; readonly engineMac: Buffer; readonly deviceMac: Buffer }

interface ServiceState {
  service: ServiceRedirect;
  /** The table with every bucket whose engine is not usable set to null. */
  effective: BucketTable;
  usable: ReadonlySet<EngineAddress>;
  mode: GuardMode;
  l2: ReadonlyMap<EngineAddress, L2Target>;
  readonly flows: FlowTable;
  captures: Map<string, CaptureSession>;
  readonly buckets: MutableCounters[];
  readonly engines: Map<EngineAddress, MutableCounters>;
}

const zeroBuckets = (): MutableCounters[] => Array.from({ length: BUCKET_COUNT }, () => ({ packets: 0, bytes: 0 }));

/** The pcap filter for a service's client -> server packets (the subset the shims understand too). */
export function captureFilter(s: ServiceRedirect): string {
  const proto = s.protocol === 6 ? 'tcp' : s.protocol === 17 ? 'udp' : `ip proto ${s.protocol}`;
  if (s.ports.length === 0 || (s.protocol !== 6 && s.protocol !== 17)) return `ip and ${proto}`;
  const dir = s.portsAreSource ? 'src' : 'dst';
  return `ip and ${proto} and (${s.ports.map((p) => `${dir} port ${p}`).join(' or ')})`;
}

function effectiveTable(s: ServiceRedirect): { table: BucketTable; usable: Set<EngineAddress>; assigned: number } {
  const usable = new Set(s.engines);
  let assigned = 0;
  const buckets = s.table.buckets.map((e) => {
    if (e === null || !usable.has(e)) return null;
    assigned++;
    return e;
  });
  return { table: { changeNumber: s.table.changeNumber, buckets }, usable, assigned };
}

function validate(s: ServiceRedirect): void {
  if (!Number.isInteger(s.serviceId) || s.serviceId < 0 || s.serviceId > 255) {
    throw new DataplaneError('unsupported-service', `service id ${s.serviceId} is not 0-255`);
  }
  if (s.table.buckets.length !== BUCKET_COUNT) {
    throw new DataplaneError('unsupported-service',
      `service ${s.serviceId}: the table has ${s.table.buckets.length} buckets, not ${BUCKET_COUNT}`);
  }
  if (s.ports.some((p) => !Number.isInteger(p) || p < 1 || p > 65535)) {
    throw new DataplaneError('unsupported-service', `service ${s.serviceId}: ports must be 1-65535`);
  }
}

export function createUserlandRedirector(options: UserlandOptions): UserlandRedirector {
  const now = options.now ?? Date.now;
  const log = options.log ?? ((): void => undefined);
  const services = new Map<number, ServiceState>();
  const injectors = new Map<string, CaptureSession>();
  let greSocket: RawSocket | null = null;
  let directSocket: RawSocket | null = null;
  let bypassed = 0;
  let sendErrors = 0;
  let checksumsCompleted = 0;
  let started = false;
  let timer: ReturnType<typeof setInterval> | null = null;

  const afterSend = (what: string, to: string) => (error: Error | null): void => {
    if (error !== null) {
      sendErrors++;
      log('userland-send-failed', { what, to, error: error.message });
    }
  };

  function gre(): RawSocket {
    greSocket ??= options.io.rawSocket.createSocket({ protocol: IP_PROTOCOL_GRE });
    return greSocket;
  }

  function direct(): RawSocket {
    if (directSocket === null) {
      directSocket = options.io.rawSocket.createSocket({ protocol: IP_PROTOCOL_RAW });
      // The guard's output rule tags the conntrack entry of re-sent packets, so later packets of the flow stay ours.
      directSocket.setOption(options.io.rawSocket.SocketLevel.SOL_SOCKET, SO_MARK, USERLAND_MARK);
    }
    return directSocket;
  }

  /** A session to inject L2 frames on a device: a capture already open there, or one that captures nothing. */
  function injector(device: string): CaptureSession {
    for (const st of services.values()) {
      const c = st.captures.get(device);
      if (c !== undefined) return c;
    }
    let s = injectors.get(device);
    if (s === undefined) {
      s = options.io.pcap.createSession(device, { filter: INJECT_ONLY_FILTER, buffer_timeout: 0 });
      injectors.set(device, s);
    }
    return s;
  }

  function forward(st: ServiceState, flow: FlowEntry, p: ParsedPacket): void {
    const engine = flow.engine;
    if (engine === null) {
      bypassed++;
      direct().send(p.ip, 0, p.ip.length, p.destination, null, afterSend('direct', p.destination));
      return;
    }
    let c = st.engines.get(engine);
    if (c === undefined) st.engines.set(engine, c = { packets: 0, bytes: 0 });
    if (st.service.forwarding === 'gre') {
      const payload = encodeGreRedirect({
        serviceId: st.service.serviceId,
        dynamic: st.service.serviceId !== 0,
        alternate: flow.altBucket !== null,
        altBucket: flow.altBucket ?? 0,
        priBucket: flow.bucket,
      }, p.ip);
      gre().send(payload, 0, payload.length, engine, null, afterSend('gre', engine));
    } else {
      const link = st.l2.get(engine);
      if (link === undefined) {
        sendErrors++;
        return;
      }
      try {
        injector(link.device).inject(rewriteMacs(p.frame, link.engineMac, link.deviceMac));
      } catch (e) {
        afterSend('l2', engine)(e as Error);
        return;
      }
    }
    c.packets++;
    c.bytes += p.ip.length;
  }

  function onPacket(serviceId: number, captured: CapturedFrame): void {
    const st = services.get(serviceId);
    if (st === undefined || st.mode !== 'redirect') return;
    const p = parseFrame(captured);
    if (p === null || p.protocol !== st.service.protocol) return;
    // Never redirect what an engine sends (draft 4.10): its own fetches must reach the origin.
    if (st.usable.has(p.source)) return;
    const key = flowKey(p.protocol, p.source, p.sourcePort, p.destination, p.destinationPort);
    let flow = isNewConnection(p) ? undefined : st.flows.touch(key);
    if (flow !== undefined && flow.engine !== null && !st.usable.has(flow.engine)) flow = undefined;
    if (flow === undefined) {
      const r = lookupBucket(st.effective, p, st.service.serviceFlags);
      const bucket = r.kind === 'alternate' ? r.primaryBucket : r.bucket;
      flow = st.flows.start(key, r.kind === 'unassigned' ? null : r.engine, bucket,
        r.kind === 'alternate' ? r.bucket : null);
      const b = st.buckets[r.bucket];
      if (b !== undefined) { b.packets++; b.bytes += p.ip.length; }
    }
    if (completeTransportChecksum(p)) checksumsCompleted++;
    forward(st, flow, p);
    if (p.protocol === 6 && (p.tcpFlags & TCP_RST) !== 0) st.flows.end(key);
    else if (p.protocol === 6 && (p.tcpFlags & TCP_FIN) !== 0) st.flows.finSeen(key);
  }

  function openCaptures(s: ServiceRedirect): Map<string, CaptureSession> {
    const opened = new Map<string, CaptureSession>();
    const filter = captureFilter(s);
    try {
      for (const device of s.clientInterfaces) {
        const session = options.io.pcap.createSession(device, { filter, buffer_timeout: 0 });
        session.on('packet', (frame: CapturedFrame) => onPacket(s.serviceId, frame));
        opened.set(device, session);
        log('userland-capture-opened', { service: s.serviceId, device, filter, native: options.io.native });
      }
    } catch (e) {
      for (const c of opened.values()) c.close();
      throw new DataplaneError('command-failed',
        `service ${s.serviceId}: cannot capture on ${s.clientInterfaces.join(', ')}: ${(e as Error).message}`);
    }
    return opened;
  }

  async function resolveLinks(s: ServiceRedirect, table: BucketTable): Promise<Map<EngineAddress, L2Target>> {
    const out = new Map<EngineAddress, L2Target>();
    if (s.forwarding !== 'l2') return out;
    if (options.links === undefined) {
      throw new DataplaneError('engine-not-attached', `service ${s.serviceId}: L2 forwarding needs a neighbour lookup`);
    }
    for (const engine of new Set(table.buckets)) {
      if (engine === null) continue;
      const link: EngineLink = await options.links.engineLink(engine);
      out.set(engine, { device: link.device, engineMac: parseMac(link.engineMac), deviceMac: parseMac(link.deviceMac) });
    }
    return out;
  }

  const guarded = (): { service: ServiceRedirect; mode: GuardMode }[] =>
    [...services.values()].map((st) => ({ service: st.service, mode: st.mode }));

  function closeAll(captures: Iterable<CaptureSession>): void {
    for (const c of captures) c.close();
  }

  function requireStarted(): void {
    if (!started) throw new DataplaneError('not-started', 'the userland data plane was not started: call start() first');
  }

  return {
    name: 'userland',

    async start() {
      if (started) return;
      await options.guard.remove();
      started = true;
      if ((options.sweepIntervalMs ?? 0) > 0) {
        timer = setInterval(() => { for (const st of services.values()) st.flows.sweep(); }, options.sweepIntervalMs);
        timer.unref();
      }
      log('userland-started', { native: options.io.native, reason: options.io.reason });
    },

    async apply(s) {
      requireStarted();
      validate(s);
      const { table, usable, assigned } = effectiveTable(s);
      const mode: GuardMode = assigned > 0 ? 'redirect' : s.failMode === 'closed' ? 'refuse' : 'none';
      const l2 = mode === 'redirect' ? await resolveLinks(s, table) : new Map<EngineAddress, L2Target>();
      const previous = services.get(s.serviceId);
      const filterChanged = previous !== undefined && (captureFilter(previous.service) !== captureFilter(s) ||
        previous.service.clientInterfaces.join() !== s.clientInterfaces.join());
      const reuse = previous !== undefined && previous.mode === 'redirect' && mode === 'redirect' && !filterChanged;
      const captures = mode !== 'redirect' ? new Map<string, CaptureSession>()
        : reuse ? previous.captures : openCaptures(s);
      const next: ServiceState = previous ?? {
        service: s, effective: table, usable, mode, l2, captures,
        flows: new FlowTable({ ...options.flows, now }), buckets: zeroBuckets(), engines: new Map(),
      };
      const before = previous === undefined ? undefined : { ...previous };
      Object.assign(next, { service: s, effective: table, usable, mode, l2, captures });
      services.set(s.serviceId, next);
      try {
        await options.guard.install(guarded());
      } catch (e) {
        // Put the previous state back: the previous rules are still in force (one nft transaction).
        if (!reuse) closeAll(captures.values());
        if (before === undefined) services.delete(s.serviceId);
        else Object.assign(next, before);
        throw e;
      }
      if (previous !== undefined && !reuse) closeAll(previous.captures.values());
      next.flows.dropEngines(usable);
      if (mode !== 'redirect') next.flows.clear();
    },

    async removeService(serviceId) {
      requireStarted();
      const st = services.get(serviceId);
      if (st === undefined) return;
      services.delete(serviceId);
      try {
        await options.guard.install(guarded());
      } catch (e) {
        services.set(serviceId, st);
        throw e;
      }
      closeAll(st.captures.values());
    },

    async stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
      for (const st of services.values()) closeAll(st.captures.values());
      closeAll(injectors.values());
      injectors.clear();
      greSocket?.close();
      directSocket?.close();
      greSocket = directSocket = null;
      services.clear();
      started = false;
      await options.guard.remove();
    },

    async counters(): Promise<RedirectCounters> {
      const buckets = new Map<number, readonly BucketCounters[]>();
      const engines = new Map<number, ReadonlyMap<EngineAddress, BucketCounters>>();
      for (const [id, st] of services) {
        buckets.set(id, st.buckets.map((c) => ({ ...c })));
        engines.set(id, new Map([...st.engines].map(([e, c]) => [e, { ...c }] as const)));
      }
      return { buckets, engines };
    },

    sweep() {
      let n = 0;
      for (const st of services.values()) n += st.flows.sweep();
      return n;
    },

    stats() {
      return { bypassed, sendErrors, checksumsCompleted, flows: new Map([...services].map(([id, st]) => [id, st.flows.size] as const)) };
    },
  };
}

/**
 * The userland backend as the daemon runs it: native packet I/O when the addons load (shims otherwise, which redirect
 * nothing real: check `io.native` and log `io.reason`), the nft guard and `ip -j` neighbour lookups via `exec`.
 */
export async function createUserlandBackend(
  exec: Exec, extra: Omit<UserlandOptions, 'io' | 'guard' | 'links'> & { prefer?: 'native' | 'shims' } = {},
): Promise<{ redirector: UserlandRedirector; io: PacketIo }> {
  const io = await loadPacketIo(extra.prefer === undefined ? {} : { prefer: extra.prefer });
  const redirector = createUserlandRedirector({
    sweepIntervalMs: 10_000, ...extra, io, guard: nftGuard(exec), links: ipLinks(exec),
  });
  return { redirector, io };
}
