// The gateway's CPU cost per forwarded packet, by kind of kernel work (nftables, FIB and policy routing, conntrack),
// for two data paths measured AT THE SAME TIME in two identical labs, so the machine's load (other jobs, its speed
// drifting in episodes) hits both alike; each pair is run twice with the labs swapped. Not requests/s: the CPU time
// perf samples in the senders' context (where the veth hands each packet to the gateway and the softirq forwards it)
// divided by the packets the gateway forwarded. Usage: USAGE below (`--help`).
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRedirector } from '../src/dataplane/index.js';
import type { Redirector } from '../src/dataplane/redirector.js';
import { checkArgs, cleanUpOnClosedOutput } from './cli.js';
import type { Cli } from './cli.js';
import { BenchError, PERF_PERIOD_NS } from './dataplane-measure.js';
import { benchService } from './dataplane-paths.js';

const ENGINE = '192.0.2.11';
const TARGET = '198.51.100.80';
const SERVICE_PORT = 9000; // a UDP service: redirected
const OTHER_PORT = 9001; // no service takes it: unrelated
const FLOWS = 4;

type PathKey = 'static' | 'route' | 'nft' | 'nft-untracked' | 'ingress' | 'ingress-alt';
/** Each kind's service protocol and flood (packet-cost-flood's FLOWS argument). */
const KINDS = {
  redirected: { protocol: 'udp', flows: FLOWS },
  unrelated: { protocol: 'udp', flows: FLOWS },
  new: { protocol: 'udp', flows: 0 },
  tcp: { protocol: 'tcp', flows: -1 },
  acks: { protocol: 'tcp', flows: -2 },
  churn: { protocol: 'tcp', flows: -3 },
} as const;
type Kind = keyof typeof KINDS;
const PATHS: readonly PathKey[] = ['static', 'route', 'nft', 'nft-untracked', 'ingress', 'ingress-alt'];
/** Packets per unit of a kind: a TCP connection's client side is 4 packets. */
const perUnit = (kind: Kind): number => (kind === 'tcp' ? 4 : 1);

const CLI: Cli = {
  name: 'bench/packet-cost',
  usage: `usage (root): npx tsx bench/packet-cost.ts [--pairs nft/static,...] [--kinds redirected,unrelated,new,tcp,acks,churn]
  [--rounds N] [--packets N] [--alt DIR]
Paths: static (a policy route + conntrack: bench/dataplane's "static + conntrack"), route (the policy route alone),
nft (wccpd's nft backend), nft-untracked (the same with \`dataplane.conntrack: services\`), ingress (wccpd's ingress
backend), ingress-alt (the ingress backend of another checkout, DIR/src/dataplane/index.ts: two builds side by side,
e.g. a \`git worktree add DIR <commit>\`). Kinds: redirected (4 flows of the service), unrelated (4 flows of another
port), new (the service's, every packet a new flow: what a flow's first packet costs; at most 262143 packets stay
within the ingress backend's default flow map), tcp (a TCP service: every 4 packets a new connection's client side,
SYN, ACK, FIN|ACK, ACK; printed per connection), acks (the TCP service's bare ACKs of 4 open flows: a download's ACK
stream), churn (one 4-tuple of the TCP service, SYN and FIN|ACK in turn: a client that opens and closes it again and
again). The kworker column is the kernel's workers' time meanwhile (the dynamic sets' growth and garbage collection,
conntrack's), given to the lab whose path has dynamic sets. Defaults: --pairs nft/static,nft-untracked/nft --kinds
redirected,unrelated --rounds 3 (1..20) --packets 3000000 (100000..50000000). Needs perf, gcc, nft, ip.`,
  values: ['--pairs', '--kinds', '--rounds', '--packets', '--alt'],
};

interface Settings {
  readonly pairs: readonly (readonly [PathKey, PathKey])[];
  readonly kinds: readonly Kind[];
  readonly rounds: number;
  readonly packets: number;
  /** The checkout whose ingress backend `ingress-alt` runs. */
  readonly alt?: string;
}

