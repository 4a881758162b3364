// Which other tables need conntrack on every packet: `dataplane.conntrack: services` takes unrelated forwarded
// traffic out of conntrack, which breaks NAT and state matches of forwarded traffic. Read from `nft list ruleset`
// (iptables-nft rules appear there too, as `xt match "conntrack"` or `ct state`); our own tables are skipped.
import { CLOSED_TABLE, NFT_TABLE } from './names.js';

/** What in a table's text reads or changes conntrack state. */
const USES_CONNTRACK =
  /\bct [a-z]|\b(?:masquerade|snat|dnat|redirect to|tproxy to)\b|type nat hook|xt match "(?:conntrack|state|connmark)"|xt target "(?:MASQUERADE|SNAT|DNAT|CONNMARK)"/;

/** `family name` of every table (not ours) whose rules depend on conntrack seeing all its packets. */
export function tablesUsingConntrack(ruleset: string): string[] {
  const found: string[] = [];
  // A table's text runs from its `table` line to the next one.
  const parts = ruleset.split(/^table /m).slice(1);
  for (const part of parts) {
    const head = /^(\S+) (\S+)/.exec(part);
    if (head === null) continue;
    const [, family, name] = head;
    if (name === NFT_TABLE || name === CLOSED_TABLE) continue;
    if (USES_CONNTRACK.test(part)) found.push(`${family} ${name}`);
  }
  return found;
}
