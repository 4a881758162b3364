// The paths the data-path bench compares, each installed in the lab's gateway before a measurement and removed after:
// direct (no redirection), a static policy route to engine 1 (the ceiling for L2 redirection), our ingress, nft and
// userland backends, each with a table that gives all 256 buckets to that same engine 1. The IPv6 paths (key ending
// in 6) are the same for IPv6 connections, in a dual-stack lab: the static route with ip -6, the backends with a
// service of both families.
import { fileURLToPath } from 'node:url';
import type { Lab, LabProcess } from '../test/lab/lab.js';
import { createRedirector } from '../src/dataplane/index.js';
import type { Redirector, ServiceRedirect } from '../src/dataplane/redirector.js';
import { BenchError } from './dataplane-measure.js';

export type PathKey =
  | 'direct'
  | 'static'
  | 'static-ct'
  | 'nft'
  | 'nft-untracked'
  | 'userland'
  | 'ingress'
  | 'direct-twin'
  | 'static-twin'
  | 'direct6'
  | 'static6'
  | 'static6-ct'
  | 'nft6'
  | 'ingress6';

/** The IPv6 paths: their traffic goes to the origin's IPv6 address. */
export const IPV6_PATHS: readonly PathKey[] = ['direct6', 'static6', 'static6-ct', 'nft6', 'ingress6'];

export interface DataPath {
  readonly key: PathKey;
  /** The lab whose gateway the path is installed in (and whose client and servers measure it). */
  readonly lab: Lab;
  readonly label: string;
  /** The family of the connections measured on it (the origin's IPv4 or IPv6 address); absent: 4. */
  readonly family?: 4 | 6;
  /** Who must answer on this path (the X-Served-By of the nginx that serves). */
  readonly servedBy: string;
  install(): Promise<void>;
  remove(): Promise<void>;
  /** Facts gathered while installed (counters), for the report. */
  notes(): string[];
}

/**
 * A dynamic service group for TCP 80 (HTTP) and 5201 (iperf3), hashed on the destination address, L2 forwarding;
 * `ipv6`: redirecting both families.
 */
export function benchService(engine: string, ipv6 = false): ServiceRedirect {
  return {
    ...(ipv6 ? { families: ['ipv4', 'ipv6'] as const } : {}),
    serviceId: 90,
    protocol: 6,
    ports: [80, 5201],
    portsAreSource: false,
    serviceFlags: 0x2,
    priority: 0,
    forwarding: 'l2',
    failMode: 'open',
    clientInterfaces: ['c0'],
    engines: [engine],
    table: { changeNumber: 1, buckets: new Array<string>(256).fill(engine) },
  };
}

export function directPath(lab: Lab, twin = false, ipv6 = false): DataPath {
  return {
    key: ipv6 ? 'direct6' : twin ? 'direct-twin' : 'direct',
    lab,
    label: ipv6 ? 'direct (no wccpd), IPv6' : twin ? 'direct, twin lab (A/A)' : 'direct (no wccpd)',
    family: ipv6 ? 6 : 4,
    servedBy: 'origin',
    install: async () => {},
    remove: async () => {},
    notes: () => [],
  };
}

/**
 * `ip rule iif c0 ipproto tcp dport {80,5201} lookup 200`, table 200 = default via the engine. `twin`: the same in a
 * lab of its own (an A/A check of the lab arrangement: static-twin / static should be 1.00). `ipv6`: the same with
 * `ip -6` (IPv6 rules and tables are the kernel's other set: an IPv4 packet never walks them).
 */
