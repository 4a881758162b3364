// A service's section of the config (services[N]): its protocol, ports, methods, engines, weights, families,
// warm-up and load-aware settings, read and checked as parse.ts reads the rest.
import { cidrContains, ipv4ToNumber } from '../address.js';
import { readMaintenance } from './maintenance.js';
import { sectionKeys } from './keys.js';
import { describe, Reader, type KeyPath } from './reader.js';
import type { ServiceConfig, ServiceWarmupConfig } from './types.js';
import {
  ASSIGNMENT_METHODS,
  ASSIGNMENT_MODES,
  AUTHORITIES,
  FAIL_MODES,
  FIRST_DYNAMIC_SERVICE_ID,
  FORWARDING_METHODS,
  isDynamicService,
  LAST_SERVICE_ID,
  RETURN_METHODS,
  SERVICE_PROTOCOLS,
  WEB_CACHE_PRIORITY,
  WEB_CACHE_SERVICE_ID,
  QUIRKS,
  ADDRESS_FAMILIES,
  DEFAULT_FAMILIES,
  type AddressFamily,
  type Quirk,
} from '../vocabulary.js';
import { DEFAULT_WARMUP, WARM_SOURCES } from '../warmup/policy.js';
import { DEFAULT_LOAD_AWARE, LOAD_MEASURES, type LoadAwareSettings } from '../cluster/load-aware.js';
import { HOUR_MS } from '../duration.js';

/** Router View holds up to 32 routers: us and 31 peers. */
export const MAX_PEERS = 31;
const MAX_PORTS = 8;
export const DEFAULT_HISTORY_WINDOW_MS = 600_000;
export const DEFAULT_FAILBACK_HOLD_MS = 30_000;
export const DEFAULT_LENIENT_RECEIVE_ID = 2;

// A service's warm-up defaults are the policy's own; stickyMs is not a service setting: the daemon gives it the
// service's historyWindowMs.
const { stickyMs: _stickyMs, ...serviceWarmupDefaults } = DEFAULT_WARMUP;
const DEFAULT_SERVICE_WARMUP: ServiceWarmupConfig = serviceWarmupDefaults;

const INTERFACE_NAME = /^[A-Za-z0-9_.:@-]{1,15}$/;

function readLoadAware(
  r: Reader,
  obj: Record<string, unknown>,
  path: KeyPath,
  backend: string,
  service: { mode: string; assignment: string; authority: string },
): LoadAwareSettings {
  const given = obj.loadAware !== undefined && obj.loadAware !== null;
  const l = r.section(obj, 'loadAware', path, sectionKeys('services.loadAware'));
  const lPath = [...path, 'loadAware'];
  const d = DEFAULT_LOAD_AWARE;
  const enabled = r.boolean(l, 'enabled', lPath, given);
  const measure = r.oneOf(l, 'measure', lPath, LOAD_MEASURES, d.measure);
  if (enabled && measure === 'bytes' && (backend === 'nft' || backend === 'ingress'))
    r.add(
      [...lPath, 'measure'],
      `bytes needs every packet's bytes counted per bucket, which only the userland backend does; the ${backend} backend counts each new connection once (use measure: connections)`,
    );
  let tolerance = d.tolerance;
  const t = l.tolerance;
  if (t !== undefined && t !== null) {
    if (typeof t !== 'number' || !Number.isFinite(t) || t <= 1 || t > 10)
      r.add(
        [...lPath, 'tolerance'],
        `must be a number above 1 and at most 10 (an engine may carry tolerance x its fair share); found ${describe(t)}`,
      );
    else tolerance = t;
  }
  if (enabled) {
    const refused =
      service.mode === 'primary-standby'
        ? 'mode primary-standby: one engine serves every bucket, there is no share to balance'
        : service.assignment === 'mask'
          ? 'mask assignment: the data plane counts load per bucket, not per mask value'
          : service.authority === 'designated-engine'
            ? 'authority designated-engine: the designated engine decides the table, wccpd only heals it'
            : null;
    if (refused !== null) r.add(lPath, `is not available with ${refused}; remove loadAware or say enabled: false`);
  }
  return {
    enabled,
    measure,
    windowMs: r.duration(l, 'window', lPath, 5000, 24 * HOUR_MS, d.windowMs, '5s to 24h'),
    tolerance,
    maxMovesPerHour: r.integer(l, 'maxMovesPerHour', lPath, 1, 256, d.maxMovesPerHour),
    holdMs: r.duration(l, 'hold', lPath, 0, 24 * HOUR_MS, d.holdMs, '0s to 24h'),
    minConnections: r.integer(l, 'minConnections', lPath, 0, 1_000_000_000, d.minConnections),
  };
}

