// GRE forwarding for WCCPv2 (draft §4.12.1): a 4-byte GRE header (flags and version zero, protocol 0x883E), the
// 4-byte WCCP redirect header, then the client's original IPv4 packet. Plus the small IPv4/TCP builders the
// userland data plane and the tests need. Pure functions over bytes; decoders never throw.
import { ipv4Bytes } from '../address.js';
import { decodeError, type Decoded } from './decode-error.js';
import { IP_PROTOCOL_TCP } from './wccp2/constants.js';

export { IP_PROTOCOL_GRE, IP_PROTOCOL_TCP, IP_PROTOCOL_UDP } from './wccp2/constants.js';

export const GRE_PROTOCOL_WCCP = 0x883e;
export const GRE_HEADER_LENGTH = 4;
export const WCCP_REDIRECT_HEADER_LENGTH = 4;

// Bit positions of D and A. The draft draws them as the first two bits of the header (MSB-first numbering, 0x80 and
// 0x40); Wireshark decodes 0x01 and 0x02, and Linux's GRE receive path (gre_demux.c) only skips the redirect header
// when the first nibble is not 4, which an MSB-first A bit (0x40) would break. We follow the deployed layout.
const D_BIT = 0x01;
const A_BIT = 0x02;

export interface WccpRedirectHeader {
  /** The service group the packet was redirected for (0 = web-cache, 51-255 dynamic). */
  readonly serviceId: number;
  /** D: the service is dynamic (true) or well-known (false). */
  readonly dynamic: boolean;
  /** A: the alternate bucket was used to choose the engine. */
  readonly alternate: boolean;
  /** Alternate bucket (hash assignment only; 0 otherwise). */
  readonly altBucket: number;
  /** Primary bucket (hash assignment only; 0 otherwise). */
  readonly priBucket: number;
}

export interface GreRedirect extends WccpRedirectHeader {
  /** The original IPv4 packet, exactly its IPv4 total length. */
  readonly inner: Uint8Array;
}

export class GreEncodeError extends Error {
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(`GRE encode: ${field}: ${detail}`);
    this.name = 'GreEncodeError';
  }
}

function checkByte(field: string, n: number): void {
  if (!Number.isInteger(n) || n < 0 || n > 255) throw new GreEncodeError(field, `${n} is not in 0-255`);
}

/** GRE + WCCP redirect header + inner IPv4 packet: the payload of an IP protocol 47 packet to the engine. */
export function encodeGreRedirect(header: WccpRedirectHeader, innerIpv4Packet: Uint8Array): Buffer {
  const out = Buffer.alloc(GRE_REDIRECT_OVERHEAD + innerIpv4Packet.length);
  writeGreRedirectHeader(header, out, 0);
  out.set(innerIpv4Packet, GRE_REDIRECT_OVERHEAD);
  return out;
}

/** GRE header + WCCP redirect header: the bytes before the inner packet. */
export const GRE_REDIRECT_OVERHEAD = GRE_HEADER_LENGTH + WCCP_REDIRECT_HEADER_LENGTH;

/** Writes the GRE and WCCP redirect headers (GRE_REDIRECT_OVERHEAD bytes) at `offset`: no copy of the inner packet. */
export function writeGreRedirectHeader(header: WccpRedirectHeader, out: Buffer, offset: number): void {
  checkByte('serviceId', header.serviceId);
  checkByte('altBucket', header.altBucket);
  checkByte('priBucket', header.priBucket);
  out.writeUInt16BE(0, offset);
  out.writeUInt16BE(GRE_PROTOCOL_WCCP, offset + 2);
  out.writeUInt8((header.dynamic ? D_BIT : 0) | (header.alternate ? A_BIT : 0), offset + 4);
  out.writeUInt8(header.serviceId, offset + 5);
  out.writeUInt8(header.altBucket, offset + 6);
  out.writeUInt8(header.priBucket, offset + 7);
}

