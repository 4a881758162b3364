// The network-namespace lab: a client, a gateway (where wccpd runs), an origin that answers on a whole /24, and
// N engine namespaces running Debian's Squid as WCCP engines. See docs/lab.md for the topology and the API.
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  CLIENT_ADDRESS,
  CLIENT_ADDRESS6,
  ENGINE_PREFIX,
  ENGINE_PREFIX6,
  GW_CLIENT_ADDRESS,
  GW_CLIENT_ADDRESS6,
  GW_O0_LINK_LOCAL,
  ORIGIN_LINK_LOCAL,
  ORIGIN_NEXT_HOP,
  ORIGIN_PREFIX,
  ORIGIN_PREFIX6,
  ROUTER_ADDRESS,
  ROUTER_ADDRESS6,
  engineAddress,
  engineAddress6,
} from './addresses.js';
import { CURL_MANY_FORMAT, parseCurl, parseCurlMany, type CurlManyResult, type CurlResult } from './curl.js';
import { LabError } from './errors.js';
import { labHousekeeping } from './housekeeping.js';
import { run, waitGone, sleep, type RunOptions, type RunResult } from './proc.js';
import type { LabProcess } from './process.js';
import { parseAccessLog, renderSquidConf, type AccessLogEntry, type SquidOptions } from './squid.js';
import { captureUdp, type UdpCapture } from './udp-capture.js';

export type { CurlManyResult, CurlResult } from './curl.js';
export type { AccessLogEntry, SquidOptions, Assignment } from './squid.js';
export type { LabProcess } from './process.js';
export type { UdpCapture, Datagram } from './udp-capture.js';
export { LabError } from './errors.js';
export * from './addresses.js';

/** Every lab namespace is named `wl-<pid>-<name>-<role>`; cleanup-stale.sh relies on this. */
export const NS_PREFIX = 'wl-';
const ORIGIN_SERVER = fileURLToPath(new URL('./origin-server.mjs', import.meta.url));
// Fixed MACs on the gateway<->origin link: the link is unnumbered on the gateway side, so both ends use static
// neighbours and nothing ARPs for the 256 origin addresses.
const GW_O0_MAC = '02:00:5e:00:01:01';
const ORIGIN_ETH0_MAC = '02:00:5e:00:01:02';
const SQUID = '/usr/sbin/squid';

export interface LabOptions {
  /** Number of engine namespaces (0..20). Engine i (1-based) is 192.0.2.(10+i). */
  engines: number;
  /** Short tag in the namespace names (letters and digits, at most 10); default l<counter>. */
  name?: string;
  /**
   * Engines divert the L2-forwarded traffic to Squid with TPROXY instead of NAT: Squid (`interception: 'tproxy'`)
   * fetches with the client's address, and the origin's answers (which must be redirected back to the engine, e.g.
   * by a source-port service) reach Squid's socket. See docs/lab.md.
   */
  tproxy?: boolean;
  /**
   * Dual stack: IPv6 beside IPv4 on every link (2001:db8::/32, addresses in addresses.ts), the origin answering on all
   * of ORIGIN_PREFIX6 too, the engines' NAT rule for IPv6 (`intercept6Ruleset()`) and each engine a neighbour of the
   * gateway over IPv6. Engines still register over IPv4. See docs/lab.md.
   */
  ipv6?: boolean;
}

export interface LabNamespaces {
  client: string;
  gw: string;
  origin: string;
  /** engine[i] for i = 1..engines (1-based, like the addresses and the Squid names). */
  engine: Readonly<Record<number, string>>;
}

export interface CurlOptions {
  timeoutMs?: number;
  /** Extra request headers, e.g. { Connection: 'close' }. */
  headers?: Record<string, string>;
  /** Use a forward proxy, e.g. 'http://192.0.2.11:3128'. */
  proxy?: string;
  /** Namespace to run curl in; default the client namespace. */
  ns?: string;
}

export interface StopSquidOptions {
  /** SIGKILL at once (a crash) instead of SIGTERM then SIGKILL after graceMs. */
  kill?: boolean;
  graceMs?: number;
}

export interface DestroyReport {
  ms: number;
  /** Processes found in lab namespaces after the tracked ones were stopped (killed too); normally []. */
  strays: number[];
}

