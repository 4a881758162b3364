// A very small subset of the BPF filter language, enough for wccpd's captures, evaluated on Ethernet frames.
// Supported primitives: `ip`, `tcp`, `udp`, `icmp`, `ip proto N`, `[src|dst] port N`, `[src|dst] host A.B.C.D`;
// combined with `and`, `or`, `not` (also `&&`, `||`, `!`) and parentheses. Ports match TCP and UDP only. Anything else
// is a ShimFilterError naming the word it could not use: an unsupported filter must never silently match everything.

export class ShimFilterError extends Error {
  constructor(
    readonly filter: string,
    readonly token: string,
    why: string,
  ) {
    super(
      `pcap shim: cannot use filter "${filter}" at "${token}": ${why}. ` +
        'The shim supports ip, tcp, udp, icmp, ip proto N, [src|dst] port N, [src|dst] host A.B.C.D, and/or/not, ( ).',
    );
    this.name = 'ShimFilterError';
  }
}

export type FramePredicate = (frame: Buffer) => boolean;

interface Ipv4View {
  readonly protocol: number;
  readonly src: string;
  readonly dst: string;
  /** Transport ports, when the datagram is the first fragment of TCP or UDP. */
  readonly sport: number | null;
  readonly dport: number | null;
}

function ipv4Of(frame: Buffer): Ipv4View | null {
  if (frame.length < 34 || frame.readUInt16BE(12) !== 0x0800) return null;
  const ip = 14;
  const first = frame[ip] ?? 0;
  if (first >> 4 !== 4) return null;
  const ihl = (first & 0x0f) * 4;
  const protocol = frame[ip + 9] ?? 0;
  const fragOffset = frame.readUInt16BE(ip + 6) & 0x1fff;
  const l4 = ip + ihl;
  const hasPorts = (protocol === 6 || protocol === 17) && fragOffset === 0 && frame.length >= l4 + 4;
  return {
    protocol,
    src: `${frame[ip + 12]}.${frame[ip + 13]}.${frame[ip + 14]}.${frame[ip + 15]}`,
    dst: `${frame[ip + 16]}.${frame[ip + 17]}.${frame[ip + 18]}.${frame[ip + 19]}`,
    sport: hasPorts ? frame.readUInt16BE(l4) : null,
    dport: hasPorts ? frame.readUInt16BE(l4 + 2) : null,
  };
}

type Node = (ip: Ipv4View | null) => boolean;

const IPV4 = /^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/;

/** Compiles a filter string; '' matches every frame (as libpcap does). Throws ShimFilterError. */
export function compileFilter(filter: string): FramePredicate {
  const tokens = filter
    .replace(/([()])/g, ' $1 ')
    .replace(/&&/g, ' and ')
    .replace(/\|\|/g, ' or ')
    .replace(/!/g, ' not ')
    .trim()
    .split(/\s+/)
    .filter((t) => t !== '');
  if (tokens.length === 0) return () => true;
  let pos = 0;
  const peek = (): string | undefined => tokens[pos];
  const fail = (why: string): never => {
    throw new ShimFilterError(filter, peek() ?? '<end>', why);
  };
  const next = (): string => {
    const t = tokens[pos];
    if (t === undefined) return fail('the filter ends too early');
    pos++;
    return t;
  };
  const number = (max: number): number => {
    const t = peek();
    if (t === undefined || !/^\d+$/.test(t) || Number(t) > max) return fail(`expected a number 0-${max}`);
    pos++;
    return Number(t);
  };

  const primary = (): Node => {
    const t = next();
    switch (t) {
      case '(': {
        const inner = or();
        if (next() !== ')') {
          pos--;
          fail('expected ")"');
        }
        return inner;
      }
      case 'not': {
        const inner = primary();
        return (ip) => !inner(ip);
      }
      case 'ip':
        if (peek() === 'proto') {
          pos++;
          const p = number(255);
          return (ip) => ip !== null && ip.protocol === p;
        }
        return (ip) => ip !== null;
      case 'tcp':
        return (ip) => ip !== null && ip.protocol === 6;
      case 'udp':
        return (ip) => ip !== null && ip.protocol === 17;
      case 'icmp':
        return (ip) => ip !== null && ip.protocol === 1;
      case 'src':
      case 'dst': {
        const kind = next();
        if (kind === 'port') {
          const p = number(65535);
          return t === 'src' ? (ip) => ip !== null && ip.sport === p : (ip) => ip !== null && ip.dport === p;
        }
        if (kind === 'host') return host(t);
        pos--;
        return fail('expected "port" or "host" after src/dst');
      }
      case 'port': {
        const p = number(65535);
        return (ip) => ip !== null && (ip.sport === p || ip.dport === p);
      }
      case 'host':
        return host('either');
      default:
        pos--;
        return fail('not in the supported subset');
    }
  };
  const host = (dir: 'src' | 'dst' | 'either'): Node => {
    const a = next();
    if (!IPV4.test(a)) {
      pos--;
      fail('expected an IPv4 address');
    }
    if (dir === 'src') return (ip) => ip !== null && ip.src === a;
    if (dir === 'dst') return (ip) => ip !== null && ip.dst === a;
    return (ip) => ip !== null && (ip.src === a || ip.dst === a);
  };
  const and = (): Node => {
    let left = primary();
    while (peek() === 'and') {
      pos++;
      const l = left;
      const r = primary();
      left = (ip) => l(ip) && r(ip);
    }
    return left;
  };
  const or = (): Node => {
    let left = and();
    while (peek() === 'or') {
      pos++;
      const l = left;
      const r = and();
      left = (ip) => l(ip) || r(ip);
    }
    return left;
  };

  const root = or();
  if (pos !== tokens.length) fail('unexpected word');
  return (frame) => root(ipv4Of(frame));
}