/** Decodes the payload of an IP protocol 47 packet as WCCPv2 GRE redirection; never throws. */
export function decodeGreRedirect(buf: Uint8Array): Decoded<GreRedirect> {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  if (buf.length < GRE_HEADER_LENGTH) {
    return decodeError('GRE', 'redirect', 'GRE header', 0, 'truncated', `a GRE header is 4 bytes; got ${buf.length}`);
  }
  const flagsAndVersion = view.getUint16(0);
  if (flagsAndVersion !== 0) {
    return decodeError(
      'GRE',
      'redirect',
      'GRE header',
      0,
      'unsupported-flags',
      `flags and version are 0x${flagsAndVersion.toString(16).padStart(4, '0')}; WCCP uses a plain GRE header (all zero)`,
    );
  }
  const protocol = view.getUint16(2);
  if (protocol !== GRE_PROTOCOL_WCCP) {
    return decodeError(
      'GRE',
      'redirect',
      'GRE header',
      2,
      'not-wccp',
      `protocol type is 0x${protocol.toString(16).padStart(4, '0')}, not WCCP (0x883e)`,
    );
  }
  if (buf.length < 8) {
    return decodeError(
      'GRE',
      'redirect',
      'WCCP redirect header',
      4,
      'truncated',
      `the WCCP redirect header needs 4 bytes after the GRE header; got ${buf.length - 4}`,
    );
  }
  const flags = view.getUint8(4);
  const header: WccpRedirectHeader = {
    dynamic: (flags & D_BIT) !== 0,
    alternate: (flags & A_BIT) !== 0,
    serviceId: view.getUint8(5),
    altBucket: view.getUint8(6),
    priBucket: view.getUint8(7),
  };
  const ip = decodeIpv4Header(buf.subarray(8));
  if (!ip.ok) {
    return decodeError(
      'GRE',
      'redirect',
      `inner IPv4 ${ip.error.component}`,
      8 + ip.error.offset,
      ip.error.reason,
      ip.error.detail,
    );
  }
  if (ip.value.totalLength !== buf.length - 8) {
    return decodeError(
      'GRE',
      'redirect',
      'inner IPv4 header',
      10,
      'bad-length',
      `inner IPv4 total length is ${ip.value.totalLength} but ${buf.length - 8} bytes follow the redirect header`,
    );
  }
  return { ok: true, value: { ...header, inner: Uint8Array.prototype.slice.call(buf, 8) } };
}

// ---- IPv4 and TCP ----

export interface Ipv4Header {
  readonly src: string;
  readonly dst: string;
  readonly protocol: number;
  readonly ttl: number;
  readonly id: number;
  readonly headerLength: number;
  readonly totalLength: number;
  /** The header checksum verifies (sums to 0xffff). */
  readonly checksumOk: boolean;
}

export function ipv4ToBytes(ip: string): Uint8Array {
  const bytes = ipv4Bytes(ip);
  if (bytes === null) throw new GreEncodeError('address', `"${ip}" is not a dotted-quad IPv4 address`);
  return Uint8Array.from(bytes);
}

export function bytesToIpv4(b: Uint8Array, offset = 0): string {
  return `${b[offset] ?? 0}.${b[offset + 1] ?? 0}.${b[offset + 2] ?? 0}.${b[offset + 3] ?? 0}`;
}

/** RFC 1071 ones' complement sum folded to 16 bits (not yet inverted), continuing from `initial`. */
export function onesComplementSum(bytes: Uint8Array, initial = 0): number {
  const n = bytes.length;
  // The sum does not depend on byte order (RFC 1071 2(B)): sum little-endian words, swap the result's bytes. Aligned
  // data is read 32 bits at a time (the userland data plane checksums every segment it cuts: about 2x faster).
  let sum = 0;
  let i = 0;
  if (LITTLE_ENDIAN && (bytes.byteOffset & 3) === 0 && n >= 4) {
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, n >>> 2);
    for (let k = 0; k < words.length; k++) {
      const w = words[k] ?? 0;
      sum += (w & 0xffff) + (w >>> 16);
    }
    i = words.length * 4;
  }
  for (; i + 1 < n; i += 2) sum += (bytes[i] ?? 0) | ((bytes[i + 1] ?? 0) << 8);
  if (i < n) sum += bytes[i] ?? 0;
  // Exact in a double up to 2^53; fold without 32-bit operators until it fits them.
  while (sum > 0xffffffff) sum = (sum % 0x10000) + Math.floor(sum / 0x10000);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  sum = ((sum & 0xff) << 8) | (sum >>> 8);
  sum += initial;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The Internet checksum of bytes (what goes in the checksum field). */
export function internetChecksum(bytes: Uint8Array, initial = 0): number {
  return ~onesComplementSum(bytes, initial) & 0xffff;
}

/**
 * transportChecksum for a segment inside an IPv4 packet: the pseudo-header's addresses are read from the packet's own
 * header bytes (no string round trip per packet: the userland data plane calls this for every packet it completes).
 */
export function packetTransportChecksum(ip: Uint8Array, protocol: number, segment: Uint8Array): number {
  let sum =
    (((ip[12] ?? 0) << 8) | (ip[13] ?? 0)) +
    (((ip[14] ?? 0) << 8) | (ip[15] ?? 0)) +
    (((ip[16] ?? 0) << 8) | (ip[17] ?? 0)) +
    (((ip[18] ?? 0) << 8) | (ip[19] ?? 0)) +
    protocol +
    segment.length;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return internetChecksum(segment, sum);
}

/** TCP/UDP checksum over the IPv4 pseudo-header and the segment (its checksum field must be zero). */
export function transportChecksum(src: string, dst: string, protocol: number, segment: Uint8Array): number {
  const pseudo = new Uint8Array(12);
  pseudo.set(ipv4ToBytes(src), 0);
  pseudo.set(ipv4ToBytes(dst), 4);
  pseudo[9] = protocol;
  pseudo[10] = segment.length >> 8;
  pseudo[11] = segment.length & 0xff;
  return internetChecksum(segment, onesComplementSum(pseudo));
}