function readServiceWarmup(
  r: Reader,
  obj: Record<string, unknown>,
  path: KeyPath,
  broker: boolean,
): ServiceWarmupConfig {
  const w = r.section(obj, 'warmup', path, sectionKeys('services.warmup'));
  const wPath = [...path, 'warmup'];
  const d = DEFAULT_SERVICE_WARMUP;
  const enabled = r.boolean(w, 'enabled', wPath, d.enabled);
  if (!broker && obj.warmup !== undefined && obj.warmup !== null && enabled) {
    r.add(
      wPath,
      "has no effect without a top-level warmup.listen (the broker's address); set it, or say enabled: false",
    );
  }
  let minHitRatio = d.minHitRatio;
  const ratio = w.minHitRatio;
  if (ratio !== undefined && ratio !== null) {
    if (typeof ratio !== 'number' || !Number.isFinite(ratio) || ratio < 0 || ratio > 1) {
      r.add(
        [...wPath, 'minHitRatio'],
        `must be a number from 0 to 1 (a fraction of the last \`window\` queries); found ${describe(ratio)}`,
      );
    } else minHitRatio = ratio;
  }
  return {
    enabled,
    durationMs: r.duration(w, 'duration', wPath, 1000, 24 * HOUR_MS, d.durationMs, '1s to 24h'),
    maxPeerHits: r.integer(w, 'maxPeerHits', wPath, 1, 1_000_000_000, d.maxPeerHits),
    minHitRatio,
    window: r.integer(w, 'window', wPath, 1, 100_000, d.window),
    peerTimeoutMs: r.duration(w, 'peerTimeout', wPath, 1, 5000, d.peerTimeoutMs, '1ms to 5s'),
    source: r.oneOf(w, 'source', wPath, WARM_SOURCES, d.source),
    minSourceHoldMs: r.duration(w, 'minSourceHold', wPath, 0, 24 * HOUR_MS, d.minSourceHoldMs, '0s to 24h'),
  };
}

export function readStrings(
  r: Reader,
  obj: Record<string, unknown>,
  key: string,
  path: KeyPath,
  check: (s: string) => string | null,
): string[] {
  const items = r.list(obj, key, path) ?? [];
  const out: string[] = [];
  items.forEach((item, i) => {
    const problem = typeof item === 'string' ? check(item) : `must be a string; found ${typeof item}`;
    if (problem !== null) r.add([...path, key, i], problem);
    else if (out.includes(item as string)) r.add([...path, key, i], `${JSON.stringify(item)} is listed twice`);
    else out.push(item as string);
  });
  return out;
}

// Absent: IPv4 only, as before families existed (docs/config.md, `families`: an upgrade redirects nothing new).
function readFamilies(
  r: Reader,
  obj: Record<string, unknown>,
  path: KeyPath,
  forwarding: string,
  assignment: string,
): AddressFamily[] {
  if (obj.families === undefined) return [...DEFAULT_FAMILIES];
  const families = readStrings(r, obj, 'families', path, (s) =>
    (ADDRESS_FAMILIES as readonly string[]).includes(s)
      ? null
      : `${JSON.stringify(s)} is not an address family; write ipv4, ipv6 or both`,
  ) as AddressFamily[];
  if (Array.isArray(obj.families) && obj.families.length === 0) {
    r.add([...path, 'families'], 'is empty: list ipv4, ipv6 or both (absent means [ipv4])');
  }
  if (!families.includes('ipv6')) return families;
  if (forwarding === 'gre') {
    r.add(
      [...path, 'families'],
      'ipv6 needs forwarding l2: GRE forwarding is IPv4 only (plain GRE over IPv4 to the engine, as Squid and Linux ' +
        "engines take it); with l2 the engine's IPv6 frames go to the same MAC address",
    );
  }
  if (assignment === 'mask') {
    r.add(
      [...path, 'families'],
      'ipv6 needs assignment hash: the Mask/Value Sets mask 32-bit IPv4 addresses; the hash folds an IPv6 address ' +
        '(docs/buckets.md, "IPv6 addresses")',
    );
  }
  return families;
}