export interface Lab {
  readonly id: string;
  /** Per-lab temp dir: engine<i>/ (squid.conf, access.log, cache.log), origin.log ... */
  readonly dir: string;
  readonly ns: LabNamespaces;
  readonly engines: number;
  engineNs(i: number): string;
  engineAddress(i: number): string;
  /** Engine i's IPv6 address (a dual-stack lab). */
  engineAddress6(i: number): string;
  /** Whether the lab is dual-stack (`ipv6: true`). */
  readonly ipv6: boolean;
  /** Runs a command in a namespace and waits for it (default 10 s bound). */
  exec(ns: string, cmd: string, args: readonly string[], opts?: RunOptions): Promise<RunResult>;
  /** Starts a long-running command in a namespace; tracked by PID and killed by destroy(). */
  spawn(ns: string, cmd: string, args: readonly string[], opts?: { env?: NodeJS.ProcessEnv }): LabProcess;
  /** Starts the origin HTTP server (port 80, all of 198.51.100.0/24) and waits until it listens. */
  startOrigin(): Promise<LabProcess>;
  /** Starts Squid in engine i (foreground, tracked) and waits until it listens on 3128 and 3129. */
  startSquid(i: number, opts?: SquidOptions): Promise<LabProcess>;
  /** Stops engine i's Squid by PID and resolves once it is really gone. */
  stopSquid(i: number, opts?: StopSquidOptions): Promise<void>;
  squidDir(i: number): string;
  /** Engine i's access.log, parsed (Squid logs ORIGINAL_DST/<ip> for intercepted requests). */
  squidAccessLog(i: number): AccessLogEntry[];
  /** HTTP GET with curl from the client namespace; never throws for network errors (status 0 + error). */
  curl(url: string, opts?: CurlOptions): Promise<CurlResult>;
  /**
   * Many GETs from one curl process, in order, each on a NEW connection (Connection: close): a status and the headers
   * that say who served it (engine, origin address reached, who the origin saw). timeoutMs bounds each request.
   */
  curlMany(urls: readonly string[], opts?: CurlOptions): Promise<CurlManyResult[]>;
  /** Binds a UDP socket in a namespace and records every datagram (source, hex). */
  captureUdp(ns: string, address: string, port: number): Promise<UdpCapture>;
  /**
   * Static L2 redirect in the gateway: client TCP/80 arriving on c0 goes to engine i (ip rule + table 100+i).
   * Resolves with a function that removes it.
   */
  staticRedirect(i: number): Promise<() => Promise<void>>;
  /** The same for IPv6 (a dual-stack lab): `ip -6 rule` iif c0 TCP/80 to table 100+i, default via engine i's IPv6. */
  staticRedirect6(i: number): Promise<() => Promise<void>>;
  /** Kills every tracked process and anything left in the namespaces, deletes the namespaces and files. */
  destroy(): Promise<DestroyReport>;
}

let counter = 0;

