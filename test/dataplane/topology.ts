// A small namespace topology of our own for the nft backend's kernel tests (names carry process.pid):
//   client 203.0.113.10/28 -- c0 203.0.113.1/28  [gw]  br0 192.0.2.1/25 -- e1 192.0.2.11, e2 192.0.2.12
//                                                      o0 192.0.2.129/30 -- origin 192.0.2.130, answers for every
//                                                      address of 198.51.100.0/24 and 203.0.113.64/26 (local routes)
// Engines intercept TCP 80 not sourced from their own segment to :3129, where a server answers with the engine's
// name; the origin answers "origin" on :80 and :8080.
// Dual stack (`new Topology(tag, n, { ipv6: true })`), the documentation prefix beside:
//   client 2001:db8:c::10/64 -- c0 2001:db8:c::1/64  [gw]  br0 2001:db8:e::1/64 -- e1 2001:db8:e::11, e2 ::12
//                                                         o0 2001:db8:f::1/64 -- origin 2001:db8:f::2, local
//                                                         2001:db8:5100::/64 and 2001:db8:6400::/64
// with the same interception (an ip6 table on each engine), servers on [::], and each engine a neighbour of the
// gateway in both families (as one that has used its links: the same MAC in both entries).
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { killNamespaceProcesses, killTree, within } from '../helpers/processes.js';

const BIN = fileURLToPath(new URL('./bin/', import.meta.url));
const CLEANUP = fileURLToPath(new URL('../../systemd/wccpd-cleanup', import.meta.url));

export interface ProbeResult {
  host: string;
  ok: boolean;
  data: string;
  code: string | null;
  ms: number;
}

function sh(cmd: string): void {
  execFileSync('sh', ['-ec', cmd], { stdio: ['ignore', 'ignore', 'pipe'] });
}

/**
 * Waits (at most 10 s) until every link of `ns` that is up with a carrier has its IPv6 link-local address and none is
 * tentative. The kernel makes those itself, as links come up (a bridge only once a port is up) and after duplicate
 * address detection, so they reach the local table a second or two after up(): a test that compares the gateway's
 * tables before and after wccpd must take its baseline after them.
 */
function linkLocalSettled(ns: string): void {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const links = execFileSync('ip', ['-n', ns, '-o', 'link', 'show', 'up'], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => /[<,]LOWER_UP[,>]/.test(l))
      .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1] ?? '')
      .filter((name) => name !== '' && name !== 'lo');
    const addrs = execFileSync('ip', ['-n', ns, '-o', '-6', 'addr', 'show'], { encoding: 'utf8' }).split('\n');
    const withLinkLocal = new Set(addrs.flatMap((a) => /^\d+:\s+(\S+)\s+inet6 .* scope link /.exec(a)?.[1] ?? []));
    const waiting = links.filter((name) => !withLinkLocal.has(name));
    const tentative = addrs.filter((a) => / tentative/.test(a));
    if (waiting.length === 0 && tentative.length === 0) return;
    if (Date.now() > deadline)
      throw new Error(
        `${ns}: IPv6 link-local addresses not settled in 10 s (without one: ${waiting.join(', ') || 'none'}; ` +
          `tentative: ${tentative.length})`,
      );
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  }
}

/** One entry of an ingress flow map (`nft list map netdev wccpd_ingress flows_<id>`), its raw key decoded. */
export interface FlowEntry {
  readonly saddr: string;
  readonly daddr: string;
  /** The ports (none for a service keyed by addresses alone). */
  readonly sport?: number;
  readonly dport?: number;
  /** As nft prints it (meta priority: `major:minor` in hex). */
  readonly value: string;
  /** Seconds left. */
  readonly expires: number;
  /**
   * The entry's own timeout in seconds, where nft shows one (it does where it differs from the map's): the timeout it
   * was added with, still shown after a refresh gave it the map's (`timeout 30s expires 9m59s`).
   */
  readonly timeout?: number;
}

const UNIT_SECONDS: Record<string, number> = { d: 86_400, h: 3600, m: 60, s: 1, ms: 0.001 };
/** An nft duration (`30s`, `10m`, `1h2m3s`) in seconds. */
const seconds = (text: string): number =>
  [...text.matchAll(/(\d+)(ms|[dhms])/g)].reduce((t, m) => t + Number(m[1]) * (UNIT_SECONDS[m[2] ?? ''] ?? NaN), 0);

const dotted = (v: bigint): string => [24n, 16n, 8n, 0n].map((s) => String((v >> s) & 0xffn)).join('.');

