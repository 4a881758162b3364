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
import { compareServiceOrder } from './ruleset.js';
import { USERLAND_MARK, nftGuard, type GuardMode, type KernelGuard } from './userland-guard.js';
import { ipLinks, type EngineLink, type Links } from './userland-links.js';
import { OVERSIZE_REASONS, fitToMtu, type OversizeReason } from './userland-segment.js';
import { ETHERNET_HEADER_LENGTH, TCP_FIN, TCP_RST, completeTransportChecksum, isNewConnection, parseFrame, parseMac, rewriteMacsInPlace, type ParsedPacket } from './userland-packet.js';

const IP_PROTOCOL_GRE = 47;
const IP_PROTOCOL_RAW = 255;
const SO_MARK = 36;
/** Matches nothing wccpd sends: the filter of sessions opened only to inject frames. */
const INJECT_ONLY_FILTER = 'ip proto 253';
/** Outer IPv4 (20) + GRE (4) + WCCP redirect header (4): what GRE adds to the client's packet. */
const GRE_OVERHEAD = 28;
const DEFAULT_MTU = 1500;
/** libpcap's largest snapshot: a GRO/GSO super-frame (up to 64 KiB of IP) must be captured whole to be segmented. */
const SNAP_LENGTH = 262_144;

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
  /** The MTU assumed where the links do not tell (the direct path; engines without a lookup). Default 1500. */
  readonly mtu?: number;
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

export interface UserlandRedirector extends Redirector {
  /** Forgets ended and idle flows now; returns how many. */
  sweep(): number;
  stats(): UserlandStats;
}

interface MutableCounters { packets: number; bytes: number }

interface L2Target { readonly device: string; readonly engineMac: Buffer; readonly deviceMac: Buffer; readonly mtu: number }

