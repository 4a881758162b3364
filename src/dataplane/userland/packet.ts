// Reading a captured Ethernet frame as far as the userland data plane needs: where the IPv4 packet is, its addresses,
// ports and TCP flags. Frames that are not IPv4 (or are truncated) give null; nothing here throws.
import type { CapturedFrame } from './native.js';
import { TCP_FLAGS, packetTransportChecksum } from '../../wire/gre.js';

export const ETHERNET_HEADER_LENGTH = 14;
const ETHERTYPE_IPV4 = 0x0800;

export interface ParsedPacket {
  /**
   * The whole frame, exactly its captured length: a view into the capture's buffer, which native pcap reuses for the
   * next packet. Read it (or copy it) before returning from the 'packet' handler; never send it as it is.
   */
  readonly frame: Buffer;
  /** The IPv4 packet inside, exactly its total length (a view into `frame`). */
  readonly ip: Buffer;
  readonly protocol: number;
  readonly source: string;
  readonly destination: string;
  /** 32-bit big-endian values for the hash. */
  readonly sourceIp: number;
  readonly destinationIp: number;
  /** 0 when the protocol has no ports or the packet is a later fragment. */
  readonly sourcePort: number;
  readonly destinationPort: number;
  /** TCP flags byte; 0 for other protocols. */
  readonly tcpFlags: number;
}

export function formatMac(b: Buffer, offset: number): string {
  return [...b.subarray(offset, offset + 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

export function parseMac(mac: string): Buffer {
  const parts = mac.split(':');
  if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) {
    throw new Error(`"${mac}" is not a MAC address (aa:bb:cc:dd:ee:ff)`);
  }
  return Buffer.from(parts.map((p) => parseInt(p, 16)));
}

const quad = (b: Buffer, o: number): string => `${b[o]}.${b[o + 1]}.${b[o + 2]}.${b[o + 3]}`;

/** Parses a captured Ethernet frame; null when it is not a whole IPv4 packet. */
export function parseFrame(captured: CapturedFrame): ParsedPacket | null {
  const caplen = captured.header.length >= 12 ? captured.header.readUInt32LE(8) : captured.buf.length;
  const frame = captured.buf.subarray(0, Math.min(caplen, captured.buf.length));
  if (frame.length < ETHERNET_HEADER_LENGTH + 20 || frame.readUInt16BE(12) !== ETHERTYPE_IPV4) return null;
  const o = ETHERNET_HEADER_LENGTH;
  const b0 = frame[o] ?? 0;
  const ihl = (b0 & 0x0f) * 4;
  const total = frame.readUInt16BE(o + 2);
  if (b0 >> 4 !== 4 || ihl < 20 || total < ihl || o + total > frame.length) return null;
  const ip = frame.subarray(o, o + total);
  const protocol = ip[9] ?? 0;
  const firstFragment = (ip.readUInt16BE(6) & 0x1fff) === 0;
  const hasPorts = firstFragment && (protocol === 6 || protocol === 17) && total >= ihl + 4;
  const tcpFlags = firstFragment && protocol === 6 && total >= ihl + 14 ? (ip[ihl + 13] ?? 0) : 0;
  return {
    frame,
    ip,
    protocol,
    source: quad(ip, 12),
    destination: quad(ip, 16),
    sourceIp: ip.readUInt32BE(12),
    destinationIp: ip.readUInt32BE(16),
    sourcePort: hasPorts ? ip.readUInt16BE(ihl) : 0,
    destinationPort: hasPorts ? ip.readUInt16BE(ihl + 2) : 0,
    tcpFlags,
  };
}

/** Writes an IPv4 Ethernet header (destination MAC, source MAC, type 0x0800) over the first 14 bytes of `frame`. */
export function writeEthernetHeader(frame: Buffer, destinationMac: Buffer, sourceMac: Buffer): Buffer {
  destinationMac.copy(frame, 0);
  sourceMac.copy(frame, 6);
  frame.writeUInt16BE(ETHERTYPE_IPV4, 12);
  return frame;
}

/** True for a TCP SYN without ACK: the first packet of a new connection. */
export const isNewConnection = (p: ParsedPacket): boolean =>
  p.protocol === 6 && (p.tcpFlags & (TCP_FLAGS.SYN | TCP_FLAGS.ACK)) === TCP_FLAGS.SYN;

/**
 * Completes a TCP/UDP checksum that does not verify, in place. A packet captured on the gateway from a local sender
 * (veth, virtio) with checksum offload still holds only the pseudo-header sum; the kernel would finish it on the way
 * out, so userland must too. Returns true when it rewrote the checksum. Fragments and UDP without checksum are left.
 */
export function completeTransportChecksum(ip: Buffer): boolean {
  const protocol = ip[9] ?? 0;
  if ((protocol !== 6 && protocol !== 17) || (ip.readUInt16BE(6) & 0x3fff) !== 0) return false;
  const ihl = ((ip[0] ?? 0) & 0x0f) * 4;
  const segment = ip.subarray(ihl);
  const at = protocol === 6 ? 16 : 6;
  if (segment.length < at + 2) return false;
  if (protocol === 17 && segment.readUInt16BE(at) === 0) return false;
  if (packetTransportChecksum(ip, protocol, segment) === 0) return false;
  segment.writeUInt16BE(0, at);
  let sum = packetTransportChecksum(ip, protocol, segment);
  if (protocol === 17 && sum === 0) sum = 0xffff;
  segment.writeUInt16BE(sum, at);
  return true;
}
