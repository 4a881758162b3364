// Which engine addresses a service accepts (config engines.allow: IPv4 addresses or CIDRs).
import { addressSet, parseCidr } from '../address.js';

export interface Allowlist {
  allows(address: string): boolean;
}

/** An empty or absent list allows every address. Throws on a block the config would have refused. */
export function allowlist(cidrs: readonly string[] | undefined): Allowlist {
  if (!cidrs || cidrs.length === 0) return { allows: () => true };
  const set = addressSet(
    cidrs.map((c) => {
      const block = parseCidr(c);
      if (typeof block === 'string') throw new Error(`engines.allow: ${block}`);
      return block;
    }),
  );
  return { allows: (address) => set.has(address) };
}
