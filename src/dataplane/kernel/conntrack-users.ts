// Which other tables need conntrack on every packet: `dataplane.conntrack: services` takes unrelated forwarded
// traffic out of conntrack, which breaks NAT and state matches of forwarded traffic. Read from `nft list ruleset`
// (iptables-nft rules appear there too, as `xt match "conntrack"` or `ct state`); our own tables are skipped. The nft
// backend says so at start (warnConntrackUsers).
import type { Log } from '../../log.js';
import type { Exec } from './exec.js';
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

/** Says, once at start, that unrelated traffic skips conntrack, and which other tables that would break. */
export async function warnConntrackUsers(exec: Exec, log: Log | undefined): Promise<void> {
  let users: string[] = [];
  try {
    users = tablesUsingConntrack(await exec('nft', ['-t', 'list', 'ruleset']));
  } catch (e) {
    log?.warn({ err: (e as Error).message }, 'dataplane.conntrack services: cannot list the ruleset to check it');
  }
  log?.info(
    { conntrack: 'services' },
    "dataplane.conntrack services: packets no service can claim skip conntrack (not the gateway's own)",
  );
  if (users.length > 0)
    log?.warn(
      { tables: users },
      `dataplane.conntrack services: table${users.length > 1 ? 's' : ''} ${users.join(', ')} use${users.length > 1 ? '' : 's'} ` +
        'conntrack (NAT or state matches); their forwarded packets that no service can claim are now untracked, so ' +
        'those rules no longer see them: use `dataplane.conntrack: all` on this gateway (docs/dataplane.md)',
    );
}