/**
 * Sends bare TCP segments ("SRC,DST,SPORT,DPORT,FLAGS" each, bin/segments.mjs) from a raw socket in namespace `ns`;
 * throws unless every one went.
 */
export function sendSegments(ns: string, segments: readonly string[]): void {
  const out = execFileSync('ip', ['netns', 'exec', ns, process.execPath, `${BIN}segments.mjs`, ...segments], {
    encoding: 'utf8',
    timeout: 5000,
  });
  if (out !== `sent ${segments.length}\n`) throw new Error(`segments.mjs: ${out.trim()}`);
}

/**
 * The entries of a flow map listing. The key is raw header bytes (`@nh,96,64 . @th,0,32`: source and destination
 * address, source and destination port), which nft prints as two hex integers in network byte order.
 */
export function flowEntries(listing: string): FlowEntry[] {
  const re =
    /(0x[0-9a-f]+)(?: \. (0x[0-9a-f]+))?(?: timeout (\S+))? expires (?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:\d+ms)? : ([0-9a-f]+:[0-9a-f]+)/g;
  return [...listing.matchAll(re)].map((m) => {
    const addresses = BigInt(m[1] as string);
    const ports = m[2] !== undefined ? Number(BigInt(m[2])) : undefined;
    return {
      saddr: dotted(addresses >> 32n),
      daddr: dotted(addresses),
      ...(ports !== undefined ? { sport: ports >>> 16, dport: ports & 0xffff } : {}),
      value: m[7] as string,
      expires: Number(m[4] ?? 0) * 3600 + Number(m[5] ?? 0) * 60 + Number(m[6] ?? 0),
      ...(m[3] !== undefined ? { timeout: seconds(m[3]) } : {}),
    };
  });
}

/** The dual-stack topology's IPv6 prefixes: the first origin prefix is the lab's ORIGIN_PREFIX6 too. */
export const TOPOLOGY6 = {
  client: '2001:db8:c::10',
  gwClient: '2001:db8:c::1',
  router: '2001:db8:e::1',
  engines: '2001:db8:e::/64',
  gwOrigin: '2001:db8:f::1',
  origin: '2001:db8:f::2',
  originPrefixes: ['2001:db8:5100::/64', '2001:db8:6400::/64'],
} as const;

export interface TopologyOptions {
  /** IPv6 beside IPv4 on every link (TOPOLOGY6). */
  readonly ipv6?: boolean;
}

export class Topology {
  readonly client: string;
  readonly gw: string;
  readonly origin: string;
  readonly engines: string[];
  private readonly children: ChildProcess[] = [];
  private prober: { child: ChildProcess; lines: AsyncIterator<string> } | null = null;

  constructor(
    tag: string,
    readonly engineCount = 2,
    readonly options: TopologyOptions = {},
  ) {
    const p = `wd${tag}-${process.pid}`;
    this.client = `${p}-c`;
    this.gw = `${p}-g`;
    this.origin = `${p}-o`;
    this.engines = Array.from({ length: engineCount }, (_, i) => `${p}-e${i + 1}`);
  }

  engineAddress(i: number): string {
    return `192.0.2.${11 + i}`;
  }

  /** Engine i's IPv6 address (0-based, as engineAddress): 2001:db8:e::11, ::12, ... */
  engineAddress6(i: number): string {
    return `2001:db8:e::${11 + i}`;
  }

