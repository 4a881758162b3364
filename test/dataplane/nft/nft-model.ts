// A model of the kernel running the nft backend's ruleset text over one packet: the chains, maps and sets the text
// builds (add/flush/delete, in order), evaluated rule by rule from the prerouting hook, for the statements and
// matches ruleset.ts writes. A rule the model does not know throws, so a new kind of rule cannot pass unnoticed.
// It counts what a packet pays (rules evaluated, map and set lookups, base chains) for docs/dataplane.md's
// "Rules per packet", and what it leaves (verdict, packet mark, ct mark, counters).

export interface Packet {
  readonly iif: string;
  readonly saddr: string;
  readonly daddr: string;
  readonly proto: 'tcp' | 'udp' | 'icmp';
  readonly sport: number;
  readonly dport: number;
  /** The conntrack state as nft's `ct state` sees it. */
  readonly ctState: 'new' | 'established';
  /** TCP flags: a SYN-ACK. */
  readonly synAck?: boolean;
  /** The address is the gateway's own (`fib daddr type local`). */
  readonly local?: boolean;
  readonly ctMark?: number;
  readonly mark?: number;
}

export interface Outcome {
  readonly verdict: 'accept' | 'reject tcp reset' | 'reject';
  readonly ctMark: number;
  readonly mark: number;
  /** Rules evaluated, a jump's target chain's rules included. */
  readonly rules: number;
  /** Map and set lookups (a named map or set, or an anonymous set of more than one element). */
  readonly lookups: number;
  /** The chains entered, in order. */
  readonly chains: readonly string[];
  /** Named counters and counter-set elements hit (`name` or `set[key]`). */
  readonly counted: readonly string[];
}

type Verdict = { kind: 'accept' | 'return' | 'reject tcp reset' | 'reject' } | { kind: 'jump' | 'goto'; chain: string };

interface State {
  ctMark: number;
  mark: number;
  priority: number;
  lookups: number;
  counted: string[];
}

const TABLE = 'inet wccpd';

const ipBytes = (a: string): number[] => a.split('.').map(Number);
const ipNumber = (a: string): number => ipBytes(a).reduce((n, b) => n * 256 + b, 0);

function portsOf(list: string): number[] {
  return list
    .replace(/[{}]/g, '')
    .split(',')
    .map((s) => Number(s.trim()));
}

const namesOf = (list: string): string[] =>
  list
    .replace(/[{}]/g, '')
    .split(',')
    .map((s) => s.trim().replace(/^"|"$/g, ''));

export class NftModel {
  private readonly chains = new Map<string, string[]>();
  private readonly maps = new Map<string, Map<string, string>>();

  constructor(text: string) {
    this.load(text);
  }

  /** Applies more transaction text (a later apply()). */
  load(text: string): void {
    for (const line of text.split('\n')) this.line(line);
  }

  chain(name: string): readonly string[] {
    return this.chains.get(name) ?? [];
  }

  private line(line: string): void {
    if (line === '' || line.includes('wccpd_closed') || /^(add|delete) table /.test(line)) return;
    let m: RegExpExecArray | null;
    if ((m = new RegExp(`^add chain ${TABLE} (\\S+)`).exec(line)) !== null) {
      if (!this.chains.has(m[1] ?? '')) this.chains.set(m[1] ?? '', []);
    } else if ((m = new RegExp(`^flush chain ${TABLE} (\\S+)$`).exec(line)) !== null) {
      this.chains.set(m[1] ?? '', []);
    } else if ((m = new RegExp(`^delete chain ${TABLE} (\\S+)$`).exec(line)) !== null) {
      this.chains.delete(m[1] ?? '');
    } else if ((m = new RegExp(`^add rule ${TABLE} (\\S+) (.*)$`).exec(line)) !== null) {
      const rules = this.chains.get(m[1] ?? '');
      if (rules === undefined) throw new Error(`rule in a chain that does not exist: ${line}`);
      rules.push(m[2] ?? '');
    } else if ((m = new RegExp(`^add (map|set) ${TABLE} (\\S+)`).exec(line)) !== null) {
      if (!this.maps.has(m[2] ?? '')) this.maps.set(m[2] ?? '', new Map());
    } else if ((m = new RegExp(`^flush (map|set) ${TABLE} (\\S+)$`).exec(line)) !== null) {
      this.maps.set(m[2] ?? '', new Map());
    } else if ((m = new RegExp(`^delete (map|set) ${TABLE} (\\S+)$`).exec(line)) !== null) {
      this.maps.delete(m[2] ?? '');
    } else if ((m = new RegExp(`^(add|delete) element ${TABLE} (\\S+) \\{ (.*) \\}$`).exec(line)) !== null) {
      const map = this.maps.get(m[2] ?? '');
      if (map === undefined) throw new Error(`element of a map that does not exist: ${line}`);
      for (const el of (m[3] ?? '').split(', ')) {
        const [k, v] = el.split(' : ');
        if (m[1] === 'add') map.set(numKey(k ?? ''), v ?? '');
        else map.delete(numKey(k ?? ''));
      }
    } else if (/^(add|delete) counter /.test(line)) {
      // Named counters: the model records hits by name.
    } else {
      throw new Error(`a line the model does not know: ${line}`);
    }
  }