export interface Ipv4Options {
  readonly src: string;
  readonly dst: string;
  readonly protocol: number;
  readonly payload: Uint8Array;
  readonly ttl?: number;
  readonly id?: number;
}

/** A 20-byte IPv4 header (DF set, no options) with a correct checksum, followed by payload. */
export function encodeIpv4(o: Ipv4Options): Buffer {
  const total = 20 + o.payload.length;
  if (total > 0xffff) throw new GreEncodeError('payload', `an IPv4 packet of ${total} bytes exceeds 65535`);
  const out = Buffer.alloc(total);
  out.writeUInt8(0x45, 0);
  out.writeUInt16BE(total, 2);
  out.writeUInt16BE(o.id ?? 0, 4);
  out.writeUInt16BE(0x4000, 6);
  out.writeUInt8(o.ttl ?? 64, 8);
  out.writeUInt8(o.protocol, 9);
  out.set(ipv4ToBytes(o.src), 12);
  out.set(ipv4ToBytes(o.dst), 16);
  out.writeUInt16BE(internetChecksum(out.subarray(0, 20)), 10);
  out.set(o.payload, 20);
  return out;
}

/** The TCP header's flags (RFC 9293 3.1; CWR RFC 3168): the builders here, the userland data plane and the tests. */
export const TCP_FLAGS = { FIN: 0x01, SYN: 0x02, RST: 0x04, PSH: 0x08, ACK: 0x10, CWR: 0x80 } as const;

export interface Ipv4TcpOptions {
  readonly src: string;
  readonly dst: string;
  readonly srcPort: number;
  readonly dstPort: number;
  readonly seq?: number;
  readonly ack?: number;
  /** Bitwise OR of TCP_FLAGS; default SYN (a new connection, what WCCP redirects). */
  readonly flags?: number;
  readonly window?: number;
  readonly payload?: Uint8Array;
  readonly ttl?: number;
  readonly id?: number;
}

/** An IPv4+TCP packet (20-byte headers, no options) with correct IP and TCP checksums. */
export function encodeIpv4Tcp(o: Ipv4TcpOptions): Buffer {
  const payload = o.payload ?? new Uint8Array(0);
  const tcp = Buffer.alloc(20 + payload.length);
  tcp.writeUInt16BE(o.srcPort, 0);
  tcp.writeUInt16BE(o.dstPort, 2);
  tcp.writeUInt32BE((o.seq ?? 0) >>> 0, 4);
  tcp.writeUInt32BE((o.ack ?? 0) >>> 0, 8);
  tcp.writeUInt8(5 << 4, 12);
  tcp.writeUInt8(o.flags ?? TCP_FLAGS.SYN, 13);
  tcp.writeUInt16BE(o.window ?? 65535, 14);
  tcp.set(payload, 20);
  tcp.writeUInt16BE(transportChecksum(o.src, o.dst, IP_PROTOCOL_TCP, tcp), 16);
  return encodeIpv4({ src: o.src, dst: o.dst, protocol: IP_PROTOCOL_TCP, payload: tcp, ttl: o.ttl, id: o.id });
}

/** Decodes and checks an IPv4 header at the start of buf; never throws. */
export function decodeIpv4Header(buf: Uint8Array): Decoded<Ipv4Header> {
  if (buf.length < 20) {
    return decodeError(
      'IPv4',
      'packet',
      'header',
      0,
      'truncated',
      `an IPv4 header is at least 20 bytes; got ${buf.length}`,
    );
  }
  const b0 = buf[0] ?? 0;
  if (b0 >> 4 !== 4) {
    return decodeError('IPv4', 'packet', 'header', 0, 'bad-version', `IP version is ${b0 >> 4}, not 4`);
  }
  const headerLength = (b0 & 0x0f) * 4;
  if (headerLength < 20 || headerLength > buf.length) {
    return decodeError(
      'IPv4',
      'packet',
      'header',
      0,
      'bad-header-length',
      `header length is ${headerLength} bytes; it must be 20-60 and within the ${buf.length} bytes given`,
    );
  }
  const totalLength = ((buf[2] ?? 0) << 8) | (buf[3] ?? 0);
  if (totalLength < headerLength || totalLength > buf.length) {
    return decodeError(
      'IPv4',
      'packet',
      'header',
      2,
      'bad-length',
      `total length is ${totalLength}; it must cover the ${headerLength}-byte header and fit in the ${buf.length} bytes given`,
    );
  }
  return {
    ok: true,
    value: {
      src: bytesToIpv4(buf, 12),
      dst: bytesToIpv4(buf, 16),
      protocol: buf[9] ?? 0,
      ttl: buf[8] ?? 0,
      id: ((buf[4] ?? 0) << 8) | (buf[5] ?? 0),
      headerLength,
      totalLength,
      checksumOk: onesComplementSum(buf.subarray(0, headerLength)) === 0xffff,
    },
  };
}