function parseArgs(argv: readonly string[]): Settings {
  checkArgs(CLI, argv);
  const arg = (name: string): string | undefined => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const pairs = (arg('--pairs') ?? 'nft/static,nft-untracked/nft').split(',').map((p) => {
    const [a, b] = p.split('/');
    if (!PATHS.includes(a as PathKey) || !PATHS.includes(b as PathKey) || a === b)
      throw new BenchError(`--pairs takes a/b of two different paths of ${PATHS.join(', ')}; got "${p}"`);
    return [a as PathKey, b as PathKey] as const;
  });
  const kinds = (arg('--kinds') ?? 'redirected,unrelated').split(',') as Kind[];
  if (kinds.some((k) => !Object.hasOwn(KINDS, k)))
    throw new BenchError(`--kinds takes ${Object.keys(KINDS).join(', ')} (a comma list)`);
  const alt = arg('--alt');
  if (pairs.some((p) => p.includes('ingress-alt')) && alt === undefined)
    throw new BenchError('ingress-alt needs --alt DIR (a checkout with src/dataplane/index.ts)');
  const rounds = Number(arg('--rounds') ?? 3);
  const packets = Number(arg('--packets') ?? 3_000_000);
  if (!Number.isInteger(rounds) || rounds < 1 || rounds > 20) throw new BenchError('--rounds: 1..20');
  if (!Number.isInteger(packets) || packets < 100_000 || packets > 50_000_000)
    throw new BenchError('--packets: 100000..50000000');
  return { pairs, kinds, rounds, packets, ...(alt !== undefined ? { alt } : {}) };
}

const run = (cmd: string, args: readonly string[], input?: string): string =>
  execFileSync(cmd, args, { input, encoding: 'utf8', timeout: 30_000, maxBuffer: 1 << 28 });

/** client - gw - origin, engine: the lab of test/lab (TEST-NET), static neighbours so no ARP runs while measuring. */
function labUp(id: string): void {
  const [c, g, o, e] = ['c', 'g', 'o', 'e'].map((n) => `${id}-${n}`) as [string, string, string, string];
  const script = `set -e
for n in ${c} ${g} ${o} ${e}; do ip netns add $n; ip -n $n link set lo up; done
ip netns exec ${g} sysctl -q -w net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \\
  net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0
ip -n ${g} link add c0 type veth peer name eth0 netns ${c}
ip -n ${g} link add o0 type veth peer name eth0 netns ${o}
ip -n ${g} link add e1 type veth peer name eth0 netns ${e}
ip -n ${g} addr add 203.0.113.1/24 dev c0; ip -n ${g} addr add 198.51.100.1/24 dev o0; ip -n ${g} addr add 192.0.2.1/24 dev e1
for l in c0 o0 e1; do ip -n ${g} link set $l up; done
ip -n ${c} addr add 203.0.113.10/24 dev eth0; ip -n ${c} link set eth0 up; ip -n ${c} route add default via 203.0.113.1
ip -n ${o} addr add 198.51.100.254/24 dev eth0; ip -n ${o} addr add ${TARGET}/32 dev eth0; ip -n ${o} link set eth0 up
ip -n ${o} route add default via 198.51.100.1
ip -n ${e} addr add ${ENGINE}/24 dev eth0; ip -n ${e} link set eth0 up; ip -n ${e} route add default via 192.0.2.1
mac() { ip -n $1 -br link show $2 | awk '{print $3}'; }
ip -n ${g} neigh replace ${TARGET} lladdr $(mac ${o} eth0) dev o0 nud permanent
ip -n ${g} neigh replace ${ENGINE} lladdr $(mac ${e} eth0) dev e1 nud permanent
ip -n ${g} neigh replace 203.0.113.10 lladdr $(mac ${c} eth0) dev c0 nud permanent
ip -n ${c} neigh replace 203.0.113.1 lladdr $(mac ${g} c0) dev eth0 nud permanent
`;
  run('bash', ['-c', script]);
}

