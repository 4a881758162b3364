// parseConfig: YAML text -> validated Config, or a ConfigError listing every problem (key, found, allowed, line).
import { LineCounter, parseDocument, isNode, type Document } from 'yaml';
import { ipv4ToNumber } from '../address.js';
import {
  CONNTRACK_SCOPES,
  DATAPLANE_BACKENDS,
  FLOWS_IDLE_DEFAULT_MS,
  FLOWS_IDLE_RANGE_MS,
  FLOWS_MAX_DEFAULT,
  FLOWS_MAX_RANGE,
} from '../dataplane/settings.js';
import { formatDuration, HOUR_MS } from '../duration.js';
import { sectionKeys } from './keys.js';
import { ConfigError, type ConfigProblem } from './config-error.js';
import { describe, formatKeyPath, Reader, type KeyPath, type RawProblem } from './reader.js';
import {
  LOG_FORMATS,
  LOG_LEVELS,
  type Config,
  type HealthConfig,
  type PeerConfig,
  type ProbeConfig,
  type ServiceConfig,
  type WarmupConfig,
} from './types.js';
import { WCCP2_PORT, ADMIN_DEFAULT_HOST, ADMIN_DEFAULT_PORT, SQUID_HTTP_PORT, SQUID_ICP_PORT } from '../vocabulary.js';
import { DEFAULT_RELAY_BUDGETS } from '../warmup/relay-messages.js';
import { MAX_PEERS, readService, readStrings } from './service.js';

export const DEFAULT_ROUTER_PORT = WCCP2_PORT;
export const DEFAULT_ADMIN_LISTEN = `${ADMIN_DEFAULT_HOST}:${ADMIN_DEFAULT_PORT}`;
export const DEFAULT_STATE_DIR = '/var/lib/wccpd';
export const DEFAULT_HERE_I_AM_MS = 10_000;
/** At most one table change per service per this long: a flapping engine cannot drive an apply per datagram. */
export const DEFAULT_SETTLE_MS = 250;
/** Event-stream (SSE) clients at once: a page per admin tab and a few `wccpctl events --follow`. */
export const DEFAULT_EVENT_CLIENTS = 64;
/**
 * Every kind's knobs default to a fast, loss-tolerant verdict (docs/health.md): silence is caught in at most
 * 50ms x 16 + 400ms = 1.2 s, a refusing engine in two probes. Probing twice as often as every 100 ms buys both: more
 * probes in the same time make a run of 16 failures from 20% loss alone far rarer than 12 out of 12 at 100 ms (2e-8
 * against 1.4e-5 per hour). Only the HTTP probe runs by default: it makes the TCP connection itself (a refusal is hard
 * evidence) and also catches a hung proxy whose kernel still accepts.
 */
export const DEFAULT_PROBE: Omit<ProbeConfig, 'port' | 'enabled'> = {
  intervalMs: 50,
  timeoutMs: 400,
  rise: 3,
  fall: 16,
  hardFall: 2,
};
export const DEFAULT_PROBE_ENABLED: Readonly<Record<string, boolean>> = {
  http: true,
  tcp: false,
  icp: false,
  icmp: false,
};
/** Squid's defaults: http_port, icp_port. */
export const DEFAULT_PROBE_PORT: Readonly<Record<string, number>> = {
  http: SQUID_HTTP_PORT,
  tcp: SQUID_HTTP_PORT,
  icp: SQUID_ICP_PORT,
};
/** Probes of one engine may overlap, up to this many timeouts per interval. */
const MAX_TIMEOUT_INTERVALS = 10;
const HOST_NAME = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

function readListen(r: Reader, obj: Record<string, unknown>, path: KeyPath): { host: string; port: number } {
  const text = r.string(obj, 'listen', path, DEFAULT_ADMIN_LISTEN);
  const m = /^(.+):(\d{1,5})$/.exec(text);
  const host = m?.[1] ?? '';
  const port = Number(m?.[2] ?? NaN);
  if (m === null || ipv4ToNumber(host) === null || port > 65535) {
    r.add(
      [...path, 'listen'],
      `${JSON.stringify(text)} is not an IPv4 address and port such as 127.0.0.1:8080 (port 0 = any free port)`,
    );
    return { host: ADMIN_DEFAULT_HOST, port: ADMIN_DEFAULT_PORT };
  }
  return { host, port };
}

