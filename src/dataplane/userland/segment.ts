// Fitting captured packets to the egress MTU. pcap on a gateway sees TCP "super-frames" of several MSS (GRO on a real
// NIC, GSO/TSO from a veth peer): the kernel would segment them on output, but a frame re-injected by pcap or sent on a
// raw socket must already fit, or the send fails (EMSGSIZE). So userland segments TCP as the kernel's GSO does:
// same headers, payload split at the MSS that fits, sequence numbers advanced, PSH/FIN on the last segment only, CWR on
// the first only, IP id + i, fresh IPv4 and TCP checksums. Anything else that does not fit is refused with a reason:
// userland never fragments IP.
import { TCP_FLAGS, internetChecksum, packetTransportChecksum } from '../../wire/gre.js';

const IP_DF = 0x4000;

/** Why an oversized packet was dropped instead of sent. */
export type OversizeReason =
  | 'not-tcp' // only TCP can be re-segmented; userland does not fragment IP
  | 'ip-fragment' // already a fragment: its TCP header is not (all) there
  | 'syn-or-rst' // a SYN or RST carrying more data than fits: not what GSO ever produces
  | 'headers-exceed-mtu'; // the IP + TCP headers alone leave no room for data

export const OVERSIZE_REASONS: readonly OversizeReason[] = [
  'not-tcp',
  'ip-fragment',
  'syn-or-rst',
  'headers-exceed-mtu',
];

export type FitResult =
  | { readonly kind: 'fits' }
  | { readonly kind: 'segmented'; readonly segments: readonly Buffer[] }
  | { readonly kind: 'dropped'; readonly reason: OversizeReason; readonly detail: string };

/**
 * A new IPv4 packet buffer of `length` bytes with `headroom` writable bytes before it in the same allocation (for the
 * Ethernet or GRE header the sender writes there: no second copy), the packet 4-byte aligned so its checksums read
 * 32 bits at a time. Not zero-filled: the caller writes every byte.
 */
export function packetWithHeadroom(length: number, headroom: number): Buffer {
  const raw = Buffer.allocUnsafe(headroom + length + 3);
  const pad = (4 - ((raw.byteOffset + headroom) & 3)) & 3;
  return raw.subarray(pad + headroom, pad + headroom + length);
}

/** The `headroom` bytes before a packetWithHeadroom() packet, and the packet: one view. */
export function withHeadroom(packet: Buffer, headroom: number): Buffer {
  return Buffer.from(packet.buffer, packet.byteOffset - headroom, packet.length + headroom);
}

/**
 * `ip` (one whole IPv4 packet) as packets of at most `maxIpLength` bytes. 'fits' means send it as it is; 'segmented'
 * gives new buffers (the input is not modified), each with `headroom` bytes before it (packetWithHeadroom).
 */
export function fitToMtu(ip: Buffer, maxIpLength: number, headroom = 0): FitResult {
  if (ip.length <= maxIpLength) return { kind: 'fits' };
  const protocol = ip[9] ?? 0;
  const flagsFragment = ip.readUInt16BE(6);
  const df = (flagsFragment & IP_DF) !== 0 ? ' (DF set)' : '';
  if (protocol !== 6) {
    return {
      kind: 'dropped',
      reason: 'not-tcp',
      detail:
        `IP protocol ${protocol} packet of ${ip.length} bytes${df} exceeds ${maxIpLength}: ` +
        'only TCP is re-segmented, userland does not fragment',
    };
  }
  if ((flagsFragment & 0x3fff) !== 0) {
    return {
      kind: 'dropped',
      reason: 'ip-fragment',
      detail: `TCP fragment of ${ip.length} bytes exceeds ${maxIpLength}: cannot re-segment a fragment`,
    };
  }
  const ihl = ((ip[0] ?? 0) & 0x0f) * 4;
  const tcpHeader = ((ip[ihl + 12] ?? 0) >> 4) * 4;
  const headers = ihl + tcpHeader;
  if (tcpHeader < 20 || headers > ip.length) {
    return { kind: 'dropped', reason: 'headers-exceed-mtu', detail: `TCP header of ${tcpHeader} bytes is malformed` };
  }
  const flags = ip[ihl + 13] ?? 0;
  if ((flags & (TCP_FLAGS.SYN | TCP_FLAGS.RST)) !== 0) {
    return {
      kind: 'dropped',
      reason: 'syn-or-rst',
      detail: `TCP ${(flags & TCP_FLAGS.SYN) !== 0 ? 'SYN' : 'RST'} of ${ip.length} bytes exceeds ${maxIpLength}`,
    };
  }
  const mss = maxIpLength - headers;
  if (mss <= 0) {
    return {
      kind: 'dropped',
      reason: 'headers-exceed-mtu',
      detail: `IP + TCP headers of ${headers} bytes leave no data in ${maxIpLength}`,
    };
  }
  const id = ip.readUInt16BE(4);
  const seq = ip.readUInt32BE(ihl + 4);
  const payload = ip.subarray(headers);
  const count = Math.ceil(payload.length / mss);
  const segments: Buffer[] = [];
  // One allocation for all the segments (a 64 KiB super-frame becomes about 45), each in a slot of its own with the
  // headroom before it and its IPv4 header 4-byte aligned.
  const slot = (headroom + headers + mss + 3) & ~3;
  const block = Buffer.allocUnsafe(slot * count + 3);
  const pad = (4 - ((block.byteOffset + headroom) & 3)) & 3;
  for (let i = 0; i < count; i++) {
    const chunk = payload.subarray(i * mss, Math.min(payload.length, (i + 1) * mss));
    const start = pad + i * slot + headroom;
    const seg = block.subarray(start, start + headers + chunk.length);
    ip.copy(seg, 0, 0, headers);
    chunk.copy(seg, headers);
    seg.writeUInt16BE(seg.length, 2);
    seg.writeUInt16BE((id + i) & 0xffff, 4);
    seg.writeUInt16BE(0, 10);
    seg.writeUInt16BE(internetChecksum(seg.subarray(0, ihl)), 10);
    seg.writeUInt32BE((seq + i * mss) >>> 0, ihl + 4);
    let f = flags;
    if (i < count - 1) f &= ~(TCP_FLAGS.PSH | TCP_FLAGS.FIN);
    if (i > 0) f &= ~TCP_FLAGS.CWR;
    seg[ihl + 13] = f;
    const tcp = seg.subarray(ihl);
    tcp.writeUInt16BE(0, 16);
    tcp.writeUInt16BE(packetTransportChecksum(seg, 6, tcp), 16);
    segments.push(seg);
  }
  return { kind: 'segmented', segments };
}
