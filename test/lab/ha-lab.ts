// The gateway-pair lab (docs/ha.md, docs/lab.md): a client, two gateway namespaces (a, b) in front of one farm of
// Debian Squid engines and one origin, wired through a switch namespace that holds the three segments' bridges, and a
// dedicated sync link between the two gateways. Each gateway runs keepalived (VRRP moves the three gateway addresses),
// conntrackd (FTFW over the sync link) and wccpd; the configs are rendered from test/lab/ha/ (shown in docs/ha.md).
//
//   client 203.0.113.10 --[sw-c]-- c0: a 203.0.113.2, b .3, VRRP 203.0.113.1   (clients' default route)
//   engines 192.0.2.1i --[sw-e]-- e0: a 192.0.2.2,    b .3, VRRP 192.0.2.1     (engines' default route, WCCP routers)
//   origin 203.0.113.254 -[sw-o]- o0: a 203.0.113.130, b .131, VRRP 203.0.113.129 (origin's route back)
//   a sync0 192.0.2.253 ---------- b sync0 192.0.2.254                         (conntrackd, the peers' admin APIs)
//
// The origin answers on all of 198.51.100.0/24 (one address per WCCP bucket), routed by both gateways to .254.
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ORIGIN_PREFIX, engineAddress } from './addresses.js';
import { LabError } from './errors.js';
import { labHousekeeping } from './housekeeping.js';
import { run, sleep, waitGone, type RunOptions, type RunResult } from './proc.js';
import type { LabProcess } from './process.js';
import { renderSquidConf } from './squid.js';

export const HA_CLIENT = '203.0.113.10';
export const HA_ORIGIN = '203.0.113.254';
export const HA_ENGINE_PREFIX = '192.0.2.0/25';
export const HA_VIP = { client: '203.0.113.1', engine: '192.0.2.1', upstream: '203.0.113.129' } as const;

export type GatewayName = 'a' | 'b';

export interface GatewayAddresses {
  readonly client: string;
  /** The gateway's own address on the engines' segment: its WCCP router address. */
  readonly engine: string;
  readonly upstream: string;
  readonly sync: string;
}

export const HA_GATEWAYS: Readonly<Record<GatewayName, GatewayAddresses>> = {
  a: { client: '203.0.113.2', engine: '192.0.2.2', upstream: '203.0.113.130', sync: '192.0.2.253' },
  b: { client: '203.0.113.3', engine: '192.0.2.3', upstream: '203.0.113.131', sync: '192.0.2.254' },
};

export const ADMIN_PORT = 8080;
export const HA_TOKEN = `ha-${process.pid}`;
const HA_DIR = fileURLToPath(new URL('./ha/', import.meta.url));
export const NOTIFY_SCRIPT = join(HA_DIR, 'wccpd-ha-notify');
const ORIGIN_SERVER = fileURLToPath(new URL('./origin-server.mjs', import.meta.url));
const SQUID = '/usr/sbin/squid';
const peerOf = (g: GatewayName): GatewayName => (g === 'a' ? 'b' : 'a');

/** Paths a gateway's keepalived and conntrackd use (per gateway in the lab; Debian's defaults in docs/ha.md). */
export interface HaPaths {
  readonly notify: string;
  readonly conntrackdConf: string;
  readonly conntrackdLog: string;
  readonly conntrackdLock: string;
  readonly conntrackdSocket: string;
}

function fill(template: string, values: Record<string, string>): string {
  return readFileSync(join(HA_DIR, template), 'utf8').replace(/\{\{([A-Z_]+)\}\}/g, (_, key: string) => {
    const v = values[key];
    if (v === undefined) throw new Error(`${template}: unknown placeholder {{${key}}}`);
    return v;
  });
}

/** keepalived.conf of gateway g (a has the higher priority and wins the first election). */
export function renderKeepalivedConf(g: GatewayName, paths: HaPaths): string {
  return fill('keepalived.conf.tmpl', {
    NAME: `wccpd-${g}`,
    PRIORITY: g === 'a' ? '150' : '100',
    CLIENT_IF: 'c0',
    ENGINE_IF: 'e0',
    UPSTREAM_IF: 'o0',
    CLIENT_VIP: `${HA_VIP.client}/25`,
    ENGINE_VIP: `${HA_VIP.engine}/25`,
    UPSTREAM_VIP: `${HA_VIP.upstream}/25`,
    NOTIFY: paths.notify,
    CONNTRACKD_CONF: paths.conntrackdConf,
  });
}