export function staticPath(lab: Lab, ports: readonly number[], twin = false, ipv6 = false): DataPath {
  const engine = ipv6 ? lab.engineAddress6(1) : lab.engineAddress(1);
  const ip = (args: string[], allowFail = false) =>
    lab.exec(lab.ns.gw, 'ip', [...(ipv6 ? ['-6'] : []), ...args], { allowFail });
  const rule = (op: string, port: number): string[] => [
    'rule',
    op,
    'iif',
    'c0',
    'ipproto',
    'tcp',
    'dport',
    String(port),
    'lookup',
    '200',
    'priority',
    '200',
  ];
  return {
    key: ipv6 ? 'static6' : twin ? 'static-twin' : 'static',
    lab,
    label: ipv6
      ? 'static redirect (ip -6 rule), IPv6'
      : twin
        ? 'static redirect, twin lab (A/A)'
        : 'static redirect (ip rule)',
    family: ipv6 ? 6 : 4,
    servedBy: 'engine1',
    async install() {
      await ip(['route', 'replace', 'default', 'via', engine, 'dev', 'br-eng', 'table', '200']);
      for (const p of ports) await ip(rule('add', p));
    },
    async remove() {
      for (const p of ports) await ip(rule('del', p), true);
      await ip(['route', 'flush', 'table', '200'], true);
    },
    notes: () => [],
  };
}

/**
 * The static redirect with conntrack switched on in the gateway (one nft rule that matches on ct state). Conntrack is
 * what gives wccpd stickiness, and a namespace has none until some rule needs it: this row splits the cost of
 * conntrack from the cost of classifying by bucket.
 */
export function staticConntrackPath(lab: Lab, ports: readonly number[], ipv6 = false): DataPath {
  const inner = staticPath(lab, ports, false, ipv6);
  const table = 'table inet wccpbench_ct';
  return {
    ...inner,
    key: ipv6 ? 'static6-ct' : 'static-ct',
    label: ipv6 ? 'static redirect + conntrack, IPv6' : 'static redirect + conntrack',
    async install() {
      await lab.exec(lab.ns.gw, 'nft', ['-f', '-'], {
        input:
          `${table} {\n chain forward {\n  type filter hook forward priority filter; policy accept;\n` +
          '  ct state new counter\n }\n}\n',
      });
      await inner.install();
    },
    async remove() {
      await inner.remove();
      await lab.exec(lab.ns.gw, 'nft', ['delete', 'table', 'inet', 'wccpbench_ct'], { allowFail: true });
    },
  };
}

/**
 * wccpd's nft backend; `untracked`: with `dataplane.conntrack: services`, so traffic no service can claim skips
 * conntrack.
 */
export function nftPath(lab: Lab, untracked = false, ipv6 = false): DataPath {
  return kernelPath(
    lab,
    ipv6 ? 'nft6' : untracked ? 'nft-untracked' : 'nft',
    ipv6
      ? 'nft redirect (wccpd), IPv6'
      : untracked
        ? 'nft redirect (wccpd, conntrack: services)'
        : 'nft redirect (wccpd)',
    () =>
      createRedirector('nft', {
        nft: { netns: lab.ns.gw, ...(untracked ? { conntrack: 'services' as const } : {}) },
      }),
    ipv6,
  );
}

/**
 * wccpd's ingress backend: nftables in the client interface's netdev ingress hook hands the frame to the engine (no
 * conntrack, no ip rule); its lab's gateway never had a policy rule, like a gateway that runs it.
 */
export function ingressPath(lab: Lab, ipv6 = false): DataPath {
  return kernelPath(
    lab,
    ipv6 ? 'ingress6' : 'ingress',
    ipv6 ? 'ingress redirect (wccpd), IPv6' : 'ingress redirect (wccpd)',
    () => createRedirector('ingress', { ingress: { netns: lab.ns.gw } }),
    ipv6,
  );
}

/**
 * A kernel backend made anew at each install with the bench service (of both families for an IPv6 path), its engine-1
 * counter summed over installs.
 */
