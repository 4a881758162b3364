// IPv4 addresses and CIDR blocks as the config writes them: strict dotted quads (no leading zeros, which some tools
// read as octal), and blocks without host bits set.

export interface Cidr {
  /** As written, normalised: `192.0.2.0/24`. */
  readonly text: string;
  /** The network address as an unsigned 32-bit number. */
  readonly network: number;
  readonly prefixLength: number;
}

const OCTET = /^(0|[1-9]\d{0,2})$/;

/** The address as an unsigned 32-bit number, or null if it is not a strict dotted quad. */
export function ipv4ToNumber(text: string): number | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  let n = 0;
  for (const p of parts) {
    if (!OCTET.test(p)) return null;
    const v = Number(p);
    if (v > 255) return null;
    n = n * 256 + v;
  }
  return n;
}

export function isIPv4(text: string): boolean {
  return ipv4ToNumber(text) !== null;
}

export function numberToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

function maskOf(prefixLength: number): number {
  return prefixLength === 0 ? 0 : (0xffffffff << (32 - prefixLength)) >>> 0;
}

/** A Cidr, or a sentence saying what is wrong with the text. A bare address means a /32. */
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
  return { text: `${addr}/${prefixLength}`, network, prefixLength };
}

export function cidrContains(cidr: Cidr, address: string): boolean {
  const n = ipv4ToNumber(address);
  return n !== null && ((n & maskOf(cidr.prefixLength)) >>> 0) === cidr.network;
}