function readProbe(r: Reader, health: Record<string, unknown>, key: string): ProbeConfig {
  const path = ['health', key];
  const defaultPort = DEFAULT_PROBE_PORT[key];
  const obj = r.section(health, key, ['health'], sectionKeys(`health.${key}`));
  const intervalMs = r.duration(obj, 'interval', path, 50, HOUR_MS, DEFAULT_PROBE.intervalMs, '50ms to 1h');
  const timeoutMs = r.duration(obj, 'timeout', path, 10, HOUR_MS, DEFAULT_PROBE.timeoutMs, '10ms to 1h');
  if (timeoutMs > MAX_TIMEOUT_INTERVALS * intervalMs) {
    r.add(
      [...path, 'timeout'],
      `at most ${MAX_TIMEOUT_INTERVALS} probes of one engine may be in flight: timeout ${formatDuration(timeoutMs, 'config')} is longer than ${MAX_TIMEOUT_INTERVALS} x interval ${formatDuration(intervalMs, 'config')}`,
    );
  }
  const fall = r.integer(obj, 'fall', path, 1, 100, DEFAULT_PROBE.fall);
  return {
    enabled: r.boolean(obj, 'enabled', path, DEFAULT_PROBE_ENABLED[key] ?? false),
    intervalMs,
    timeoutMs,
    rise: r.integer(obj, 'rise', path, 1, 100, DEFAULT_PROBE.rise),
    fall,
    hardFall: r.integer(obj, 'hardFall', path, 1, 100, Math.min(DEFAULT_PROBE.hardFall, fall)),
    port: defaultPort === undefined ? null : r.integer(obj, 'port', path, 1, 65535, defaultPort),
  };
}

/**
 * services[i].loadAware (docs/buckets.md, "Load-aware assignment"): on once the section is given (enabled: false keeps
 * the settings, off). Refused where its moves would mean nothing or be undone: primary-standby (one engine serves all),
 * mask assignment (the data plane counts buckets, not mask values), designated-engine authority (the engines decide);
 * measure bytes where the data plane counts only each new connection's first packet per bucket.
 */
function readWarmup(r: Reader, top: Record<string, unknown>): WarmupConfig {
  const w = r.section(top, 'warmup', [], sectionKeys('warmup'));
  let listen: string | null = null;
  if (w.listen !== undefined && w.listen !== null) {
    const a = r.ipv4(w.listen, ['warmup', 'listen']);
    if (a === '0.0.0.0')
      r.add(
        ['warmup', 'listen'],
        '0.0.0.0 is not an address engines can name in cache_peer; give the router address on their network',
      );
    else listen = a;
  } else if (w.icpPort !== undefined || w.httpPort !== undefined) {
    r.add(
      ['warmup', 'listen'],
      'is required with warmup.icpPort or warmup.httpPort: the IPv4 address the broker listens on',
    );
  }
  const icpPort = r.integer(w, 'icpPort', ['warmup'], 0, 65535, SQUID_ICP_PORT);
  const httpPort = r.integer(w, 'httpPort', ['warmup'], 0, 65535, SQUID_HTTP_PORT);
  if (listen !== null && icpPort !== 0 && icpPort === httpPort) {
    // Different protocols (UDP and TCP) could share it, but Squid's cache_peer needs both, and a typo is likelier.
    r.add(
      ['warmup', 'httpPort'],
      `is the same as warmup.icpPort (${icpPort}); Squid's sibling line names both: use e.g. ${SQUID_HTTP_PORT} and ${SQUID_ICP_PORT}`,
    );
  }
  // 0 turns the rate limit off; below 64 KiB/s a relay of a few MB would outlast its 120 s limit.
  const maxRelayRate = r.bytes(w, 'maxRelayRate', ['warmup'], 0, 1e12, DEFAULT_RELAY_BUDGETS.maxRelayRate);
  if (maxRelayRate > 0 && maxRelayRate < 65_536)
    r.add(['warmup', 'maxRelayRate'], `is ${maxRelayRate} bytes/s; give 0 (no limit) or at least 64Ki`);
  const maxObjectBytes = r.bytes(
    w,
    'maxObjectSize',
    ['warmup'],
    1,
    64 * 1024 ** 3,
    DEFAULT_RELAY_BUDGETS.maxObjectBytes,
  );
  return { listen, icpPort, httpPort, maxRelayRate, maxObjectBytes };
}