export function readService(
  r: Reader,
  raw: unknown,
  index: number,
  routerAddress: string,
  backend: string,
  broker: boolean,
): ServiceConfig | null {
  const path: KeyPath = ['services', index];
  const obj = r.mapping(raw, path, sectionKeys('services'));
  if (obj === null) return null;

  let id = WEB_CACHE_SERVICE_ID;
  const rawId = obj.id;
  if (rawId === undefined || rawId === null) r.add([...path, 'id'], 'is required (0 = web-cache, 51-255 = dynamic)');
  else if (typeof rawId !== 'number' || !Number.isInteger(rawId) || rawId < 0 || rawId > LAST_SERVICE_ID) {
    r.add([...path, 'id'], `must be a service id 0 (web-cache) or 51-255 (dynamic); found ${JSON.stringify(rawId)}`);
  } else if (rawId !== WEB_CACHE_SERVICE_ID && rawId < FIRST_DYNAMIC_SERVICE_ID) {
    r.add(
      [...path, 'id'],
      `well-known service ${rawId} is not supported; use 0 (web-cache, TCP 80) or a dynamic service 51-255`,
    );
  } else id = rawId;
  const dynamic = isDynamicService(id);

  let protocol = r.oneOf(obj, 'protocol', path, SERVICE_PROTOCOLS, 'tcp');
  let ports: number[] = [80];
  let priority: number | null = WEB_CACHE_PRIORITY;
  let portsSource = false;
  if (dynamic) {
    if (obj.protocol === undefined) r.add([...path, 'protocol'], `is required for dynamic service ${id} (tcp or udp)`);
    const items = r.list(obj, 'ports', path);
    ports = [];
    if (items === null) {
      if (obj.ports === undefined)
        r.add([...path, 'ports'], `is required for dynamic service ${id}: a list of 1 to ${MAX_PORTS} ports`);
    } else if (items.length < 1 || items.length > MAX_PORTS) {
      r.add(
        [...path, 'ports'],
        `must list 1 to ${MAX_PORTS} ports (the Service Info component has 8 slots); found ${items.length}`,
      );
    } else {
      items.forEach((p, i) => {
        if (typeof p !== 'number' || !Number.isInteger(p) || p < 1 || p > 65535)
          r.add([...path, 'ports', i], `must be a port 1-65535; found ${JSON.stringify(p)}`);
        else if (ports.includes(p)) r.add([...path, 'ports', i], `port ${p} is listed twice`);
        else ports.push(p);
      });
    }
    // Absent: the priority the engines announce in Service Info (0 until one does).
    priority = obj.priority === undefined ? null : r.integer(obj, 'priority', path, 0, 255, 0);
    portsSource = r.boolean(obj, 'portsSource', path, false);
  } else {
    for (const key of ['protocol', 'ports', 'portsSource', 'priority']) {
      if (obj[key] !== undefined) {
        r.add(
          [...path, key],
          'applies only to dynamic services (51-255); service 0 is web-cache: TCP port 80, priority 240',
        );
      }
    }
    protocol = 'tcp';
  }

  let password: string | null = null;
  if (obj.password !== undefined && obj.password !== null) {
    if (typeof obj.password !== 'string' || obj.password === '') {
      r.add(
        [...path, 'password'],
        `must be a string of 1 to 8 characters; found ${typeof obj.password === 'string' ? 'an empty string' : `${typeof obj.password} (quote it, or leading zeros are lost)`}`,
      );
    } else if (Buffer.byteLength(obj.password, 'utf8') > 8) {
      r.add(
        [...path, 'password'],
        `is ${Buffer.byteLength(obj.password, 'utf8')} bytes long; WCCP MD5 security allows at most 8`,
      );
    } else password = obj.password;
  }

  const mode = r.oneOf(obj, 'mode', path, ASSIGNMENT_MODES, 'balance');
  const authority = r.oneOf(obj, 'authority', path, AUTHORITIES, 'appliance');
  if (obj.failbackHold !== undefined && mode !== 'primary-standby') {
    r.add([...path, 'failbackHold'], `applies only to mode primary-standby; this service's mode is ${mode}`);
  }
  const failbackHoldMs = r.duration(obj, 'failbackHold', path, 0, 24 * HOUR_MS, DEFAULT_FAILBACK_HOLD_MS, '0s to 24h');
  const historyWindowMs = r.duration(
    obj,
    'historyWindow',
    path,
    0,
    7 * 24 * HOUR_MS,
    DEFAULT_HISTORY_WINDOW_MS,
    '0s to 168h',
  );

  const clientInterfaces = readStrings(r, obj, 'clientInterfaces', path, (s) =>
    INTERFACE_NAME.test(s) ? null : `${JSON.stringify(s)} is not an interface name (1-15 letters, digits, _ . : @ -)`,
  );
  if (clientInterfaces.length === 0 && backend !== 'none' && obj.clientInterfaces === undefined) {
    r.add(
      [...path, 'clientInterfaces'],
      `is required with dataplane backend ${backend}: only traffic arriving on these interfaces is redirected (never the engines' own)`,
    );
  }

  const peers = readStrings(r, obj, 'peers', path, (s) =>
    ipv4ToNumber(s) === null
      ? `${JSON.stringify(s)} is not an IPv4 address`
      : s === routerAddress
        ? `${s} is this router (router.address); list only the other routers`
        : null,
  );
  if (peers.length > MAX_PEERS)
    r.add([...path, 'peers'], `lists ${peers.length} routers; a service group holds at most 32 routers (31 peers)`);

  const engines = r.section(obj, 'engines', path, sectionKeys('services.engines'));
  const enginesPath = [...path, 'engines'];
  const allow = r.cidrs(engines, 'allow', enginesPath);
  if (engines.allow === undefined) {
    r.add(
      [...enginesPath, 'allow'],
      'is required: the CIDR blocks engines may register from (e.g. [192.0.2.0/24]); others are ignored and counted',
    );
  } else if (Array.isArray(engines.allow) && engines.allow.length === 0) {
    // An empty list must not silently mean "everyone": allowing all is written out, and warned about at start.
    r.add(
      [...enginesPath, 'allow'],
      'is empty: list the CIDR blocks engines may register from (e.g. [192.0.2.0/24]); ' +
        'to allow every address write [0.0.0.0/0] (wccpd then warns at start)',
    );
  }
  const lenientReceiveId = r.integer(engines, 'lenientReceiveId', enginesPath, 0, 1000, DEFAULT_LENIENT_RECEIVE_ID);

  const weights: Record<string, number> = {};
  const rawWeights = obj.weights === undefined || obj.weights === null ? {} : obj.weights;
  if (typeof rawWeights !== 'object' || Array.isArray(rawWeights)) {
    r.add([...path, 'weights'], 'must be a mapping of engine IPv4 address to weight (0-65535)');
  } else {
    for (const [addr, w] of Object.entries(rawWeights as Record<string, unknown>)) {
      const wPath = [...path, 'weights', addr];
      if (ipv4ToNumber(addr) === null) r.add(wPath, `${JSON.stringify(addr)} is not an IPv4 address`);
      else if (allow !== null && !allow.some((c) => cidrContains(c, addr))) {
        r.add(
          wPath,
          `${addr} is outside engines.allow (${allow.map((c) => c.text).join(', ')}), so it can never register`,
        );
      } else if (typeof w !== 'number' || !Number.isInteger(w) || w < 0 || w > 65535) {
        r.add(wPath, `weight must be a whole number from 0 to 65535; found ${JSON.stringify(w)}`);
      } else weights[addr] = w;
    }
  }

  const forwarding = r.oneOf(obj, 'forwarding', path, FORWARDING_METHODS, 'l2');
  const assignment = r.oneOf(obj, 'assignment', path, ASSIGNMENT_METHODS, 'hash');
  if (forwarding === 'gre' && backend === 'ingress') {
    r.add(
      [...path, 'forwarding'],
      'gre is not supported by dataplane backend ingress: it hands each packet to its engine at layer 2 (a new ' +
        "destination MAC on the engine's segment), with no tunnel; use forwarding l2 with engines on a segment of " +
        'this gateway, or backend nft or userland for GRE',
    );
  }

  const families = readFamilies(r, obj, path, forwarding, assignment);
  if (families.includes('ipv6') && backend === 'userland') {
    r.add(
      [...path, 'families'],
      'ipv6 is not redirected by dataplane backend userland: its packet I/O (raw IPv4 sockets, the GRE header, the ' +
        'segments it sends again) is IPv4 only (docs/userland.md, "IPv6"); use backend nft or ingress, or families ' +
        '[ipv4]',
    );
  }

  const quirks = readStrings(r, obj, 'quirks', path, (s) =>
    (QUIRKS as readonly string[]).includes(s)
      ? null
      : `${JSON.stringify(s)} is not a known quirk; known: ${QUIRKS.join(', ')}`,
  ) as Quirk[];

  return {
    id,
    type: dynamic ? 'dynamic' : 'standard',
    name: dynamic ? `dynamic-${id}` : 'web-cache',
    protocol,
    ports,
    portsSource,
    priority,
    password,
    forwarding,
    return: r.oneOf(obj, 'return', path, RETURN_METHODS, 'l2'),
    assignment,
    authority,
    mode,
    failMode: r.oneOf(obj, 'failMode', path, FAIL_MODES, 'open'),
    clientInterfaces,
    families,
    peers,
    weights,
    failbackHoldMs,
    historyWindowMs,
    engines: { allow: allow ?? [], lenientReceiveId },
    quirks,
    warmup: readServiceWarmup(r, obj, path, broker),
    loadAware: readLoadAware(r, obj, path, backend, { mode, assignment, authority }),
    maintenance: readMaintenance(r, obj, path, allow),
  };
}

// The other gateways: each its router address (Router ID) and its admin API, e.g. http://192.0.2.2:8080.
