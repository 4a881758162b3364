// Writes classic libpcap files (LINKTYPE_ETHERNET) from payloads, so tshark can dissect what our encoders produce:
// a UDP payload becomes Ethernet/IPv4/UDP, a GRE packet becomes Ethernet/IPv4 protocol 47. Checksums are correct
// so any complaint from tshark is about our payload, not the wrapping.
import { writeFileSync } from 'node:fs';
import { encodeIpv4, IP_PROTOCOL_GRE, IP_PROTOCOL_UDP, transportChecksum } from '../../src/wire/gre.js';

const LINKTYPE_ETHERNET = 1;
const ETHERTYPE_IPV4 = 0x0800;
// Locally administered MACs: never clash with real hardware.
const DST_MAC = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const SRC_MAC = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];

export interface UdpFrameOptions {
  readonly payload: Uint8Array;
  readonly src?: string;
  readonly dst?: string;
  readonly srcPort?: number;
  readonly dstPort?: number;
}

function ethernet(ipPacket: Uint8Array): Buffer {
  const frame = Buffer.alloc(14 + ipPacket.length);
  frame.set(DST_MAC, 0);
  frame.set(SRC_MAC, 6);
  frame.writeUInt16BE(ETHERTYPE_IPV4, 12);
  frame.set(ipPacket, 14);
  return frame;
}

/** Ethernet/IPv4/UDP around payload; defaults: 192.0.2.11:2048 -> 192.0.2.1:2048 (an engine to the router). */
export function udpFrame(o: UdpFrameOptions): Buffer {
  const src = o.src ?? '192.0.2.11';
  const dst = o.dst ?? '192.0.2.1';
  const udp = Buffer.alloc(8 + o.payload.length);
  udp.writeUInt16BE(o.srcPort ?? 2048, 0);
  udp.writeUInt16BE(o.dstPort ?? 2048, 2);
  udp.writeUInt16BE(udp.length, 4);
  udp.set(o.payload, 8);
  const sum = transportChecksum(src, dst, IP_PROTOCOL_UDP, udp);
  udp.writeUInt16BE(sum === 0 ? 0xffff : sum, 6); // 0 means "no checksum" in UDP
  return ethernet(encodeIpv4({ src, dst, protocol: IP_PROTOCOL_UDP, payload: udp }));
}

/** Ethernet/IPv4 protocol 47 around a GRE packet; defaults: router 192.0.2.1 -> engine 192.0.2.11. */
export function greFrame(gre: Uint8Array, src = '192.0.2.1', dst = '192.0.2.11'): Buffer {
  return ethernet(encodeIpv4({ src, dst, protocol: IP_PROTOCOL_GRE, payload: gre }));
}

/** The bytes of a pcap file holding frames, one per second from a fixed epoch (deterministic output). */
export function pcapBytes(frames: readonly Uint8Array[]): Buffer {
  const header = Buffer.alloc(24);
  header.writeUInt32LE(0xa1b2c3d4, 0);
  header.writeUInt16LE(2, 4);
  header.writeUInt16LE(4, 6);
  header.writeUInt32LE(65535, 16);
  header.writeUInt32LE(LINKTYPE_ETHERNET, 20);
  const records = frames.map((frame, i) => {
    const rec = Buffer.alloc(16 + frame.length);
    rec.writeUInt32LE(1_700_000_000 + i, 0);
    rec.writeUInt32LE(frame.length, 8);
    rec.writeUInt32LE(frame.length, 12);
    rec.set(frame, 16);
    return rec;
  });
  return Buffer.concat([header, ...records]);
}

export function writePcap(path: string, frames: readonly Uint8Array[]): void {
  writeFileSync(path, pcapBytes(frames));
}