function readPeers(r: Reader, top: Record<string, unknown>, routerAddress: string): PeerConfig[] {
  const items = r.list(top, 'peers', []) ?? [];
  const peers: PeerConfig[] = [];
  items.forEach((raw, i) => {
    const path: KeyPath = ['peers', i];
    const obj = r.mapping(raw, path, sectionKeys('peers'));
    if (obj === null) return;
    const address = obj.address === undefined ? null : r.ipv4(obj.address, [...path, 'address']);
    if (obj.address === undefined) r.add([...path, 'address'], "is required: the peer gateway's router.address");
    const api = r.string(obj, 'api', path, '');
    if (obj.api === undefined || obj.api === null) {
      r.add(
        [...path, 'api'],
        "is required: the peer's admin API such as http://192.0.2.2:8080, read to compare its tables with ours",
      );
    }
    let url: URL | null = null;
    try {
      url = api === '' ? null : new URL(api);
    } catch {
      url = null;
    }
    if (
      api !== '' &&
      (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.search !== '' || url.hash !== '')
    ) {
      r.add(
        [...path, 'api'],
        `${JSON.stringify(api)} is not an http(s) URL of the peer's admin API such as http://192.0.2.2:8080`,
      );
    }
    if (address === null) return;
    if (address === routerAddress)
      r.add([...path, 'address'], `${address} is this router (router.address); list only the other gateways`);
    else if (peers.some((p) => p.address === address)) r.add([...path, 'address'], `${address} is listed twice`);
    else peers.push({ address, api: api.replace(/\/+$/, '') });
  });
  return peers;
}