function labDown(id: string): void {
  for (const n of ['c', 'g', 'o', 'e']) spawnSync('ip', ['netns', 'del', `${id}-${n}`]);
}

interface Installed {
  remove(): Promise<void>;
}

/**
 * One data path in a lab's gateway: a UDP service (TCP for the tcp kind) on SERVICE_PORT from c0, every bucket to
 * the engine.
 */
async function install(path: PathKey, gw: string, kind: Kind, alt: string | undefined): Promise<Installed> {
  const proto = KINDS[kind].protocol;
  const ns = (args: string[], input?: string): string => run('ip', ['netns', 'exec', gw, ...args], input);
  if (path === 'static' || path === 'route') {
    ns(['ip', 'route', 'replace', 'default', 'via', ENGINE, 'dev', 'e1', 'table', '200']);
    ns([
      'ip',
      'rule',
      'add',
      'iif',
      'c0',
      'ipproto',
      proto,
      'dport',
      String(SERVICE_PORT),
      'lookup',
      '200',
      'priority',
      '200',
    ]);
    if (path === 'static')
      ns(
        ['nft', '-f', '-'],
        'table inet pcbench_ct {\n chain forward {\n  type filter hook forward priority filter; policy accept;\n' +
          '  ct state new counter\n }\n}\n',
      );
    return {
      remove: async () => {
        ns(['ip', 'rule', 'del', 'priority', '200']);
        ns(['ip', 'route', 'flush', 'table', '200']);
        if (path === 'static') ns(['nft', 'delete', 'table', 'inet', 'pcbench_ct']);
      },
    };
  }
  const create =
    path === 'ingress-alt'
      ? ((await import(join(alt ?? '', 'src/dataplane/index.ts'))) as { createRedirector: typeof createRedirector })
          .createRedirector
      : createRedirector;
  const r: Redirector =
    path === 'ingress' || path === 'ingress-alt'
      ? create('ingress', { ingress: { netns: gw } })
      : create('nft', {
          nft: { netns: gw, ...(path === 'nft-untracked' ? { conntrack: 'services' as const } : {}) },
        });
  await r.start();
  // bench/dataplane's service, on the flood's port.
  await r.apply({ ...benchService(ENGINE), protocol: proto === 'tcp' ? 6 : 17, ports: [SERVICE_PORT] });
  return { remove: () => r.stop() };
}

function txPackets(gw: string, dev: string): number {
  const line = run('ip', ['netns', 'exec', gw, 'cat', '/proc/net/dev'])
    .split('\n')
    .find((l) => l.trim().startsWith(`${dev}:`));
  const f = line?.trim().split(/\s+/);
  return Number(f?.[10] ?? NaN);
}

interface Cost {
  total: number;
  nft: number;
  fib: number;
  conntrack: number;
  kworker: number;
}

const GROUPS: readonly [keyof Cost, RegExp][] = [
  ['nft', /^(nft_|__nft|nf_tables)/],
  ['fib', /^(fib_|__fib|fib4_|ip_route_input|ip_mkroute)/],
  ['conntrack', /^(nf_conntrack|__nf_conntrack|nf_ct_|__nf_ct|hash_conntrack|nf_confirm)/],
];

/** ns per packet by group, from `perf report --sort comm,sym -n` lines of one comm. */
function costOf(report: string, comm: string, packets: number): Cost {
  const c: Cost = { total: 0, nft: 0, fib: 0, conntrack: 0, kworker: 0 };
  for (const line of report.split('\n')) {
    const m = /^\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[[k.]\]\s+(\S+)/.exec(line);
    if (m === null || m[2] !== comm) continue;
    const n = Number(m[1]);
    c.total += n;
    for (const [g, re] of GROUPS) if (re.test(m[3] ?? '')) c[g] += n;
  }
  const f = PERF_PERIOD_NS / packets;
  return { total: c.total * f, nft: c.nft * f, fib: c.fib * f, conntrack: c.conntrack * f, kworker: 0 };
}

