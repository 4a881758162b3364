// The kernel rule the userland backend owns, so the kernel does not also forward what userland took over:
// table `inet wccpd_userland`. Per service with at least one bucket on a usable engine, new traffic of the service
// arriving on its client interfaces (not sourced by an engine) is dropped in the forward hook: userland captured it and
// sends it on (GRE / L2 to the engine, or re-sent with mark 0xfff80000 when its bucket has no engine). Connections
// that were already established before the rule are left alone. Conntrack entries of flows userland handles carry
// wccpd's mark field (bits 19-31, names.ts) set to USERLAND_VALUE (set on the re-sent packets and on the first reply
// towards the client), so their later packets are dropped too instead of leaking through as "established". Only that
// field of the conntrack mark is written or read: other tools' bits survive. With no engine: no rule (open) or a
// reject (closed). Services come in priority order (overlapping services, docs/userland.md): a fail-open service
// without an engine then accepts its new connections ahead of a later service's rules.
import type { ServiceRedirect } from '../redirector.js';
import type { Exec } from '../kernel/exec.js';
import { MARK_MASK, USERLAND_VALUE, fieldMark, hex, setField } from '../kernel/names.js';
import { closedTableRuleset } from '../kernel/rules.js';

export const USERLAND_TABLE = 'wccpd_userland';
/** Packet mark of what userland re-sends itself (its own sockets), and the ct mark field of the flows it owns. */
export const USERLAND_MARK = fieldMark(USERLAND_VALUE);
const NOT_OWNED = `ct mark and ${hex(MARK_MASK)} != ${hex(USERLAND_MARK)}`;

export type GuardMode = 'redirect' | 'refuse' | 'none';

export interface GuardedService {
  readonly service: ServiceRedirect;
  readonly mode: GuardMode;
}

export interface KernelGuard {
  /** Replaces every rule of the table in one transaction. */
  install(services: readonly GuardedService[]): Promise<void>;
  /** Deletes the table (no error when it is absent). */
  remove(): Promise<void>;
  /**
   * What of the last install someone else removed: null when it is all there (or nothing is installed), else what
   * went (`deleted`, or the chains short of rules). Rules someone added are not counted against it.
   */
  check?(): Promise<string | null>;
}

const l4 = (protocol: number): string =>
  protocol === 6 ? 'tcp' : protocol === 17 ? 'udp' : `meta l4proto ${protocol}`;

function clientSide(s: ServiceRedirect, inbound: boolean): string {
  const ifaces = `{ ${s.clientInterfaces.map((i) => JSON.stringify(i)).join(', ')} }`;
  const parts = [inbound ? `iifname ${ifaces}` : `oifname ${ifaces}`, 'meta nfproto ipv4'];
  if (inbound && s.engines.length > 0) parts.push(`ip saddr != { ${s.engines.join(', ')} }`);
  if (!inbound && s.engines.length > 0) parts.push(`ip daddr != { ${s.engines.join(', ')} }`);
  parts.push(`meta l4proto ${s.protocol}`);
  if (s.ports.length > 0 && (s.protocol === 6 || s.protocol === 17)) {
    // Client -> server packets carry the service port as destination (source when portsAreSource); replies mirror it.
    const dir = inbound !== s.portsAreSource ? 'dport' : 'sport';
    parts.push(`${l4(s.protocol) === 'tcp' ? 'tcp' : 'udp'} ${dir} { ${s.ports.join(', ')} }`);
  }
  return parts.join(' ');
}