/** conntrackd.conf of gateway g. */
export function renderConntrackdConf(g: GatewayName, paths: HaPaths): string {
  const own = HA_GATEWAYS[g];
  const addresses = [own.client, own.engine, own.upstream, own.sync, HA_VIP.client, HA_VIP.engine, HA_VIP.upstream];
  return fill('conntrackd.conf.tmpl', {
    SYNC_SELF: own.sync,
    SYNC_PEER: HA_GATEWAYS[peerOf(g)].sync,
    SYNC_IF: 'sync0',
    LOG_FILE: paths.conntrackdLog,
    LOCK_FILE: paths.conntrackdLock,
    SOCKET: paths.conntrackdSocket,
    OWN_ADDRESSES: addresses.map((a) => `            IPv4_address ${a}`).join('\n'),
  });
}

/** wccpd.yaml of gateway g: mode consistent, the peer under `peers`, the admin API on the sync link. */
export function renderWccpdConf(g: GatewayName, stateDir: string, token = HA_TOKEN): string {
  const own = HA_GATEWAYS[g];
  const peer = HA_GATEWAYS[peerOf(g)];
  return [
    'router:',
    `  address: ${own.engine}`,
    'admin:',
    `  listen: ${own.sync}:${ADMIN_PORT}`,
    `  token: ${token}`,
    `stateDir: ${stateDir}`,
    'dataplane:',
    '  backend: nft',
    'peers:',
    `  - { address: ${peer.engine}, api: "http://${peer.sync}:${ADMIN_PORT}" }`,
    'services:',
    '  - id: 0',
    '    mode: consistent',
    '    clientInterfaces: [c0]',
    '    engines:',
    `      allow: [${HA_ENGINE_PREFIX}]`,
    '',
  ].join('\n');
}

export interface HaNamespaces {
  client: string;
  sw: string;
  origin: string;
  gw: Readonly<Record<GatewayName, string>>;
  engine: Readonly<Record<number, string>>;
}

export interface Gateway {
  readonly name: GatewayName;
  readonly ns: string;
  readonly dir: string;
  readonly addresses: GatewayAddresses;
  readonly api: string;
  keepalived?: LabProcess;
  conntrackd?: LabProcess;
  wccpd?: LabProcess;
}

export interface HaLab {
  readonly id: string;
  readonly dir: string;
  readonly ns: HaNamespaces;
  readonly gw: Readonly<Record<GatewayName, Gateway>>;
  exec(ns: string, cmd: string, args: readonly string[], opts?: RunOptions): Promise<RunResult>;
  spawn(ns: string, cmd: string, args: readonly string[]): LabProcess;
  startOrigin(): Promise<LabProcess>;
  /** Squid in engine i, registering with both gateways (one wccp2_router line each). */
  startSquid(i: number): Promise<LabProcess>;
  /** SIGKILL of engine i's Squid (a crash), resolved once it is gone. */
  killSquid(i: number): Promise<void>;
  /** conntrackd, then keepalived (VRRP), in gateway g. */
  startHa(g: GatewayName): Promise<void>;
  /** wccpd in gateway g (tsx over src/cli/wccpd.ts), resolved once its API answers. */
  startWccpd(g: GatewayName, command: readonly string[]): Promise<LabProcess>;
  /** The gateway fails: every link of it goes down at once (client, engine, upstream sides and the sync link). */
  failGateway(g: GatewayName): Promise<void>;
  /** Which gateway holds the clients' gateway address now (null: neither). */
  vipHolder(): Promise<GatewayName | null>;
  destroy(): Promise<void>;
}

let counter = 0;

export interface HaLabOptions {
  engines: number;
  name?: string;
  /**
   * keepalived runs the notify script this long after each state change (a wrapper sleeps, then runs the real one): a
   * backup that holds the addresses before its script has run, as on a loaded box. Connections must not depend on
   * the script's timing (docs/ha.md, "When the master fails").
   */
  notifyDelayMs?: number;
}

