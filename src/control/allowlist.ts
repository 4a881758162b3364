// Which engine addresses a service accepts (config engines.allow: IPv4 addresses or CIDRs).

const QUAD = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** Dotted quad -> uint32, or null when it is not one. */
export function ipv4ToNumber(address: string): number | null {
  const m = QUAD.exec(address);
  if (!m) return null;
  const o = m.slice(1).map(Number);
  if (o.some((x) => x > 255)) return null;
  return (((o[0] ?? 0) << 24) | ((o[1] ?? 0) << 16) | ((o[2] ?? 0) << 8) | (o[3] ?? 0)) >>> 0;
}

export interface Allowlist {
  allows(address: string): boolean;
}

/** An empty or absent list allows every address. */
export function allowlist(cidrs: readonly string[] | undefined): Allowlist {
  if (!cidrs || cidrs.length === 0) return { allows: () => true };
  const nets = cidrs.map((c) => {
    const [addr, len] = c.split('/');
    const bits = len === undefined ? 32 : Number(len);
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    const net = ipv4ToNumber(addr ?? '');
    if (net === null || !Number.isInteger(bits) || bits < 0 || bits > 32) throw new Error(`engines.allow: "${c}" is not an IPv4 address or CIDR`);
    return { net: (net & mask) >>> 0, mask };
  });
  return {
    allows(address: string): boolean {
      const ip = ipv4ToNumber(address);
      if (ip === null) return false;
      return nets.some((n) => ((ip & n.mask) >>> 0) === n.net);
    },
  };
}