/** The whole table as one nft transaction (idempotent over leftovers: create, delete, re-create). */
export function guardRuleset(services: readonly GuardedService[]): string {
  const forward: string[] = [];
  for (const { service: s, mode } of services) {
    if (s.clientInterfaces.length === 0) continue;
    const comment = `comment "wccpd userland service ${s.serviceId}"`;
    if (mode === 'none') {
      // No engine, fail open: its connections go direct, and a later (lower-priority) service's drop or reject,
      // written after this, must not take them (overlapping services: the first in priority order claims them).
      if (services.length > 1) forward.push(`    ${clientSide(s, true)} ${NOT_OWNED} accept ${comment}`);
      continue;
    }
    if (mode === 'refuse') {
      const how = s.protocol === 6 ? 'reject with tcp reset' : 'reject';
      forward.push(`    ${clientSide(s, true)} ${how} ${comment}`);
      continue;
    }
    forward.push(`    ${clientSide(s, false)} ct state new ${setField('ct mark', USERLAND_VALUE)} ${comment}`);
    forward.push(`    ${clientSide(s, true)} ct state established,related ${NOT_OWNED} accept ${comment}`);
    forward.push(`    ${clientSide(s, true)} drop ${comment}`);
  }
  return [
    `table inet ${USERLAND_TABLE} {}`,
    `delete table inet ${USERLAND_TABLE}`,
    `table inet ${USERLAND_TABLE} {`,
    '  chain forward {',
    '    type filter hook forward priority filter - 10; policy accept;',
    ...forward,
    '  }',
    '  chain output {',
    '    type filter hook output priority mangle; policy accept;',
    `    meta mark and ${hex(MARK_MASK)} == ${hex(USERLAND_MARK)} ${setField('ct mark', USERLAND_VALUE)}`,
    '  }',
    '}',
    // Fail closed while wccpd is down, as with the nft backend (docs/dataplane.md): table inet wccpd_closed refuses a
    // fail-closed service's new connections whenever this table is gone (a crash, a stop, wccpd-cleanup), until
    // wccpd is back or `wccpd-cleanup --all`. While this table is there, its drop or reject comes first.
    ...(services.length > 0
      ? [closedTableRuleset(services.filter((g) => g.service.failMode === 'closed').map((g) => g.service)).trimEnd()]
      : []),
    '',
  ].join('\n');
}

/** The rules per chain of the guard table that `text` (guardRuleset) writes. */
export function guardRuleCounts(text: string): Map<string, number> {
  const counts = new Map<string, number>();
  let chain: string | null = null;
  for (const line of text.split('\n')) {
    const t = line.trim();
    const open = /^chain (\S+) \{$/.exec(t);
    if (open !== null) {
      chain = open[1]!;
      counts.set(chain, 0);
    } else if (chain !== null && t === '}') chain = null;
    else if (chain !== null && t !== '' && !t.startsWith('type ')) counts.set(chain, (counts.get(chain) ?? 0) + 1);
  }
  return counts;
}

export function nftGuard(exec: Exec): KernelGuard {
  let expected: Map<string, number> | null = null;
  return {
    async install(services) {
      const text = guardRuleset(services);
      await exec('nft', ['-f', '-'], text);
      expected = guardRuleCounts(text);
    },
    async remove() {
      expected = null;
      await exec('nft', ['-f', '-'], `table inet ${USERLAND_TABLE} {}\ndelete table inet ${USERLAND_TABLE}\n`);
    },
    async check() {
      const want = expected;
      if (want === null) return null;
      let out: string;
      try {
        out = await exec('nft', ['-j', 'list', 'table', 'inet', USERLAND_TABLE]);
      } catch (e) {
        if (/No such file or directory/.test((e as Error).message)) return 'deleted';
        throw e;
      }
      const have = new Map<string, number>();
      for (const o of (JSON.parse(out) as { nftables?: { chain?: { name?: string }; rule?: { chain?: string } }[] })
        .nftables ?? []) {
        if (o.chain?.name !== undefined) have.set(o.chain.name, have.get(o.chain.name) ?? 0);
        if (o.rule?.chain !== undefined) have.set(o.rule.chain, (have.get(o.rule.chain) ?? 0) + 1);
      }
      const short = [...want]
        .filter(([chain, n]) => (have.get(chain) ?? -1) < n)
        .map(([chain, n]) =>
          have.has(chain) ? `chain ${chain} has ${have.get(chain)} of its ${n} rules` : `chain ${chain} is gone`,
        );
      return short.length > 0 ? `emptied (${short.join(', ')})` : null;
    },
  };
}