  /** Runs one packet through the prerouting hook. */
  run(p: Packet): Outcome {
    const st: State = { ctMark: p.ctMark ?? 0, mark: p.mark ?? 0, priority: 0, lookups: 0, counted: [] };
    const chains: string[] = [];
    let rules = 0;
    const stack: { chain: string; at: number }[] = [];
    let chain = 'prerouting';
    let at = 0;
    chains.push(chain);
    for (let steps = 0; steps < 10_000; steps++) {
      const list = this.chains.get(chain);
      if (list === undefined) throw new Error(`no chain ${chain}`);
      if (at >= list.length) {
        const back = stack.pop();
        if (back === undefined) return this.outcome('accept', st, rules, chains);
        chain = back.chain;
        at = back.at;
        continue;
      }
      const rule = list[at] ?? '';
      at += 1;
      rules += 1;
      const v = this.rule(rule, p, st);
      if (v === null) continue;
      if (v.kind === 'accept' || v.kind === 'reject' || v.kind === 'reject tcp reset') {
        return this.outcome(v.kind, st, rules, chains);
      }
      if (v.kind === 'return') {
        const back = stack.pop();
        if (back === undefined) return this.outcome('accept', st, rules, chains);
        chain = back.chain;
        at = back.at;
        continue;
      }
      if (!('chain' in v)) throw new Error(`a verdict the model does not know: ${v.kind}`);
      if (v.kind === 'jump') stack.push({ chain, at });
      chain = v.chain;
      at = 0;
      chains.push(chain);
    }
    throw new Error('the model ran 10,000 steps: a loop');
  }

  private outcome(verdict: Outcome['verdict'], st: State, rules: number, chains: string[]): Outcome {
    return { verdict, ctMark: st.ctMark, mark: st.mark, rules, lookups: st.lookups, chains, counted: st.counted };
  }

  private lookup(name: string, key: number | string): string | undefined {
    const map = this.maps.get(name);
    if (map === undefined) throw new Error(`no map or set ${name}`);
    return map.get(String(key));
  }

