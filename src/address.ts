// Addresses, one home for every layer: the API, config, state, CLI, codecs and buckets parse them here, so they all
// accept the same forms. IPv4 only as a strict dotted quad (node:net's isIPv4): four decimal octets 0-255, no leading
// zeros, which some parsers read as octal (`010.0.0.1` = 8.0.0.1). Pure; imports nothing of ours. IPv6 as node:net's
// isIPv6 reads it, without a zone (`fe80::1%eth0` names a link, not a destination): the data plane hashes IPv6
// destinations (docs/buckets.md, "IPv6 destinations"); wccpd's protocol paths stay IPv4 (WCCPv2 is).
import { BlockList, isIP, isIPv4, isIPv6 } from 'node:net';

/** 4 or 6 for a well-formed address, null otherwise. */
export function ipFamily(text: string): 4 | 6 | null {
  const f = isIP(text);
  return f === 4 || f === 6 ? f : null;
}

/** True for a strict dotted-quad IPv4 address. */
export function isIpv4(text: unknown): text is string {
  return typeof text === 'string' && isIPv4(text);
}

/** The four octets of a strict dotted quad, or null. */
export function ipv4Bytes(text: string): [number, number, number, number] | null {
  if (!isIPv4(text)) return null;
  const [a = 0, b = 0, c = 0, d = 0] = text.split('.').map(Number);
  return [a, b, c, d];
}

/** The address as an unsigned 32-bit number in network order (1.2.3.4 -> 0x01020304), or null. */
export function ipv4ToNumber(text: string): number | null {
  const b = ipv4Bytes(text);
  return b === null ? null : ((b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]) >>> 0;
}

/** True for an IPv6 address without a zone. */
export function isIpv6(text: unknown): text is string {
  return typeof text === 'string' && isIPv6(text) && !text.includes('%');
}

/** An IPv4 or an IPv6 address (without a zone): what `wccpctl which` and the API's which take. */
export function isIpAddress(text: unknown): text is string {
  return isIpv4(text) || isIpv6(text);
}

/**
 * The 128 bits of an IPv6 address as four unsigned 32-bit words, most significant first (2001:db8::1 ->
 * [0x20010db8, 0, 0, 1]), or null. A dotted-quad tail (`::ffff:192.0.2.1`) is its last two groups.
 */
export function ipv6Words(text: string): [number, number, number, number] | null {
  if (!isIpv6(text)) return null;
  let s = text;
  const tail = s.slice(s.lastIndexOf(':') + 1);
  if (tail.includes('.')) {
    const n = ipv4ToNumber(tail);
    if (n === null) return null;
    s = `${s.slice(0, s.length - tail.length)}${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
  }
  const [head = '', rest, ...more] = s.split('::');
  if (more.length > 0) return null;
  const left = head === '' ? [] : head.split(':');
  const right = rest === undefined || rest === '' ? [] : rest.split(':');
  const fill = rest === undefined ? 0 : 8 - left.length - right.length;
  const groups = [...left, ...Array<string>(Math.max(fill, 0)).fill('0'), ...right].map((g) => parseInt(g, 16));
  if (groups.length !== 8 || groups.some((g) => !(g >= 0 && g <= 0xffff))) return null;
  const word = (i: number) => ((groups[i]! << 16) | groups[i + 1]!) >>> 0;
  return [word(0), word(2), word(4), word(6)];
}

export function numberToIpv4(n: number): string {
  const v = n >>> 0;
  return `${v >>> 24}.${(v >>> 16) & 255}.${(v >>> 8) & 255}.${v & 255}`;
}

export interface Cidr {
  /** As written, normalised: `192.0.2.0/24` (a bare address gets its full prefix). */
  readonly text: string;
  readonly family: 4;
  /** The network address as an unsigned 32-bit number. */
  readonly network: number;
  readonly prefixLength: number;
}

function maskOf(prefixLength: number): number {
  return prefixLength === 0 ? 0 : (0xffffffff << (32 - prefixLength)) >>> 0;
}

/** A Cidr, or a sentence saying what is wrong with the text. A bare address means a /32; host bits are refused. */
export function parseCidr(text: string): Cidr | string {
  const [addr = '', len, ...rest] = text.split('/');
  if (rest.length > 0) return `"${text}" is not a CIDR block (expected a.b.c.d/n)`;
  const n = ipv4ToNumber(addr);
  if (n === null) return `"${text}" is not a CIDR block: "${addr}" is not an IPv4 address`;
  let prefixLength = 32;
  if (len !== undefined) {
    if (!/^\d{1,2}$/.test(len) || Number(len) > 32) {
      return `"${text}" is not a CIDR block: the prefix length must be 0-32`;
    }
    prefixLength = Number(len);
  }
  const network = (n & maskOf(prefixLength)) >>> 0;
  if (network !== n) {
    return `"${text}" has host bits set; did you mean ${numberToIpv4(network)}/${prefixLength}?`;
  }
  return { text: `${addr}/${prefixLength}`, family: 4, network, prefixLength };
}

export function cidrContains(cidr: Cidr, address: string): boolean {
  const n = ipv4ToNumber(address);
  return n !== null && (n & maskOf(cidr.prefixLength)) >>> 0 === cidr.network;
}

/** A set of CIDR blocks, matched by node:net's BlockList. */
export interface AddressSet {
  has(address: string): boolean;
}

export function addressSet(cidrs: readonly Cidr[]): AddressSet {
  const list = new BlockList();
  for (const c of cidrs) list.addSubnet(numberToIpv4(c.network), c.prefixLength, 'ipv4');
  return { has: (address) => isIPv4(address) && list.check(address, 'ipv4') };
}