function readConfig(r: Reader, data: unknown, file: string): Omit<Config, 'deprecated'> {
  const top = r.mapping(data, [], sectionKeys('')) ?? {};
  const router = r.section(top, 'router', [], sectionKeys('router'));
  if (top.router === undefined) r.add(['router'], 'is required: at least router.address');
  let address = '0.0.0.0';
  if (router.address === undefined) {
    if (top.router !== undefined)
      r.add(['router', 'address'], 'is required: the IPv4 address engines send HERE_I_AM to');
  } else {
    const a = r.ipv4(router.address, ['router', 'address']);
    if (a === '0.0.0.0')
      r.add(['router', 'address'], '0.0.0.0 cannot be a Router ID; give the address engines send HERE_I_AM to');
    else if (a !== null) address = a;
  }
  const routerPort = r.integer(router, 'port', ['router'], 0, 65535, DEFAULT_ROUTER_PORT);

  const admin = r.section(top, 'admin', [], sectionKeys('admin'));
  const listen = readListen(r, admin, ['admin']);
  const hosts = readStrings(r, admin, 'hosts', ['admin'], (s) => {
    const name = s.toLowerCase().replace(/\.$/, '');
    if (/:\d+$/.test(name))
      return `${JSON.stringify(s)}: give the name without a port (a listed name is answered on any port)`;
    return HOST_NAME.test(name)
      ? null
      : `${JSON.stringify(s)} is not a host name or IPv4 address (letters, digits, - and .)`;
  }).map((s) => s.toLowerCase().replace(/\.$/, ''));
  const eventClients = r.integer(admin, 'eventClients', ['admin'], 1, 10_000, DEFAULT_EVENT_CLIENTS);
  const token = r.optionalString(admin, 'token', ['admin']);
  const tokenFile = r.optionalString(admin, 'tokenFile', ['admin']);
  if (token !== null && tokenFile !== null)
    r.add(['admin', 'tokenFile'], 'give either admin.token or admin.tokenFile, not both');

  const logging = r.section(top, 'logging', [], sectionKeys('logging'));
  const dataplane = r.section(top, 'dataplane', [], sectionKeys('dataplane'));
  const backend = r.oneOf(dataplane, 'backend', ['dataplane'], DATAPLANE_BACKENDS, 'nft');
  const conntrack = r.oneOf(dataplane, 'conntrack', ['dataplane'], CONNTRACK_SCOPES, 'all');
  if (conntrack !== 'all' && backend !== 'nft') {
    r.add(
      ['dataplane', 'conntrack'],
      backend === 'ingress'
        ? 'applies to the nft backend only (backend is ingress, which needs no conntrack)'
        : `applies to the nft backend only (backend is ${backend})`,
    );
  }
  const flows = readFlows(r, dataplane, backend);
  const timers = r.section(top, 'timers', [], sectionKeys('timers'));
  const health = r.section(top, 'health', [], sectionKeys('health'));
  const healthConfig: HealthConfig = {
    http: readProbe(r, health, 'http'),
    icp: readProbe(r, health, 'icp'),
    tcp: readProbe(r, health, 'tcp'),
    icmp: readProbe(r, health, 'icmp'),
  };

  const warmup = readWarmup(r, top);
  const services: ServiceConfig[] = [];
  const rawServices = r.list(top, 'services', []);
  if (rawServices === null) {
    if (top.services === undefined)
      r.add(['services'], 'is required: a list of at least one service group (e.g. - id: 0)');
  } else if (rawServices.length === 0) {
    r.add(['services'], 'must list at least one service group');
  }
  const firstIndexOf = new Map<number, number>();
  (rawServices ?? []).forEach((raw, i) => {
    const s = readService(r, raw, i, address, backend, warmup.listen !== null);
    if (s === null) return;
    const rawId = (raw as Record<string, unknown>).id;
    const first = firstIndexOf.get(s.id);
    if (first !== undefined && rawId === s.id)
      r.add(['services', i, 'id'], `service ${s.id} is already defined at services[${first}]`);
    else if (rawId === s.id) firstIndexOf.set(s.id, i);
    services.push(s);
  });

  const peers = readPeers(r, top, address);
  // Every service's Router View lists the peer gateways too.
  const withPeers = services.map((s, i) => {
    const all = [...s.peers, ...peers.map((p) => p.address).filter((a) => !s.peers.includes(a))];
    if (all.length > MAX_PEERS && s.peers.length <= MAX_PEERS) {
      r.add(
        ['services', i, 'peers'],
        `with the top-level peers this service lists ${all.length} routers; a service group holds at most 32 routers (31 peers)`,
      );
    }
    return { ...s, peers: all };
  });

  return {
    file,
    router: { address, port: routerPort },
    admin: { listen, token, tokenFile, hosts, eventClients },
    logging: {
      level: r.oneOf(logging, 'level', ['logging'], LOG_LEVELS, 'info'),
      format: r.oneOf(logging, 'format', ['logging'], LOG_FORMATS, 'auto'),
    },
    stateDir: r.string(top, 'stateDir', [], DEFAULT_STATE_DIR),
    dataplane: { backend, conntrack, flows },
    timers: {
      hereIAmMs: r.duration(timers, 'hereIAm', ['timers'], 100, 10 * 60_000, DEFAULT_HERE_I_AM_MS, '100ms to 10m'),
      settleMs: r.duration(timers, 'settle', ['timers'], 0, 10_000, DEFAULT_SETTLE_MS, '0ms to 10s'),
    },
    health: healthConfig,
    warmup,
    services: withPeers,
    peers,
  };
}

/** dataplane.flows: the ingress backend's flow map (docs/config.md); refused with another backend, where nothing
 * would read it. `idle` is a duration; the older `idleSeconds` (a whole number of seconds) is still read, with a
 * warning. */