export async function createLab(opts: LabOptions): Promise<Lab> {
  if (!Number.isInteger(opts.engines) || opts.engines < 0 || opts.engines > 20) {
    throw new RangeError(`createLab: engines must be 0..20, got ${opts.engines}`);
  }
  const tag = opts.name ?? `l${++counter}`;
  if (!/^[a-z0-9]{1,10}$/.test(tag))
    throw new RangeError(`createLab: name must be 1..10 lowercase letters/digits, got "${tag}"`);
  if (userInfo().uid !== 0) throw new LabError('createLab: the lab needs root (network namespaces, nft)');

  const id = `${NS_PREFIX}${process.pid}-${tag}`;
  const engineNames: Record<number, string> = {};
  for (let i = 1; i <= opts.engines; i++) engineNames[i] = `${id}-engine${i}`;
  const ns: LabNamespaces = { client: `${id}-client`, gw: `${id}-gw`, origin: `${id}-origin`, engine: engineNames };
  const allNs = [ns.client, ns.gw, ns.origin, ...Object.values(engineNames)];
  const dir = mkdtempSync(join(tmpdir(), `wccplab-${process.pid}-${tag}-`));
  chmodSync(dir, 0o755); // Squid runs as `proxy` and must reach its engine dir

  const house = labHousekeeping(allNs, dir);
  const { squids } = house;

  const engineNs = (i: number): string => {
    const n = engineNames[i];
    if (n === undefined) throw new RangeError(`engine ${i} does not exist (this lab has engines 1..${opts.engines})`);
    return n;
  };
  const squidDir = (i: number): string => join(dir, `engine${i}`);

  const exec = (n: string, cmd: string, args: readonly string[], o?: RunOptions): Promise<RunResult> =>
    run('ip', ['netns', 'exec', n, cmd, ...args], o);
  // ip takes no options on a batch line: a line's family is its address's, or the whole batch's (`-6`).
  const batch = (n: string, lines: readonly string[], family?: '-6'): Promise<RunResult> =>
    run('ip', [...(family ? [family] : []), '-n', n, '-batch', '-'], { input: lines.join('\n') + '\n' });

  const spawn = (n: string, cmd: string, args: readonly string[], o?: { env?: NodeJS.ProcessEnv }): LabProcess =>
    house.spawn(n, cmd, args, o?.env);

  async function destroy(): Promise<DestroyReport> {
    const t0 = performance.now();
    const strays = await house.teardown({ graceMs: 1000, goneMs: 2000 });
    return strays === null ? { ms: 0, strays: [] } : { ms: performance.now() - t0, strays };
  }

  try {
    for (const n of allNs) {
      mkdirSync(`/etc/netns/${n}`, { recursive: true });
      writeFileSync(`/etc/netns/${n}/resolv.conf`, 'nameserver 127.0.0.1\n');
      await run('ip', ['netns', 'add', n]);
    }
    // Gateway: forwarding on, loose reverse-path (engine replies carry the origin's source but arrive on br-eng),
    // no ICMP redirects (one-armed layouts). Set the defaults before the interfaces exist so they inherit them.
    await exec(ns.gw, 'sysctl', [
      '-q',
      '-w',
      'net.ipv4.ip_forward=1',
      'net.ipv4.conf.all.rp_filter=0',
      'net.ipv4.conf.default.rp_filter=0',
      'net.ipv4.conf.all.send_redirects=0',
      'net.ipv4.conf.default.send_redirects=0',
    ]);
    if (opts.ipv6 === true) {
      // No duplicate address detection (nothing else on these links; a tentative address would delay the first
      // packets), the gateway forwards IPv6. Set in every namespace before its interfaces exist, so they inherit it.
      for (const n of allNs)
        await exec(n, 'sysctl', ['-q', '-w', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0']);
      await exec(ns.gw, 'sysctl', ['-q', '-w', 'net.ipv6.conf.all.forwarding=1', 'net.ipv6.conf.default.forwarding=1']);
    }
    // Where br_netfilter is loaded (it cannot be unloaded here), bridged frames on br-eng would also run the IP
    // hooks and be classified twice: keep the bridge out of them, as on a gateway without it.
    if (existsSync('/proc/sys/net/bridge/bridge-nf-call-iptables')) {
      await exec(ns.gw, 'sysctl', [
        '-q',
        '-w',
        'net.bridge.bridge-nf-call-iptables=0',
        'net.bridge.bridge-nf-call-ip6tables=0',
        'net.bridge.bridge-nf-call-arptables=0',
      ]);
    }
    const gw = [
      'link set lo up',
      `link add c0 type veth peer name eth0 netns ${ns.client}`,
      `addr add ${GW_CLIENT_ADDRESS}/24 dev c0`,
      'link set c0 up',
      `link add o0 address ${GW_O0_MAC} type veth peer name eth0 address ${ORIGIN_ETH0_MAC} netns ${ns.origin}`,
      'link set o0 up',
      `route add ${ORIGIN_PREFIX} via ${ORIGIN_NEXT_HOP} dev o0 onlink`,
      `neigh replace ${ORIGIN_NEXT_HOP} lladdr ${ORIGIN_ETH0_MAC} dev o0 nud permanent`,
      'link add br-eng type bridge',
      `addr add ${ROUTER_ADDRESS}/24 dev br-eng`,
      'link set br-eng up',
    ];
    for (let i = 1; i <= opts.engines; i++) {
      gw.push(
        `link add e${i} type veth peer name eth0 netns ${engineNs(i)}`,
        `link set e${i} master br-eng`,
        `link set e${i} up`,
      );
    }
    if (opts.ipv6 === true) {
      // The o0 link is unnumbered for IPv6 too: link-local next hops with static neighbours, so nothing solicits
      // the origin's addresses. No multicast snooping on br-eng: neighbour solicitations are flooded from the start.
      gw.push(
        `addr add ${GW_CLIENT_ADDRESS6}/64 dev c0 nodad`,
        `addr add ${GW_O0_LINK_LOCAL}/64 dev o0 nodad`,
        `route add ${ORIGIN_PREFIX6} via ${ORIGIN_LINK_LOCAL} dev o0`,
        `neigh replace ${ORIGIN_LINK_LOCAL} lladdr ${ORIGIN_ETH0_MAC} dev o0 nud permanent`,
        'link set br-eng type bridge mcast_snooping 0',
        `addr add ${ROUTER_ADDRESS6}/64 dev br-eng nodad`,
      );
    }
    await batch(ns.gw, gw);
    await batch(ns.client, [
      'link set lo up',
      `addr add ${CLIENT_ADDRESS}/24 dev eth0`,
      ...(opts.ipv6 === true ? [`addr add ${CLIENT_ADDRESS6}/64 dev eth0 nodad`] : []),
      'link set eth0 up',
      `route add default via ${GW_CLIENT_ADDRESS}`,
      ...(opts.ipv6 === true ? [`route add ::/0 via ${GW_CLIENT_ADDRESS6}`] : []),
    ]);
    // Origin: AnyIP - every address of the /24 is local, so one server on 0.0.0.0:80 answers them all.
    await batch(ns.origin, [
      'link set lo up',
      `addr add ${ORIGIN_NEXT_HOP}/32 dev eth0`,
      'link set eth0 up',
      `route add local ${ORIGIN_PREFIX} dev lo`,
      `route add default via ${GW_CLIENT_ADDRESS} dev eth0 onlink`,
      `neigh replace ${GW_CLIENT_ADDRESS} lladdr ${GW_O0_MAC} dev eth0 nud permanent`,
      ...(opts.ipv6 === true
        ? [
            `addr add ${ORIGIN_LINK_LOCAL}/64 dev eth0 nodad`,
            `route add local ${ORIGIN_PREFIX6} dev lo`,
            `route add ::/0 via ${GW_O0_LINK_LOCAL} dev eth0`,
            `neigh replace ${GW_O0_LINK_LOCAL} lladdr ${GW_O0_MAC} dev eth0 nud permanent`,
          ]
        : []),
    ]);
    for (let i = 1; i <= opts.engines; i++) {
      await batch(engineNs(i), [
        'link set lo up',
        `addr add ${engineAddress(i)}/24 dev eth0`,
        ...(opts.ipv6 === true ? [`addr add ${engineAddress6(i)}/64 dev eth0 nodad`] : []),
        'link set eth0 up',
        `route add default via ${ROUTER_ADDRESS}`,
        ...(opts.ipv6 === true ? [`route add ::/0 via ${ROUTER_ADDRESS6}`] : []),
      ]);
      // Intercepted traffic (destination unchanged, L2-forwarded here) goes to Squid's intercept port; the
      // engine subnet's own traffic is left alone.
      await run('ip', ['netns', 'exec', engineNs(i), 'nft', '-f', '-'], {
        input: opts.tproxy === true ? tproxyRuleset() : interceptRuleset(),
      });
      if (opts.ipv6 === true) {
        await run('ip', ['netns', 'exec', engineNs(i), 'nft', '-f', '-'], { input: intercept6Ruleset() });
      }
      if (opts.tproxy === true) {
        // Packets marked by the TPROXY rules are delivered locally, whatever their destination address.
        await exec(engineNs(i), 'sysctl', ['-q', '-w', ...TPROXY_SYSCTLS]);
        await batch(engineNs(i), TPROXY_ROUTING);
      }
    }
    if (opts.ipv6 === true) {
      // Each engine a neighbour of the gateway in both families, as an engine that has used its links is (the same MAC
      // in both entries; the ingress backend hands IPv6 frames to the MAC of the engine's IPv4 entry, which a
      // registered engine's WCCP messages keep): a connection to a closed port of the gateway (refused: no ping
      // here) makes each solicit the other; the gateway keeps the entries (too few for the neighbour table's GC).
      for (let i = 1; i <= opts.engines; i++) {
        for (const to of [ROUTER_ADDRESS, `[${ROUTER_ADDRESS6}]`]) {
          const r = await exec(engineNs(i), 'curl', ['-sS', '-g', '--max-time', '3', `http://${to}:9/`], {
            allowFail: true,
            timeoutMs: 5000,
          });
          if (r.code !== 7) throw new LabError(`engine ${i} -> ${to}:9 not refused: ${r.stderr.trim()}`);
        }
      }
    }
  } catch (e) {
    await destroy().catch(() => undefined);
    throw e;
  }

  /** An ip rule and table 100+i sending the client's TCP/80 on c0 to `engine`, in the family given. */
  async function staticRedirect(family: '-6' | undefined, i: number, engine: string): Promise<() => Promise<void>> {
    const table = String(100 + i);
    await batch(
      ns.gw,
      [
        `route replace default via ${engine} dev br-eng table ${table}`,
        `rule add iif c0 ipproto tcp dport 80 lookup ${table} priority ${table}`,
      ],
      family,
    );
    return async () => {
      await batch(
        ns.gw,
        [`rule del iif c0 ipproto tcp dport 80 lookup ${table} priority ${table}`, `route flush table ${table}`],
        family,
      );
    };
  }

  const lab: Lab = {
    id,
    dir,
    ns,
    engines: opts.engines,
    engineNs,
    engineAddress: (i) => {
      engineNs(i);
      return engineAddress(i);
    },
    engineAddress6: (i) => {
      engineNs(i);
      if (opts.ipv6 !== true)
        throw new LabError('engineAddress6: this lab is not dual-stack (createLab({ ipv6: true }))');
      return engineAddress6(i);
    },
    ipv6: opts.ipv6 === true,
    exec,
    spawn,
    async startOrigin() {
      // Dual stack: one socket on [::] takes both families (IPv4 as ::ffff:a.b.c.d, which the server strips).
      const p = spawn(ns.origin, process.execPath, [ORIGIN_SERVER, '80', ...(opts.ipv6 === true ? ['::'] : [])]);
      await p.waitForLine((l) => l.startsWith('listening'), 5000);
      return p;
    },
    async startSquid(i, sopts = {}) {
      const n = engineNs(i);
      const running = squids.get(i);
      if (running?.running()) throw new LabError(`engine ${i} already runs Squid (pid ${running.pid})`);
      const d = squidDir(i);
      rmSync(d, { recursive: true, force: true });
      mkdirSync(d, { recursive: true });
      const conf = join(d, 'squid.conf');
      writeFileSync(conf, renderSquidConf(`engine${i}`, d, sopts, ROUTER_ADDRESS));
      const proxy = lookupProxyIds();
      chownSync(d, proxy.uid, proxy.gid);
      // -N: foreground, no fork, so this PID is Squid itself. -n: a service name of our own, so the shared-memory
      // segments of concurrent Squids never collide.
      const p = spawn(n, SQUID, ['-N', '-f', conf, '-n', `${id.replace(/[^a-z0-9]/g, '')}e${i}`]);
      squids.set(i, p);
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline) {
        if (!p.running())
          throw new LabError(
            `Squid in engine ${i} exited at start; cache.log:\n${tail(join(d, 'cache.log'))}\n${p.output()}`,
          );
        const ss = await exec(n, 'ss', ['-Htln'], { allowFail: true, timeoutMs: 2000 });
        if (/:3128\b/.test(ss.stdout) && /:3129\b/.test(ss.stdout)) return p;
        await sleep(50);
      }
      await p.stop(0);
      throw new LabError(
        `Squid in engine ${i} did not listen on 3128/3129 within 10 s; cache.log:\n${tail(join(d, 'cache.log'))}`,
      );
    },
    async stopSquid(i, sopts = {}) {
      engineNs(i);
      const p = squids.get(i);
      if (!p) return;
      if (sopts.kill) {
        try {
          process.kill(p.pid, 'SIGKILL');
        } catch {
          /* gone */
        }
        const left = await waitGone([p.pid], 3000);
        if (left.length > 0) throw new LabError(`Squid of engine ${i} (pid ${p.pid}) survived SIGKILL`);
      } else {
        await p.stop(sopts.graceMs ?? 3000);
      }
      squids.delete(i);
    },
    squidDir: (i) => {
      engineNs(i);
      return squidDir(i);
    },
    squidAccessLog(i) {
      engineNs(i);
      const f = join(squidDir(i), 'access.log');
      return existsSync(f) ? parseAccessLog(readFileSync(f, 'utf8')) : [];
    },
    async curl(url, copts = {}) {
      const timeoutMs = copts.timeoutMs ?? 5000;
      // -g: brackets are an IPv6 literal's, not curl's URL globbing.
      const args = ['-sS', '-g', '-i', '--max-time', (timeoutMs / 1000).toFixed(3), ...proxyArgs(copts.proxy)];
      for (const [k, v] of Object.entries(copts.headers ?? {})) args.push('-H', `${k}: ${v}`);
      args.push(url);
      const r = await exec(copts.ns ?? ns.client, 'curl', args, { allowFail: true, timeoutMs: timeoutMs + 2000 });
      return parseCurl(r.stdout, r.stderr, r.code);
    },
    async curlMany(urls, copts = {}) {
      const timeoutMs = copts.timeoutMs ?? 5000;
      const out: CurlManyResult[] = [];
      for (let i = 0; i < urls.length; i += 256) {
        const chunk = urls.slice(i, i + 256);
        const args = [
          '-s',
          '-g',
          '--max-time',
          (timeoutMs / 1000).toFixed(3),
          ...proxyArgs(copts.proxy),
          '-H',
          'Connection: close',
          '-w',
          CURL_MANY_FORMAT,
        ];
        for (const [k, v] of Object.entries(copts.headers ?? {})) args.push('-H', `${k}: ${v}`);
        for (const u of chunk) args.push('-o', '/dev/null', u);
        const r = await exec(copts.ns ?? ns.client, 'curl', args, {
          allowFail: true,
          timeoutMs: timeoutMs * chunk.length + 5000,
        });
        const got = parseCurlMany(r.stdout);
        if (got.length !== chunk.length) {
          throw new LabError(
            `curlMany: ${got.length} results for ${chunk.length} URLs (curl exit ${r.code}): ${r.stderr.slice(0, 500)}`,
          );
        }
        out.push(...got);
      }
      return out;
    },
    captureUdp: (n, address, port) => captureUdp(spawn, n, address, port),
    staticRedirect: (i) => staticRedirect(undefined, i, lab.engineAddress(i)),
    staticRedirect6: (i) => staticRedirect('-6', i, lab.engineAddress6(i)),
    destroy,
  };
  return lab;
}

const TPROXY_MARK = '0x1';
const TPROXY_TABLE = '100';
/** The engine's sysctls and `ip` lines for TPROXY (docs/squid.md shows them, test/lab/squid-docs.test.ts checks). */
export const TPROXY_SYSCTLS: readonly string[] = ['net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.eth0.rp_filter=0'];
export const TPROXY_ROUTING: readonly string[] = [
  `rule add fwmark ${TPROXY_MARK}/${TPROXY_MARK} lookup ${TPROXY_TABLE}`,
  `route add local 0.0.0.0/0 dev lo table ${TPROXY_TABLE}`,
];

/** The engine's NAT rule for `http_port 3129 intercept`: L2-forwarded port-80 traffic to Squid (docs/squid.md). */
export function interceptRuleset(): string {
  return (
    `table ip wccplab {\n chain prerouting {\n  type nat hook prerouting priority dstnat; policy accept;\n` +
    `  iifname "eth0" ip saddr != ${ENGINE_PREFIX} tcp dport 80 redirect to :3129\n }\n}\n`
  );
}

/** The same for IPv6 (`http_port 3129 intercept` takes both families): the engine's ip6 NAT rule (docs/squid.md). */
export function intercept6Ruleset(): string {
  return (
    `table ip6 wccplab {\n chain prerouting {\n  type nat hook prerouting priority dstnat; policy accept;\n` +
    `  iifname "eth0" ip6 saddr != ${ENGINE_PREFIX6} tcp dport 80 redirect to :3129\n }\n}\n`
  );
}

/**
 * Squid's documented TPROXY set-up on the engine: new client connections to port 80 are diverted to Squid's
 * `http_port 3129 tproxy` socket, and packets of an existing transparent socket (the origin's answers to Squid's
 * connections made with the client's address) are marked, so the policy route delivers them locally.
 */
export function tproxyRuleset(): string {
  return [
    'table ip wccplab {',
    ' chain divert {',
    '  type filter hook prerouting priority mangle; policy accept;',
    `  meta l4proto tcp socket transparent 1 meta mark set ${TPROXY_MARK} accept`,
    `  iifname "eth0" ip saddr != ${ENGINE_PREFIX} tcp dport 80 tproxy to :3129 meta mark set ${TPROXY_MARK} accept`,
    ' }',
    '}',
    '',
  ].join('\n');
}

/** An explicit proxy, or none at all (ignore any http_proxy in the environment). */
function proxyArgs(proxy: string | undefined): string[] {
  return proxy ? ['--proxy', proxy] : ['--noproxy', '*'];
}

function lookupProxyIds(): { uid: number; gid: number } {
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('proxy:'));
  const f = line?.split(':');
  if (!f || f.length < 4) throw new LabError('user "proxy" not found in /etc/passwd (is the squid package installed?)');
  return { uid: Number(f[2]), gid: Number(f[3]) };
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').slice(-2000);
  } catch {
    return `(no ${file})`;
  }
}