function kernelPath(lab: Lab, key: PathKey, label: string, make: () => Redirector, ipv6 = false): DataPath {
  let redirector: Redirector | null = null;
  let counted = 0;
  let installs = 0;
  const service = benchService(lab.engineAddress(1), ipv6);
  return {
    key,
    lab,
    label,
    family: ipv6 ? 6 : 4,
    servedBy: 'engine1',
    async install() {
      installs++;
      redirector = make();
      await redirector.start();
      await redirector.apply(service);
    },
    async remove() {
      const r = redirector;
      redirector = null;
      if (r === null) return;
      try {
        const c = await r.counters();
        const e = c.engines.get(service.serviceId)?.get(lab.engineAddress(1));
        if (e !== undefined) counted += e.packets;
      } finally {
        await r.stop();
      }
    },
    notes: () =>
      installs > 0 ? [`${key.split('-')[0]} counted ${counted} packets to engine 1 over ${installs} installs`] : [],
  };
}

const USERLAND_HELPER = fileURLToPath(new URL('./dataplane-userland.ts', import.meta.url));

interface HelperLine {
  ready?: boolean;
  native?: boolean | null;
  reason?: string;
  stopped?: boolean;
  engines?: Record<string, { packets: number }>;
  bypassed?: number;
  sendErrors?: number;
  segmented?: number;
  segments?: number;
  oversizeDropped?: number;
}

/**
 * The userland backend runs in its own Node process inside the gateway namespace (pcap captures there). Not pinned:
 * both CPUs are taken by the load tool and the servers, and it is the gateway's work, like the kernel's softirqs.
 */
export function userlandPath(lab: Lab): DataPath {
  let helper: LabProcess | null = null;
  const total = { sent: 0, sendErrors: 0, bypassed: 0, segmented: 0, segments: 0, oversizeDropped: 0, runs: 0 };
  let silent = 0;
  const service = benchService(lab.engineAddress(1));
  return {
    key: 'userland',
    lab,
    label: 'userland redirect (wccpd)',
    family: 4,
    servedBy: 'engine1',
    async install() {
      // WCCPD_BENCH_CPU_PROF=<dir>: the forwarder writes a V8 CPU profile there when it stops (docs/userland.md).
      const prof = process.env.WCCPD_BENCH_CPU_PROF;
      const profArgs = prof !== undefined && prof !== '' ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : [];
      const p = lab.spawn(lab.ns.gw, process.execPath, [
        ...profArgs,
        '--import',
        'tsx',
        USERLAND_HELPER,
        JSON.stringify(service),
      ]);
      helper = p;
      const line = await p.waitForLine((l) => l.startsWith('{'), 20_000);
      const j = JSON.parse(line) as HelperLine;
      if (j.ready !== true) {
        await p.stop(2000);
        helper = null;
        throw new BenchError(`userland backend did not start: ${j.reason ?? line}`);
      }
    },
    async remove() {
      const p = helper;
      helper = null;
      if (p === null) return;
      await p.stop(5000);
      const last = [...p.lines()].reverse().find((l) => l.includes('"stopped"'));
      if (last === undefined) {
        silent++;
        return;
      }
      const j = JSON.parse(last) as HelperLine;
      total.sent += j.engines?.[lab.engineAddress(1)]?.packets ?? 0;
      total.sendErrors += j.sendErrors ?? 0;
      total.bypassed += j.bypassed ?? 0;
      total.segmented += j.segmented ?? 0;
      total.segments += j.segments ?? 0;
      total.oversizeDropped += j.oversizeDropped ?? 0;
      total.runs++;
    },
    notes: () => [
      ...(total.runs > 0
        ? [
            `userland sent ${total.sent} packets to engine 1 over ${total.runs} runs, send errors ${total.sendErrors}, ` +
              `bypassed ${total.bypassed}, super-frames segmented ${total.segmented} into ${total.segments}, ` +
              `oversize dropped ${total.oversizeDropped}`,
          ]
        : []),
      ...(silent > 0 ? [`userland helper printed no stats at stop in ${silent} runs`] : []),
    ],
  };
}
