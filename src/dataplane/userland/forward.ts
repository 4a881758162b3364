// The userland backend's per-packet path: a captured frame is read, given to the service that owns its connection,
// classified (the flow table for stickiness, else mask or hash assignment) and sent on: GRE (the GRE + WCCP redirect
// header in front of the client's IPv4 packet, unchanged), L2 (the frame re-injected with the engine's MAC), or the
// direct path. What does not fit the egress MTU is segmented, or dropped with a reason.
import type { EngineAddress } from '../../buckets/table.js';
import { lookupBucket } from '../../buckets/hash.js';
import { matchMask } from '../../buckets/mask.js';
import { GRE_REDIRECT_OVERHEAD, TCP_FLAGS, writeGreRedirectHeader } from '../../wire/gre.js';
import type { RateLimitedLog } from '../../rate-limited-log.js';
import type { UserlandCounters } from './counters.js';
import { flowKey, type FlowEntry } from './flows.js';
import type { CapturedFrame } from './native.js';
import {
  ETHERNET_HEADER_LENGTH,
  completeTransportChecksum,
  isNewConnection,
  parseFrame,
  writeEthernetHeader,
  type ParsedPacket,
} from './packet.js';
import { ownerOf, type Plane, type ServiceState } from './plane.js';
import { fitToMtu, packetWithHeadroom, withHeadroom } from './segment.js';
import type { PacketSessions } from './sessions.js';

/** Outer IPv4 (20) + GRE (4) + WCCP redirect header (4): what GRE adds to the client's packet. */
const GRE_OVERHEAD = 28;
/** Room before every packet sent for the header written in front of it: Ethernet (14) or GRE + redirect (8). */
const HEADROOM = 14;

export interface ForwarderOptions {
  readonly sessions: PacketSessions;
  readonly counters: UserlandCounters;
  readonly limited: RateLimitedLog;
  /** The MTU assumed where the links do not tell (the direct path; engines without a lookup). */
  readonly defaultMtu: number;
}

export class Forwarder {
  constructor(private readonly o: ForwarderOptions) {}

  /** One captured frame of `serviceId`'s capture on `device`, by the plane in force when it arrived. */
  onPacket(plane: Plane, serviceId: number, device: string, captured: CapturedFrame): void {
    const st = plane.byId.get(serviceId);
    if (st === undefined || st.mode !== 'redirect') return;
    const p = parseFrame(captured);
    if (p === null || p.protocol !== st.service.protocol) return;
    // Never redirect what an engine sends (draft 4.10): its own fetches must reach the origin.
    if (st.usable.has(p.source)) return;
    const key = flowKey(p.protocol, p.source, p.sourcePort, p.destination, p.destinationPort);
    if (plane.ordered.length > 1) {
      const owner = ownerOf(plane, st, device, p, key);
      if (owner === 'theirs') return;
      if (owner === 'direct') {
        const { sessions, counters } = this.o;
        for (const ip of this.fitted(p, this.o.defaultMtu, p.destination)) {
          counters.counts.othersPassedOn++;
          sessions.direct().send(ip, 0, ip.length, p.destination, null, sessions.afterSend('direct', p.destination));
        }
        return;
      }
    }
    const flows = st.traffic.flows;
    let flow = isNewConnection(p) ? undefined : flows.touch(key);
    if (flow !== undefined && flow.engine !== null && !st.usable.has(flow.engine)) flow = undefined;
    flow ??= this.classify(st, key, p);
    this.forward(plane, st, flow, p);
    if (p.protocol === 6 && (p.tcpFlags & TCP_FLAGS.RST) !== 0) flows.end(key);
    else if (p.protocol === 6 && (p.tcpFlags & TCP_FLAGS.FIN) !== 0) flows.finSeen(key);
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

  private forward(plane: Plane, st: ServiceState, flow: FlowEntry, p: ParsedPacket): void {
    const { sessions, counters } = this.o;
    const engine: EngineAddress | null = flow.engine;
    if (engine === null) {
      for (const ip of this.fitted(p, this.o.defaultMtu, p.destination)) {
        counters.counts.bypassed++;
        sessions.direct().send(ip, 0, ip.length, p.destination, null, sessions.afterSend('direct', p.destination));
      }
      return;
    }
    let c = st.traffic.engines.get(engine);
    if (c === undefined) st.traffic.engines.set(engine, (c = { packets: 0, bytes: 0 }));
    if (st.service.forwarding === 'gre') {
      const mtu = st.greMtu.get(engine) ?? this.o.defaultMtu;
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
        sessions.gre().send(payload, 0, payload.length, engine, null, sessions.afterSend('gre', engine));
        c.packets++;
        c.bytes += ip.length;
      }
      return;
    }
    const link = st.l2.get(engine);
    if (link === undefined) {
      sessions.sendFailed('l2', engine, 'no link to the engine is known (its MAC was not resolved at apply)');
      return;
    }
    for (const ip of this.fitted(p, link.mtu, engine)) {
      try {
        const frame = writeEthernetHeader(withHeadroom(ip, ETHERNET_HEADER_LENGTH), link.engineMac, link.deviceMac);
        sessions.injector(link.device, plane).inject(frame);
      } catch (e) {
        sessions.sendFailed('l2', engine, (e as Error).message);
        continue;
      }
      c.packets++;
      c.bytes += ip.length;
    }
  }

  /**
   * The packet as it may leave: a copy of it when it fits `maxIpLength`, its TCP segments when it does not, nothing
   * (counted and logged with the reason) when it cannot be made to fit. Each has HEADROOM bytes of its own allocation
   * before it for the Ethernet or GRE header (withHeadroom): the capture's buffer is the addon's, reused for the next
   * packet, while a raw-socket send may complete later; this is the one copy of every byte sent.
   */
  private fitted(p: ParsedPacket, maxIpLength: number, to: string): readonly Buffer[] {
    const counts = this.o.counters.counts;
    const r = fitToMtu(p.ip, maxIpLength, HEADROOM);
    if (r.kind === 'fits') {
      const ip = packetWithHeadroom(p.ip.length, HEADROOM);
      p.ip.copy(ip);
      if (completeTransportChecksum(ip)) counts.checksumsCompleted++;
      return [ip];
    }
    if (r.kind === 'segmented') {
      counts.segmented++;
      counts.segments += r.segments.length;
      return r.segments;
    }
    const count = ++this.o.counters.oversizeDropped[r.reason];
    // Rate-limited per reason: a bulk flow would otherwise log per packet.
    this.o.limited.warn(
      p.source,
      `userland-oversize-${r.reason}`,
      { oversize: r.reason, detail: r.detail, to, count },
      `userland dropped a packet towards ${to} larger than the MTU (${r.reason}): ${r.detail}`,
    );
    return [];
  }
}