/** ns of the kernel's workers (`kworker/...`: set garbage collection, rehashing, frees) per packet given. */
function kworkerOf(report: string, packets: number): number {
  let n = 0;
  for (const line of report.split('\n')) {
    const m = /^\s*[\d.]+%\s+(\d+)\s+(kworker\S*)\s/.exec(line);
    if (m !== null) n += Number(m[1]);
  }
  return (n * PERF_PERIOD_NS) / packets;
}

/** Paths whose kernel work includes dynamic sets (or conntrack) collected and grown by workers. */
const hasWorkers = (p: PathKey): boolean => p !== 'route';

interface Lab {
  readonly id: string;
  readonly flood: string;
  readonly comm: string;
}

/** Both labs flooded at once, each with its own path; the ns per packet of each. */
async function measurePair(
  labs: readonly [Lab, Lab],
  paths: readonly [PathKey, PathKey],
  kind: Kind,
  s: Settings,
  dir: string,
): Promise<[Cost, Cost]> {
  const installed: Installed[] = [];
  try {
    for (let i = 0; i < 2; i++) installed.push(await install(paths[i] as PathKey, `${labs[i]?.id}-g`, kind, s.alt));
    const dev = kind === 'unrelated' ? 'o0' : 'e1';
    const port = kind === 'unrelated' ? OTHER_PORT : SERVICE_PORT;
    const flows = KINDS[kind].flows;
    const before = labs.map((l) => txPackets(`${l.id}-g`, dev));
    const data = join(dir, 'perf.data');
    const floods = labs
      .map((l) => `ip netns exec ${l.id}-c ${l.flood} ${TARGET} ${port} ${s.packets} ${flows} >/dev/null &`)
      .join(' ');
    const p = spawnSync(
      'perf',
      [
        'record',
        '-q',
        '-a',
        '-e',
        'cpu-clock',
        '-c',
        String(PERF_PERIOD_NS),
        '-o',
        data,
        '--',
        'bash',
        '-c',
        `${floods} wait`,
      ],
      { encoding: 'utf8', timeout: 600_000 },
    );
    if (p.status !== 0) throw new BenchError(`perf record failed: ${p.stderr}`);
    const sent = labs.map((l, i) => txPackets(`${l.id}-g`, dev) - (before[i] ?? 0));
    const report = run('perf', ['report', '-i', data, '--no-children', '--sort', 'comm,sym', '-q', '--stdio', '-n']);
    rmSync(data, { force: true });
    if (process.env.PC_DUMP !== undefined)
      for (const l of [...labs, { comm: 'kworker' }])
        console.error(
          report
            .split('\n')
            .filter((x) => x.includes(l.comm))
            .slice(0, 40)
            .join('\n'),
        );
    const costs: [Cost, Cost] = [
      costOf(report, labs[0].comm, sent[0] ?? 0),
      costOf(report, labs[1].comm, sent[1] ?? 0),
    ];
    // The workers' time, to the lab(s) whose path has dynamic sets (split by packets when both have).
    const owners = [0, 1].filter((i) => hasWorkers(paths[i] as PathKey));
    const packetsOfOwners = owners.reduce((a, i) => a + (sent[i] ?? 0), 0);
    for (const i of owners) costs[i as 0 | 1].kworker = kworkerOf(report, packetsOfOwners);
    const unit = perUnit(kind);
    for (const c of costs) for (const g of Object.keys(c) as (keyof Cost)[]) c[g] *= unit;
    return costs;
  } finally {
    for (const i of installed) await i.remove().catch(() => undefined);
  }
}

const median = (v: readonly number[]): number => {
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? (s[m] ?? NaN) : ((s[m - 1] ?? NaN) + (s[m] ?? NaN)) / 2;
};