  async up(withServers = true): Promise<void> {
    const { client, gw, origin } = this;
    for (const ns of [client, gw, origin, ...this.engines]) sh(`ip netns add ${ns}; ip -n ${ns} link set lo up`);
    sh(
      `ip netns exec ${gw} sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 ` +
        `net.ipv4.conf.default.rp_filter=0 net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0`,
    );
    sh(`ip link add c0 netns ${gw} type veth peer name eth0 netns ${client}
        ip -n ${gw} addr add 203.0.113.1/28 dev c0; ip -n ${gw} link set c0 up
        ip -n ${client} addr add 203.0.113.10/28 dev eth0; ip -n ${client} link set eth0 up
        ip -n ${client} route add default via 203.0.113.1
        ip link add o0 netns ${gw} type veth peer name eth0 netns ${origin}
        ip -n ${gw} addr add 192.0.2.129/30 dev o0; ip -n ${gw} link set o0 up
        ip -n ${origin} addr add 192.0.2.130/30 dev eth0; ip -n ${origin} link set eth0 up
        ip -n ${origin} route add default via 192.0.2.129
        ip -n ${origin} route add local 198.51.100.0/24 dev lo
        ip -n ${origin} route add local 203.0.113.64/26 dev lo
        ip -n ${gw} route add 198.51.100.0/24 via 192.0.2.130
        ip -n ${gw} route add 203.0.113.64/26 via 192.0.2.130
        ip -n ${gw} link add br0 type bridge; ip -n ${gw} addr add 192.0.2.1/25 dev br0; ip -n ${gw} link set br0 up`);
    for (const [i, ns] of this.engines.entries()) {
      sh(`ip link add e${i + 1} netns ${this.gw} type veth peer name eth0 netns ${ns}
          ip -n ${this.gw} link set e${i + 1} master br0; ip -n ${this.gw} link set e${i + 1} up
          ip -n ${ns} addr add ${this.engineAddress(i)}/25 dev eth0; ip -n ${ns} link set eth0 up
          ip -n ${ns} route add default via 192.0.2.1
          ip netns exec ${ns} nft add table ip eng
          ip netns exec ${ns} nft add chain ip eng pre '{ type nat hook prerouting priority dstnat; }'
          ip netns exec ${ns} nft add rule ip eng pre iifname eth0 ip saddr != 192.0.2.0/25 tcp dport 80 redirect to :3129`);
    }
    if (this.options.ipv6 === true) this.upIpv6();
    if (withServers) {
      await this.serve(origin, 'origin', 80);
      await this.serve(origin, 'origin', 8080);
      for (const [i, ns] of this.engines.entries()) await this.serve(ns, `engine${i + 1}`, 3129);
    }
  }

  /** IPv6 on the links up() made (no duplicate address detection: nothing else is on them). */
  private upIpv6(): void {
    const { client, gw, origin } = this;
    const t = TOPOLOGY6;
    for (const ns of [client, gw, origin, ...this.engines])
      sh(`ip netns exec ${ns} sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0`);
    sh(`ip netns exec ${gw} sysctl -qw net.ipv6.conf.all.forwarding=1
        ip -n ${gw} addr add ${t.gwClient}/64 dev c0 nodad
        ip -n ${client} addr add ${t.client}/64 dev eth0 nodad
        ip -n ${client} route add ::/0 via ${t.gwClient}
        ip -n ${gw} addr add ${t.gwOrigin}/64 dev o0 nodad
        ip -n ${origin} addr add ${t.origin}/64 dev eth0 nodad
        ip -n ${origin} route add ::/0 via ${t.gwOrigin}
        ip -n ${gw} link set br0 type bridge mcast_snooping 0
        ip -n ${gw} addr add ${t.router}/64 dev br0 nodad`);
    for (const prefix of t.originPrefixes)
      sh(`ip -n ${origin} route add local ${prefix} dev lo; ip -n ${gw} route add ${prefix} via ${t.origin}`);
    for (const [i, ns] of this.engines.entries()) {
      sh(`ip -n ${ns} addr add ${this.engineAddress6(i)}/64 dev eth0 nodad
          ip -n ${ns} route add ::/0 via ${t.router}
          ip netns exec ${ns} nft add table ip6 eng
          ip netns exec ${ns} nft add chain ip6 eng pre '{ type nat hook prerouting priority dstnat; }'
          ip netns exec ${ns} nft add rule ip6 eng pre iifname eth0 ip6 saddr != ${t.engines} tcp dport 80 redirect to :3129`);
      // A connection to a closed port of the gateway (refused) in each family makes each side solicit the other:
      // the gateway then holds the engine's neighbour entries, IPv4 and IPv6, with the one MAC.
      for (const to of ['192.0.2.1', `[${t.router}]`]) {
        const r = spawnSync('ip', ['netns', 'exec', ns, 'curl', '-sg', '--max-time', '3', `http://${to}:9/`]);
        if (r.status !== 7) throw new Error(`engine ${i + 1} -> ${to}:9 not refused (curl exit ${r.status})`);
      }
    }
    for (const ns of [client, gw, origin, ...this.engines]) linkLocalSettled(ns);
  }

  /**
   * A suite's before(): up(), then `prepare` (the suite's own set-up in the namespaces), then the backend `make`
   * builds, started (stopped again when its start fails, so the suite's after() needs none).
   */
  async upWith<R extends { start(): Promise<void>; stop(): Promise<void> }>(
    make: () => R,
    prepare?: () => void,
  ): Promise<R> {
    await this.up();
    prepare?.();
    const r = make();
    try {
      await r.start();
    } catch (e) {
      await r.stop().catch(() => undefined);
      throw e;
    }
    return r;
  }

  /** A suite's after(): `first` (a backend's stop, a daemon's close), then down(), even when `first` fails. */
  async downAfter(first: () => Promise<unknown> | undefined): Promise<void> {
    try {
      await first();
    } finally {
      await this.down();
    }
  }