interface ServiceState {
  service: ServiceRedirect;
  /** The table with every bucket whose engine is not usable set to null. */
  effective: BucketTable;
  usable: ReadonlySet<EngineAddress>;
  mode: GuardMode;
  l2: ReadonlyMap<EngineAddress, L2Target>;
  /** GRE: the MTU of the device towards each engine (the inner packet may use it less GRE_OVERHEAD). */
  greMtu: ReadonlyMap<EngineAddress, number>;
  readonly flows: FlowTable;
  captures: Map<string, CaptureSession>;
  readonly buckets: MutableCounters[];
  readonly engines: Map<EngineAddress, MutableCounters>;
}

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
  const defaultMtu = options.mtu ?? DEFAULT_MTU;
  const services = new Map<number, ServiceState>();
  const injectors = new Map<string, CaptureSession>();
  let greSocket: RawSocket | null = null;
  let directSocket: RawSocket | null = null;
  let bypassed = 0;
  let sendErrors = 0;
  let checksumsCompleted = 0;
  let segmented = 0;
  let segments = 0;
  let othersPassedOn = 0;
  const oversizeDropped = Object.fromEntries(OVERSIZE_REASONS.map((r) => [r, 0])) as Record<OversizeReason, number>;
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

  /**
   * The packet as it may leave: itself when it fits `maxIpLength`, its TCP segments when it does not, nothing (counted
   * and logged with the reason) when it cannot be made to fit.
   */
  function fitted(p: ParsedPacket, maxIpLength: number, to: string): readonly Buffer[] {
    const r = fitToMtu(p.ip, maxIpLength);
    if (r.kind === 'fits') {
      if (completeTransportChecksum(p)) checksumsCompleted++;
      return [p.ip];
    }
    if (r.kind === 'segmented') {
      segmented++;
      segments += r.segments.length;
      return r.segments;
    }
    const n = ++oversizeDropped[r.reason];
    // First of a kind, then every 1000th: a bulk flow would otherwise log per packet.
    if (n === 1 || n % 1000 === 0) {
      log('userland-oversize-dropped', { reason: r.reason, detail: r.detail, to, source: p.source, count: n });
    }
    return [];
  }

  function forward(st: ServiceState, flow: FlowEntry, p: ParsedPacket): void {
    const engine = flow.engine;
    if (engine === null) {
      for (const ip of fitted(p, defaultMtu, p.destination)) {
        bypassed++;
        direct().send(ip, 0, ip.length, p.destination, null, afterSend('direct', p.destination));
      }
      return;
    }
    let c = st.engines.get(engine);
    if (c === undefined) st.engines.set(engine, c = { packets: 0, bytes: 0 });
    if (st.service.forwarding === 'gre') {
      const mtu = st.greMtu.get(engine) ?? defaultMtu;
      for (const ip of fitted(p, mtu - GRE_OVERHEAD, engine)) {
        const payload = encodeGreRedirect({
          serviceId: st.service.serviceId,
          dynamic: st.service.serviceId !== 0,
          alternate: flow.altBucket !== null,
          altBucket: flow.altBucket ?? 0,
          priBucket: flow.bucket,
        }, ip);
        gre().send(payload, 0, payload.length, engine, null, afterSend('gre', engine));
        c.packets++;
        c.bytes += ip.length;
      }
      return;
    }
    const link = st.l2.get(engine);
    if (link === undefined) {
      sendErrors++;
      return;
    }
    const ethernet = p.frame.subarray(0, ETHERNET_HEADER_LENGTH);
    for (const ip of fitted(p, link.mtu, engine)) {
      // p.frame is parseFrame's own copy (native pcap reuses its buffer), so its MACs are rewritten in place.
      const frame = ip === p.ip ? p.frame : Buffer.concat([ethernet, ip]);
      try {
        injector(link.device).inject(rewriteMacsInPlace(frame, link.engineMac, link.deviceMac));
      } catch (e) {
        afterSend('l2', engine)(e as Error);
        continue;
      }
      c.packets++;
      c.bytes += ip.length;
    }
  }

  const ordered = (): ServiceState[] =>
    [...services.values()].sort((a, b) => compareServiceOrder(a.service, b.service));

  /**
   * Overlapping services, as the nft backend does them: a connection belongs to the service that claimed it first
   * (a flow in its table, in either direction), else to the first service in priority order whose match takes the
   * packet. 'mine'; 'theirs' when that service sees the packet itself (its capture, or its kernel reject);
   * 'direct' when it does not: this service's kernel guard dropped the packet, so it is re-sent unchanged.
   */
  function ownerOf(st: ServiceState, device: string, p: ParsedPacket, key: string): 'mine' | 'theirs' | 'direct' {
    const reverse = flowKey(p.protocol, p.destination, p.destinationPort, p.source, p.sourcePort);
    for (const o of services.values()) {
      if (o !== st && (o.flows.has(key) || o.flows.has(reverse))) {
        return o.mode === 'redirect' && takes(o.service, device, p) ? 'theirs' : 'direct';
      }
    }
    for (const o of ordered()) {
      if (o === st) return 'mine';
      if (takes(o.service, device, p)) return o.mode === 'none' ? 'direct' : 'theirs';
    }
    return 'mine';
  }

  function onPacket(serviceId: number, device: string, captured: CapturedFrame): void {
    const st = services.get(serviceId);
    if (st === undefined || st.mode !== 'redirect') return;
    const p = parseFrame(captured);
    if (p === null || p.protocol !== st.service.protocol) return;
    // Never redirect what an engine sends (draft 4.10): its own fetches must reach the origin.
    if (st.usable.has(p.source)) return;
    const key = flowKey(p.protocol, p.source, p.sourcePort, p.destination, p.destinationPort);
    if (services.size > 1) {
      const owner = ownerOf(st, device, p, key);
      if (owner === 'theirs') return;
      if (owner === 'direct') {
        for (const ip of fitted(p, defaultMtu, p.destination)) {
          othersPassedOn++;
          direct().send(ip, 0, ip.length, p.destination, null, afterSend('direct', p.destination));
        }
        return;
      }
    }
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
    forward(st, flow, p);
    if (p.protocol === 6 && (p.tcpFlags & TCP_RST) !== 0) st.flows.end(key);
    else if (p.protocol === 6 && (p.tcpFlags & TCP_FIN) !== 0) st.flows.finSeen(key);
  }

  function openCaptures(s: ServiceRedirect): Map<string, CaptureSession> {
    const opened = new Map<string, CaptureSession>();
    const filter = captureFilter(s);
    try {
      for (const device of s.clientInterfaces) {
        const session = options.io.pcap.createSession(device, { filter, buffer_timeout: 0, snap_length: SNAP_LENGTH });
        session.on('packet', (frame: CapturedFrame) => onPacket(s.serviceId, device, frame));
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
      out.set(engine, {
        device: link.device, engineMac: parseMac(link.engineMac), deviceMac: parseMac(link.deviceMac),
        mtu: link.mtu ?? defaultMtu,
      });
    }
    return out;
  }

  /** GRE: the egress MTU towards each engine, when the links can tell (the default otherwise). */
  async function resolveGreMtu(s: ServiceRedirect, table: BucketTable): Promise<Map<EngineAddress, number>> {
    const out = new Map<EngineAddress, number>();
    const lookup = options.links?.routeMtu;
    if (s.forwarding !== 'gre' || lookup === undefined) return out;
    for (const engine of new Set(table.buckets)) {
      if (engine !== null) out.set(engine, await lookup.call(options.links, engine));
    }
    return out;
  }

  // In priority order, so an earlier service's reject (fail closed) comes before a later one's rules.
  const guarded = (): { service: ServiceRedirect; mode: GuardMode }[] =>
    ordered().map((st) => ({ service: st.service, mode: st.mode }));

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
      const greMtu = mode === 'redirect' ? await resolveGreMtu(s, table) : new Map<EngineAddress, number>();
      const previous = services.get(s.serviceId);
      const filterChanged = previous !== undefined && (captureFilter(previous.service) !== captureFilter(s) ||
        previous.service.clientInterfaces.join() !== s.clientInterfaces.join());
      const reuse = previous !== undefined && previous.mode === 'redirect' && mode === 'redirect' && !filterChanged;
      const captures = mode !== 'redirect' ? new Map<string, CaptureSession>()
        : reuse ? previous.captures : openCaptures(s);
      const next: ServiceState = previous ?? {
        service: s, effective: table, usable, mode, l2, greMtu, captures,
        flows: new FlowTable({ ...options.flows, now }), buckets: zeroBuckets(), engines: new Map(),
      };
      const before = previous === undefined ? undefined : { ...previous };
      Object.assign(next, { service: s, effective: table, usable, mode, l2, greMtu, captures });
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
      return {
        bypassed, sendErrors, checksumsCompleted, segmented, segments, oversizeDropped: { ...oversizeDropped }, othersPassedOn,
        flows: new Map([...services].map(([id, st]) => [id, st.flows.size] as const)),
      };
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