async function main(): Promise<void> {
  const s = parseArgs(process.argv.slice(2));
  if (process.getuid?.() !== 0) throw new BenchError('bench/packet-cost needs root (namespaces, nft, perf -a)');
  for (const tool of ['perf', 'gcc', 'nft', 'ip'])
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) throw new BenchError(`missing tool: ${tool}`);
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-packet-cost-'));
  const src = fileURLToPath(new URL('./packet-cost-flood.c', import.meta.url));
  run('gcc', ['-O2', '-o', join(dir, 'flood'), src]);
  // Two copies under two names: perf tells the two labs' work apart by the sender's command name.
  const labs = (['a', 'b'] as const).map((x) => {
    const flood = join(dir, `pcflood-${x}`);
    copyFileSync(join(dir, 'flood'), flood);
    return { id: `wl-${process.pid}-pc${x}`, flood, comm: `pcflood-${x}` };
  }) as [Lab, Lab];
  const cleanup = (): void => {
    for (const l of labs) labDown(l.id);
    rmSync(dir, { recursive: true, force: true });
  };
  cleanUpOnClosedOutput(CLI, cleanup);
  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const) {
    process.on(signal, () => {
      cleanup();
      process.exit(code);
    });
  }
  const lines: string[] = [];
  try {
    for (const l of labs) labUp(l.id);
    for (const kind of s.kinds) {
      for (const [a, b] of s.pairs) {
        const diffs: Record<keyof Cost, number[]> = { total: [], nft: [], fib: [], conntrack: [], kworker: [] };
        const of: Record<string, Cost[]> = { [a]: [], [b]: [] };
        for (let r = 0; r < s.rounds; r++) {
          // The same pair twice, the labs swapped: a difference between the labs themselves cancels out.
          for (const swap of [false, true]) {
            const order: [PathKey, PathKey] = swap ? [b, a] : [a, b];
            const [x, y] = await measurePair(labs, order, kind, s, dir);
            const ca = swap ? y : x;
            const cb = swap ? x : y;
            of[a]?.push(ca);
            of[b]?.push(cb);
            for (const g of Object.keys(diffs) as (keyof Cost)[]) diffs[g].push(ca[g] - cb[g]);
            console.error(
              `${kind} ${a} vs ${b}, round ${r + 1}${swap ? ' (labs swapped)' : ''}: nft ${ca.nft.toFixed(0)} / ` +
                `${cb.nft.toFixed(0)}, kworker ${ca.kworker.toFixed(0)} / ${cb.kworker.toFixed(0)}, total ` +
                `${ca.total.toFixed(0)} / ${cb.total.toFixed(0)} ns per ${kind === 'tcp' ? 'connection' : 'packet'}`,
            );
          }
        }
        const GROUPS_SHOWN = ['nft', 'fib', 'conntrack', 'kworker', 'total'] as const;
        const row = (k: string, c: readonly Cost[]): string =>
          `| ${kind} | ${k} | ${GROUPS_SHOWN.map((g) => median(c.map((x) => x[g])).toFixed(0)).join(' | ')} |`;
        lines.push(row(a, of[a] ?? []), row(b, of[b] ?? []));
        lines.push(
          `| ${kind} | ${a} - ${b}, median of ${diffs.nft.length} paired differences | ` +
            `${GROUPS_SHOWN.map((g) => `${median(diffs[g]) >= 0 ? '+' : ''}${median(diffs[g]).toFixed(0)} (${Math.min(...diffs[g]).toFixed(0)}..${Math.max(...diffs[g]).toFixed(0)})`).join(' | ')} |`,
        );
      }
    }
  } finally {
    cleanup();
  }
  console.log(
    `# bench/packet-cost, ${new Date().toISOString()}: ${s.packets} packets per path and run (UDP, ${FLOWS} flows; ` +
      `new: a UDP flow each; tcp: a connection per 4 packets, figures per connection; acks: 4 TCP flows; churn: one 4-tuple), ` +
      `${s.rounds} rounds x 2 ` +
      `(labs swapped); perf cpu-clock every ${PERF_PERIOD_NS / 1000} us in the senders' context (kworker: system-wide)\n`,
  );
  console.log(
    '| packets | path | nft ns/packet | FIB + policy routing | conntrack | kworker | all (sender + forwarding) |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const l of lines) console.log(l);
}

main().catch((e: unknown) => {
  console.error(e instanceof BenchError ? `bench/packet-cost: ${e.message}` : e);
  process.exit(1);
});