  /** Starts a server answering with `name` in a namespace of the topology (stopped by down()). */
  async serve(ns: string, name: string, port: number): Promise<void> {
    const host = this.options.ipv6 === true ? ['::'] : [];
    const child = spawn('ip', ['netns', 'exec', ns, process.execPath, `${BIN}serve.mjs`, name, String(port), ...host], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    this.children.push(child);
    const lines = readline.createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
    const first = await lines.next();
    if (first.value !== 'listening') throw new Error(`server ${name} in ${ns} did not start`);
  }

  /** Connects from the client namespace (from `local`, an address of its eth0, when given); one request at a time. */
  async probe(host: string, port = 80, timeoutMs = 1500, local?: string): Promise<ProbeResult> {
    if (this.prober === null) {
      const child = spawn('ip', ['netns', 'exec', this.client, process.execPath, `${BIN}probe.mjs`], {
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      this.children.push(child);
      ignoreClosedStdin(child);
      this.prober = { child, lines: readline.createInterface({ input: child.stdout! })[Symbol.asyncIterator]() };
    }
    this.prober.child.stdin!.write(`${host} ${port} ${timeoutMs}${local !== undefined ? ` ${local}` : ''}\n`);
    const line = await this.prober.lines.next();
    if (line.done === true) throw new Error('the probe process ended');
    return JSON.parse(line.value as string) as ProbeResult;
  }

  /**
   * Opens a long-lived connection from the client (from `localPort` when given); send() writes a line and resolves
   * with the next line back.
   */
  async hold(
    host: string,
    port = 80,
    localPort?: number,
  ): Promise<{ first: string; send: (line: string) => Promise<string> }> {
    const args = [`${BIN}hold.mjs`, host, String(port), ...(localPort !== undefined ? [String(localPort)] : [])];
    const child = spawn('ip', ['netns', 'exec', this.client, process.execPath, ...args], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.children.push(child);
    ignoreClosedStdin(child);
    const lines = readline.createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
    const next = async (): Promise<string> => {
      const l = await lines.next();
      return l.done === true ? 'end' : String(l.value);
    };
    const first = await next();
    return {
      first,
      send: async (line) => {
        child.stdin!.write(`${line}\n`);
        return next();
      },
    };
  }

  /** Runs a command in the client namespace and returns its stdout. */
  inClient(cmd: string): string {
    return execFileSync('ip', ['netns', 'exec', this.client, 'sh', '-c', cmd], { encoding: 'utf8' });
  }

  /** systemd/wccpd-cleanup run in the gateway namespace with the daemon's state directory (as ExecStopPost runs it). */
  cleanup(stateDir: string, ...args: string[]): { status: number | null; stderr: string } {
    const r = spawnSync('ip', ['netns', 'exec', this.gw, 'sh', CLEANUP, '--state-dir', stateDir, ...args], {
      encoding: 'utf8',
    });
    return { status: r.status, stderr: r.stderr };
  }

  /** Runs a command in the gateway namespace and returns its stdout. */
  inGw(cmd: string): string {
    return execFileSync('ip', ['netns', 'exec', this.gw, 'sh', '-c', cmd], { encoding: 'utf8' });
  }

  async down(): Promise<void> {
    for (const c of this.children) {
      if (c.exitCode === null && c.signalCode === null && c.pid !== undefined) {
        const gone = new Promise((r) => c.once('exit', r));
        try {
          process.kill(c.pid, 'SIGTERM');
        } catch {
          /* already gone */
        }
        // One that ignores SIGTERM must not hold the test file open for ever.
        await within(gone, 5000, 'a topology server after SIGTERM').catch(() => {
          killTree(c.pid ?? 0);
          return gone;
        });
      }
    }
    for (const ns of [this.client, this.gw, this.origin, ...this.engines]) {
      // Whatever still runs in it goes first (as test/lab/lab.ts's destroy()): a daemon a test SIGKILLed (a crash)
      // leaves its `nft monitor` and `ip monitor`, which read no stdin and would run on for ever in the deleted
      // namespace.
      killNamespaceProcesses(ns);
      try {
        sh(`ip netns del ${ns}`);
      } catch {
        /* not created */
      }
    }
  }
}

/**
 * A helper that has ended (a held connection reset, a probe process gone) says so on stdout ('end', 'error ...', or
 * the end of its lines); a line written to it meanwhile fails with EPIPE, which must not become the test process's
 * uncaught exception.
 */
function ignoreClosedStdin(child: { stdin: NodeJS.WritableStream | null }): void {
  child.stdin?.on('error', () => undefined);
}