export async function createHaLab(opts: HaLabOptions): Promise<HaLab> {
  if (!Number.isInteger(opts.engines) || opts.engines < 1 || opts.engines > 9) {
    throw new RangeError(`createHaLab: engines must be 1..9, got ${opts.engines}`);
  }
  if (userInfo().uid !== 0) throw new LabError('createHaLab: the lab needs root (network namespaces, nft)');
  const tag = opts.name ?? `ha${++counter}`;
  const id = `wl-${process.pid}-${tag}`;
  const engineNames: Record<number, string> = {};
  for (let i = 1; i <= opts.engines; i++) engineNames[i] = `${id}-engine${i}`;
  const ns: HaNamespaces = {
    client: `${id}-client`,
    sw: `${id}-sw`,
    origin: `${id}-origin`,
    gw: { a: `${id}-gwa`, b: `${id}-gwb` },
    engine: engineNames,
  };
  const allNs = [ns.client, ns.sw, ns.origin, ns.gw.a, ns.gw.b, ...Object.values(engineNames)];
  const dir = mkdtempSync(join(tmpdir(), `wccplab-${process.pid}-${tag}-`));
  chmodSync(dir, 0o755);
  const house = labHousekeeping(allNs, dir);
  const { squids } = house;

  const gw: Record<GatewayName, Gateway> = {
    a: {
      name: 'a',
      ns: ns.gw.a,
      dir: join(dir, 'gwa'),
      addresses: HA_GATEWAYS.a,
      api: `http://${HA_GATEWAYS.a.sync}:${ADMIN_PORT}`,
    },
    b: {
      name: 'b',
      ns: ns.gw.b,
      dir: join(dir, 'gwb'),
      addresses: HA_GATEWAYS.b,
      api: `http://${HA_GATEWAYS.b.sync}:${ADMIN_PORT}`,
    },
  };
  for (const g of Object.values(gw)) mkdirSync(g.dir, { recursive: true });

  const exec = (n: string, cmd: string, args: readonly string[], o?: RunOptions): Promise<RunResult> =>
    run('ip', ['netns', 'exec', n, cmd, ...args], o);
  const batch = (n: string, lines: readonly string[]): Promise<RunResult> =>
    run('ip', ['-n', n, '-batch', '-'], { input: lines.join('\n') + '\n' });
  const spawn = (n: string, cmd: string, args: readonly string[]): LabProcess => house.spawn(n, cmd, args);

  async function destroy(): Promise<void> {
    await house.teardown({ graceMs: 2000, goneMs: 3000 });
  }

  const paths = (g: Gateway): HaPaths => ({
    notify: opts.notifyDelayMs === undefined ? NOTIFY_SCRIPT : join(g.dir, 'wccpd-ha-notify-late'),
    conntrackdConf: join(g.dir, 'conntrackd.conf'),
    conntrackdLog: join(g.dir, 'conntrackd.log'),
    conntrackdLock: join(g.dir, 'conntrackd.lock'),
    conntrackdSocket: join(g.dir, 'conntrackd.ctl'),
  });

  try {
    for (const n of allNs) {
      mkdirSync(`/etc/netns/${n}`, { recursive: true });
      writeFileSync(`/etc/netns/${n}/resolv.conf`, 'nameserver 127.0.0.1\n');
      await run('ip', ['netns', 'add', n]);
    }
    // The switch: three bridges, out of the IP hooks where br_netfilter is loaded (test/lab/lab.ts says why).
    if (existsSync('/proc/sys/net/bridge/bridge-nf-call-iptables')) {
      await exec(ns.sw, 'sysctl', [
        '-q',
        '-w',
        'net.bridge.bridge-nf-call-iptables=0',
        'net.bridge.bridge-nf-call-ip6tables=0',
        'net.bridge.bridge-nf-call-arptables=0',
      ]);
    }
    const sw = ['link set lo up'];
    for (const br of ['sw-c', 'sw-e', 'sw-o']) sw.push(`link add ${br} type bridge`, `link set ${br} up`);
    const port = (name: string, br: string, peer: string, peerNs: string): void => {
      sw.push(
        `link add ${name} type veth peer name ${peer} netns ${peerNs}`,
        `link set ${name} master ${br}`,
        `link set ${name} up`,
      );
    };
    port('x-cl', 'sw-c', 'eth0', ns.client);
    port('x-or', 'sw-o', 'eth0', ns.origin);
    for (const g of ['a', 'b'] as const) {
      port(`x-c${g}`, 'sw-c', 'c0', ns.gw[g]);
      port(`x-e${g}`, 'sw-e', 'e0', ns.gw[g]);
      port(`x-o${g}`, 'sw-o', 'o0', ns.gw[g]);
    }
    for (let i = 1; i <= opts.engines; i++) port(`x-en${i}`, 'sw-e', 'eth0', engineNames[i] ?? '');
    await batch(ns.sw, sw);
    await batch(ns.gw.a, [`link add sync0 type veth peer name sync0 netns ${ns.gw.b}`]);
    for (const g of ['a', 'b'] as const) {
      const a = HA_GATEWAYS[g];
      await exec(ns.gw[g], 'sysctl', [
        '-q',
        '-w',
        'net.ipv4.ip_forward=1',
        'net.ipv4.conf.all.rp_filter=0',
        'net.ipv4.conf.default.rp_filter=0',
        'net.ipv4.conf.all.send_redirects=0',
        'net.ipv4.conf.default.send_redirects=0',
      ]);
      await batch(ns.gw[g], [
        'link set lo up',
        `addr add ${a.client}/25 dev c0`,
        'link set c0 up',
        `addr add ${a.engine}/25 dev e0`,
        'link set e0 up',
        `addr add ${a.upstream}/25 dev o0`,
        'link set o0 up',
        `addr add ${a.sync}/30 dev sync0`,
        'link set sync0 up',
        `route add ${ORIGIN_PREFIX} via ${HA_ORIGIN} dev o0`,
      ]);
    }
    await batch(ns.client, [
      'link set lo up',
      `addr add ${HA_CLIENT}/25 dev eth0`,
      'link set eth0 up',
      `route add default via ${HA_VIP.client}`,
    ]);
    await batch(ns.origin, [
      'link set lo up',
      `addr add ${HA_ORIGIN}/25 dev eth0`,
      'link set eth0 up',
      `route add local ${ORIGIN_PREFIX} dev lo`,
      `route add default via ${HA_VIP.upstream}`,
    ]);
    for (let i = 1; i <= opts.engines; i++) {
      const n = engineNames[i] ?? '';
      await batch(n, [
        'link set lo up',
        `addr add ${engineAddress(i)}/25 dev eth0`,
        'link set eth0 up',
        `route add default via ${HA_VIP.engine}`,
      ]);
      await run('ip', ['netns', 'exec', n, 'nft', '-f', '-'], {
        input:
          `table ip wccplab {\n chain prerouting {\n  type nat hook prerouting priority dstnat; policy accept;\n` +
          `  iifname "eth0" ip saddr != ${HA_ENGINE_PREFIX} tcp dport 80 redirect to :3129\n }\n}\n`,
      });
    }
  } catch (e) {
    await destroy().catch(() => undefined);
    throw e;
  }

  const lab: HaLab = {
    id,
    dir,
    ns,
    gw,
    exec,
    spawn,
    destroy,
    async startOrigin() {
      const p = spawn(ns.origin, process.execPath, [ORIGIN_SERVER, '80']);
      await p.waitForLine((l) => l.startsWith('listening'), 5000);
      return p;
    },
    async startSquid(i) {
      const n = engineNames[i];
      if (n === undefined) throw new RangeError(`engine ${i} does not exist`);
      const d = join(dir, `engine${i}`);
      rmSync(d, { recursive: true, force: true });
      mkdirSync(d, { recursive: true });
      const conf = join(d, 'squid.conf');
      writeFileSync(
        conf,
        renderSquidConf(`engine${i}`, d, { router: [HA_GATEWAYS.a.engine, HA_GATEWAYS.b.engine] }, HA_VIP.engine),
      );
      const proxy = readFileSync('/etc/passwd', 'utf8')
        .split('\n')
        .find((l) => l.startsWith('proxy:'))
        ?.split(':');
      if (!proxy || proxy.length < 4) throw new LabError('user "proxy" not found (is the squid package installed?)');
      chownSync(d, Number(proxy[2]), Number(proxy[3]));
      const p = spawn(n, SQUID, ['-N', '-f', conf, '-n', `${id.replace(/[^a-z0-9]/g, '')}e${i}`]);
      squids.set(i, p);
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline) {
        if (!p.running()) throw new LabError(`Squid in engine ${i} exited at start:\n${p.output()}`);
        const ss = await exec(n, 'ss', ['-Htln'], { allowFail: true, timeoutMs: 2000 });
        if (/:3128\b/.test(ss.stdout) && /:3129\b/.test(ss.stdout)) return p;
        await sleep(50);
      }
      throw new LabError(`Squid in engine ${i} did not listen on 3128/3129 within 10 s`);
    },
    async killSquid(i) {
      const p = squids.get(i);
      if (!p) return;
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
      if ((await waitGone([p.pid], 3000)).length > 0) throw new LabError(`Squid of engine ${i} survived SIGKILL`);
      squids.delete(i);
    },
    async startHa(name) {
      const g = gw[name];
      const p = paths(g);
      writeFileSync(p.conntrackdConf, renderConntrackdConf(name, p));
      if (opts.notifyDelayMs !== undefined) {
        // Root-owned, 0755, in a root-owned directory: keepalived's enable_script_security runs nothing else.
        const seconds = (opts.notifyDelayMs / 1000).toFixed(3);
        writeFileSync(p.notify, `#!/bin/sh\nsleep ${seconds}\nexec ${NOTIFY_SCRIPT} "$@"\n`, { mode: 0o755 });
      }
      const kconf = join(g.dir, 'keepalived.conf');
      writeFileSync(kconf, renderKeepalivedConf(name, p));
      g.conntrackd = spawn(g.ns, '/usr/sbin/conntrackd', ['-C', p.conntrackdConf]);
      const deadline = Date.now() + 10_000;
      // conntrackd answers on its UNIX socket once it runs (-s: statistics).
      for (;;) {
        if (!g.conntrackd.running())
          throw new LabError(
            `conntrackd in gateway ${name} exited:\n${g.conntrackd.output()}\n${tail(p.conntrackdLog)}`,
          );
        const r = await exec(g.ns, '/usr/sbin/conntrackd', ['-C', p.conntrackdConf, '-s'], {
          allowFail: true,
          timeoutMs: 3000,
        });
        if (r.code === 0) break;
        if (Date.now() > deadline)
          throw new LabError(`conntrackd in gateway ${name} does not answer -s: ${r.stderr}\n${tail(p.conntrackdLog)}`);
        await sleep(100);
      }
      // -n: no fork (this PID is keepalived's parent, which stops its VRRP child when it gets SIGTERM); -P: VRRP only;
      // own pid files, so the two gateways' keepalived never see each other as "already running".
      g.keepalived = spawn(g.ns, '/usr/sbin/keepalived', [
        '-n',
        '-l',
        '-D',
        '-P',
        '-f',
        kconf,
        '-p',
        join(g.dir, 'keepalived.pid'),
        '-r',
        join(g.dir, 'keepalived-vrrp.pid'),
        '-c',
        join(g.dir, 'keepalived-checkers.pid'),
        '-i',
        `wccpd-${name}`,
      ]);
    },
    async startWccpd(name, command) {
      const g = gw[name];
      const stateDir = join(g.dir, 'state');
      mkdirSync(stateDir, { recursive: true });
      const conf = join(g.dir, 'wccpd.yaml');
      writeFileSync(conf, renderWccpdConf(name, stateDir));
      const p = spawn(g.ns, process.execPath, [...command, '--config', conf]);
      g.wccpd = p;
      const deadline = Date.now() + 60_000;
      for (;;) {
        if (!p.running()) throw new LabError(`wccpd in gateway ${name} exited at start:\n${p.output().slice(-3000)}`);
        const r = await exec(
          g.ns,
          'curl',
          [
            '-s',
            '--noproxy',
            '*',
            '-o',
            '/dev/null',
            '-w',
            '%{http_code}',
            '--max-time',
            '10',
            `${g.api}/api/v1/services/0/buckets`,
          ],
          { allowFail: true, timeoutMs: 12_000 },
        );
        if (r.stdout === '200') return p;
        if (Date.now() > deadline)
          throw new LabError(`wccpd in gateway ${name}: no API on ${g.api} within 60 s:\n${p.output().slice(-3000)}`);
        await sleep(100);
      }
    },
    async failGateway(name) {
      await batch(ns.gw[name], ['link set c0 down', 'link set e0 down', 'link set o0 down', 'link set sync0 down']);
    },
    async vipHolder() {
      for (const name of ['a', 'b'] as const) {
        const r = await exec(ns.gw[name], 'ip', ['-4', '-o', 'addr', 'show', 'dev', 'c0'], {
          allowFail: true,
          timeoutMs: 3000,
        });
        if (r.stdout.includes(` ${HA_VIP.client}/`)) return name;
      }
      return null;
    },
  };
  return lab;
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').slice(-2000);
  } catch {
    return `(no ${file})`;
  }
}