  /** Evaluates one rule: null when it does not match (or matches without a verdict). */
  private rule(rule: string, p: Packet, st: State): Verdict | null {
    let rest = rule.trim();
    const take = (re: RegExp): RegExpExecArray | null => {
      const m = re.exec(rest);
      if (m === null || m.index !== 0) return null;
      rest = rest.slice(m[0].length).trimStart();
      return m;
    };
    const field = (mark: number): number => (mark & 0xfff80000) >>> 0;
    while (rest !== '') {
      let m: RegExpExecArray | null;
      if ((m = take(/^iifname (\{[^}]*\}|"[^"]*")/)) !== null) {
        const names = namesOf(m[1] ?? '');
        if (names.length > 1) st.lookups += 1;
        if (!names.includes(p.iif)) return null;
      } else if (take(/^meta nfproto ipv4/) !== null) {
        // Every packet of the model is IPv4.
      } else if ((m = take(/^meta l4proto (\w+)/)) !== null) {
        const want = m[1] === '6' ? 'tcp' : m[1] === '17' ? 'udp' : m[1];
        if (want !== p.proto) return null;
      } else if ((m = take(/^(tcp|udp|th) (dport|sport) (\{[^}]*\}|\d+)/)) !== null) {
        if (m[1] !== 'th' && m[1] !== p.proto) return null;
        const ports = portsOf(m[3] ?? '');
        if (ports.length > 1) st.lookups += 1;
        if (!ports.includes(m[2] === 'dport' ? p.dport : p.sport)) return null;
      } else if (take(/^ct state new/) !== null) {
        if (p.ctState !== 'new') return null;
      } else if (take(/^tcp flags & \(syn \| ack\) == syn \| ack/) !== null) {
        if (p.proto !== 'tcp' || p.synAck !== true) return null;
      } else if ((m = take(/^ip saddr != @(\S+)/)) !== null) {
        st.lookups += 1;
        if (this.lookup(m[1] ?? '', numKey(p.saddr)) !== undefined) return null;
      } else if ((m = take(/^ct mark and 0xfff80000 == (0x[0-9a-f]+|\d+)/)) !== null) {
        if (field(st.ctMark) !== Number(m[1])) return null;
      } else if ((m = take(/^ct mark and 0xfff80000 (0x[0-9a-f]+)-(0x[0-9a-f]+)/)) !== null) {
        const f = field(st.ctMark);
        if (f < Number(m[1]) || f > Number(m[2])) return null;
      } else if ((m = take(/^ct mark and 0xfff80000 vmap @(\S+)/)) !== null) {
        st.lookups += 1;
        return this.verdictOf(this.lookup(m[1] ?? '', numKey(hex(field(st.ctMark)))));
      } else if ((m = take(/^meta priority vmap @(\S+)/)) !== null) {
        st.lookups += 1;
        return this.verdictOf(this.lookup(m[1] ?? '', String(st.priority)));
      } else if ((m = take(/^ip daddr & (\S+) vmap @(\S+)/)) !== null) {
        st.lookups += 1;
        const masked = (ipNumber(p.daddr) & ipNumber(m[1] ?? '')) >>> 0;
        return this.verdictOf(this.lookup(m[2] ?? '', numKey(ipText(masked))));
      } else if ((m = take(/^meta priority @(\S+)/)) !== null) {
        st.lookups += 1;
        if (this.lookup(m[1] ?? '', String(st.priority)) === undefined) return null;
        st.counted.push(`${m[1]}[${st.priority}]`);
      } else if ((m = take(/^meta priority set @nh,(\d+),8 map @byte/)) !== null) {
        st.lookups += 1;
        st.priority = Number(this.lookup('byte', String(this.headerByte(p, Number(m[1])))));
      } else if (
        (m = take(/^meta priority set meta priority \. \(@nh,(\d+),8 & (0x[0-9a-f]+)\) map @nibxor/)) !== null
      ) {
        st.lookups += 1;
        const y = this.headerByte(p, Number(m[1])) & Number(m[2]);
        const v = this.lookup('nibxor', `${st.priority} . ${y}`);
        if (v === undefined) throw new Error(`nibxor miss: ${st.priority} . ${y}`);
        st.priority = Number(v);
      } else if (take(/^fib daddr type local/) !== null) {
        if (p.local !== true) return null;
      } else if ((m = take(/^counter name (\S+)/)) !== null) {
        st.counted.push(m[1] ?? '');
      } else if ((m = take(/^(ct|meta) mark set (ct|meta) mark and 0x7ffff or (0x[0-9a-f]+)/)) !== null) {
        if (m[1] !== m[2]) throw new Error(`a mark copied between registers: ${rule}`);
        if (m[1] === 'ct') st.ctMark = ((st.ctMark & 0x7ffff) | Number(m[3])) >>> 0;
        else st.mark = ((st.mark & 0x7ffff) | Number(m[3])) >>> 0;
      } else if (take(/^reject with tcp reset/) !== null) {
        return { kind: 'reject tcp reset' };
      } else if (take(/^reject$/) !== null) {
        return { kind: 'reject' };
      } else if ((m = take(/^(accept|return)$/)) !== null) {
        return { kind: m[1] as 'accept' | 'return' };
      } else if ((m = take(/^(jump|goto) (\S+)$/)) !== null) {
        return { kind: m[1] as 'jump' | 'goto', chain: m[2] ?? '' };
      } else {
        throw new Error(`the model does not know "${rest}" in: ${rule}`);
      }
    }
    return null;
  }

  private verdictOf(v: string | undefined): Verdict | null {
    if (v === undefined) return null;
    const m = /^(jump|goto) (\S+)$/.exec(v);
    if (m !== null) return { kind: m[1] as 'jump' | 'goto', chain: m[2] ?? '' };
    if (v === 'accept') return { kind: 'accept' };
    throw new Error(`a map verdict the model does not know: ${v}`);
  }

  private headerByte(p: Packet, bit: number): number {
    const addr = bit >= 128 ? p.daddr : p.saddr;
    const i = (bit - (bit >= 128 ? 128 : 96)) / 8;
    const b = ipBytes(addr)[i];
    if (b === undefined || !Number.isInteger(i)) throw new Error(`header read outside the addresses: @nh,${bit}`);
    return b;
  }
}

const hex = (n: number): string => `0x${(n >>> 0).toString(16)}`;
const ipText = (n: number): string => [24, 16, 8, 0].map((s) => (n >>> s) & 255).join('.');
/** Map keys in one form: numbers (hex or decimal) as decimal, anything else as written. */
function numKey(k: string): string {
  const t = k.trim();
  return /^(0x[0-9a-f]+|\d+)$/.test(t) ? String(Number(t)) : t;
}