function readFlows(r: Reader, dataplane: Record<string, unknown>, backend: string): { max: number; idleMs: number } {
  const path: KeyPath = ['dataplane', 'flows'];
  const given = dataplane.flows !== undefined && dataplane.flows !== null;
  if (given && backend !== 'ingress') {
    r.add(
      path,
      `applies to the ingress backend only (backend is ${backend}${backend === 'nft' ? ', whose connections are held by conntrack' : ''})`,
    );
  }
  const flows = r.section(dataplane, 'flows', ['dataplane'], [...sectionKeys('dataplane.flows'), 'idleSeconds']);
  const max = r.integer(flows, 'max', path, FLOWS_MAX_RANGE[0], FLOWS_MAX_RANGE[1], FLOWS_MAX_DEFAULT);
  const [minMs, maxMs] = FLOWS_IDLE_RANGE_MS;
  const has = (key: string): boolean => flows[key] !== undefined && flows[key] !== null;
  if (has('idleSeconds')) {
    if (has('idle')) {
      r.add([...path, 'idleSeconds'], 'give idle or idleSeconds, not both (idle is the newer name, a duration)');
      return { max, idleMs: FLOWS_IDLE_DEFAULT_MS };
    }
    if (typeof flows.idleSeconds === 'string') {
      r.add(
        [...path, 'idleSeconds'],
        `${describe(flows.idleSeconds)}: idleSeconds takes a bare number of seconds (deprecated); write a duration ` +
          `as idle: ${flows.idleSeconds}`,
      );
      return { max, idleMs: FLOWS_IDLE_DEFAULT_MS };
    }
    const bad = r.problems.length;
    const seconds = r.integer(flows, 'idleSeconds', path, minMs / 1000, maxMs / 1000, FLOWS_IDLE_DEFAULT_MS / 1000);
    if (r.problems.length === bad)
      r.deprecate(
        [...path, 'idleSeconds'],
        `is deprecated (a bare number of seconds); write idle: ${formatDuration(seconds * 1000, 'config')} instead, a ` +
          'duration as everywhere else in the file',
      );
    return { max, idleMs: seconds * 1000 };
  }
  const idleMs = r.duration(flows, 'idle', path, minMs, maxMs, FLOWS_IDLE_DEFAULT_MS, '10s to 24h');
  if (idleMs % 1000 !== 0) {
    r.add(
      [...path, 'idle'],
      `${describe(flows.idle)} is not a whole number of seconds (the flow map's timeout counts seconds), e.g. 90s, 10m`,
    );
    return { max, idleMs: FLOWS_IDLE_DEFAULT_MS };
  }
  return { max, idleMs };
}

/** The 1-based line of the deepest node along the path that exists in the document. */
function lineOf(doc: Document, lines: LineCounter, path: KeyPath): number | undefined {
  for (let n = path.length; n >= 1; n--) {
    const node: unknown = doc.getIn(path.slice(0, n), true);
    if (isNode(node) && node.range) return lines.linePos(node.range[0]).line;
  }
  return undefined;
}

/** Parses and validates; throws ConfigError with every problem found. fileName is used in messages only. */
export function parseConfig(text: string, fileName: string): Config {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(
      fileName,
      doc.errors.map((e) => ({
        key: '(yaml)',
        message: e.message.split('\n')[0] ?? e.message,
        line: lines.linePos(e.pos[0]).line,
      })),
    );
  }
  const r = new Reader();
  const config = readConfig(r, doc.toJS({ maxAliasCount: 100 }), fileName);
  const located = (raw: readonly RawProblem[]): ConfigProblem[] => {
    const out = raw.map((p): ConfigProblem => {
      const line = lineOf(doc, lines, p.path);
      return { key: formatKeyPath(p.path), message: p.message, ...(line === undefined ? {} : { line }) };
    });
    // In file order, as an admin reads the file (stable: same-line problems keep their order).
    return out.sort((a, b) => (a.line ?? Infinity) - (b.line ?? Infinity));
  };
  if (r.problems.length > 0) throw new ConfigError(fileName, located(r.problems));
  return { ...config, deprecated: located(r.deprecated) };
}
