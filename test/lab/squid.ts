// Squid engine config rendering and access.log parsing (Squid's native log format).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export type Assignment = 'hash' | 'mask';

export interface SquidOptions {
  assignment?: Assignment;
  /** WCCP MD5 password (service `password=`); Squid uses at most 8 characters. */
  password?: string;
  /** Where Squid sends HERE_I_AM (`wccp2_router`); default 192.0.2.1. Several: one line each. */
  router?: string | readonly string[];
  /**
   * How port 3129 takes the L2-forwarded traffic: `intercept` (default; NAT, Squid fetches from its own address) or
   * `tproxy` (Squid fetches with the client's address; needs a lab created with `tproxy: true`).
   */
  interception?: 'intercept' | 'tproxy';
  /**
   * The WCCP service lines, replacing `wccp2_service standard 0` (e.g. `wccp2_service dynamic 80` and its
   * `wccp2_service_info`). `password` is added to every `wccp2_service` line.
   */
  wccpServices?: readonly string[];
  /** The warm-up broker's address: the sibling lines of docs/warmup.md (cache_peer, icp_port, access, timeouts). */
  sibling?: string;
}

/** Squid's fully transparent pair (docs/squid.md, test/e2e/tproxy.test.ts): 80 for the client's way, 90 back. */
export const TPROXY_SERVICES: readonly string[] = [
  'wccp2_service dynamic 80',
  'wccp2_service dynamic 90',
  'wccp2_service_info 80 protocol=tcp flags=dst_ip_hash priority=240 ports=80',
  'wccp2_service_info 90 protocol=tcp flags=src_ip_hash,ports_source priority=240 ports=80',
];

/** The squid.conf lines docs/warmup.md and docs/squid.md give, for a broker at `router`. */
export function siblingLines(router: string): string {
  return [
    '# wccpd warm-up broker as a sibling (docs/warmup.md)',
    `cache_peer ${router} sibling 3128 3130 no-digest no-netdb-exchange`,
    'icp_port 3130',
    `acl wccpd_router src ${router}`,
    'icp_access allow wccpd_router',
    'icp_access deny all',
    'http_access allow wccpd_router',
    'minimum_direct_hops 0',
    'minimum_direct_rtt 0',
    'icp_query_timeout 200',
  ].join('\n');
}

const TEMPLATE = fileURLToPath(new URL('./squid.conf.tmpl', import.meta.url));

/** Whom the lab's Squids serve: the client net, the engine net (the gateway and the engines), loopback; each net's
 * IPv6 prefix of a dual-stack lab too. */
const LAB_SOURCES6 = ['2001:db8:c::/64', '2001:db8:e::/64'];
const LAB_SOURCES = ['203.0.113.0/24', '192.0.2.0/24', '127.0.0.1', ...LAB_SOURCES6];

/** LAB_SOURCES with `address` (in 192.0.2.0/24) left out, as Squid address ranges. */
function labSourcesWithout(address: string): string[] {
  const last = Number(address.split('.')[3]);
  if (!address.startsWith('192.0.2.') || !(last >= 0 && last <= 255))
    throw new RangeError(`${address}: not in 192.0.2.0/24`);
  const ranges = [
    ...(last > 1 ? [`192.0.2.1-192.0.2.${last - 1}`] : []),
    ...(last < 255 ? [`192.0.2.${last + 1}-192.0.2.255`] : []),
  ];
  return ['203.0.113.0/24', ...ranges, '127.0.0.1', ...LAB_SOURCES6];
}

export function renderSquidConf(name: string, dir: string, opts: SquidOptions, defaultRouter: string): string {
  const routers =
    opts.router === undefined ? [defaultRouter] : typeof opts.router === 'string' ? [opts.router] : [...opts.router];
  if (routers.length === 0) throw new RangeError('startSquid: router list is empty');
  if (opts.password !== undefined && !/^[\x21-\x7e]{1,8}$/.test(opts.password)) {
    throw new RangeError('startSquid: password must be 1..8 printable characters without spaces');
  }
  const values: Record<string, string> = {
    NAME: name,
    DIR: dir,
    ROUTERS: routers.map((r) => `wccp2_router ${r}`).join('\n'),
    ASSIGNMENT: opts.assignment ?? 'hash',
    INTERCEPTION: opts.interception ?? 'intercept',
    SERVICES: serviceLines(opts),
    SIBLING: opts.sibling === undefined ? '' : siblingLines(opts.sibling),
    // With the sibling lines, the lab's own allow leaves the broker's address out, so only the documented
    // `http_access allow wccpd_router` admits its relays (docs/squid.md).
    LABSRC: opts.sibling === undefined ? LAB_SOURCES.join(' ') : labSourcesWithout(opts.sibling).join(' '),
  };
  return readFileSync(TEMPLATE, 'utf8').replace(/\{\{([A-Z]+)\}\}/g, (_, key: string) => {
    const v = values[key];
    if (v === undefined) throw new Error(`squid.conf.tmpl: unknown placeholder {{${key}}}`);
    return v;
  });
}

function serviceLines(opts: SquidOptions): string {
  const lines = opts.wccpServices ?? ['wccp2_service standard 0'];
  if (lines.length === 0) throw new RangeError('startSquid: wccpServices is empty');
  for (const l of lines) {
    if (!/^wccp2_service(_info)? [ -~]+$/.test(l))
      throw new RangeError(`startSquid: not a WCCP service line: ${JSON.stringify(l)}`);
  }
  const password = opts.password === undefined ? '' : ` password=${opts.password}`;
  return lines.map((l) => (l.startsWith('wccp2_service ') ? `${l}${password}` : l)).join('\n');
}

/** One access.log line, e.g. `1764490000.123 5 203.0.113.10 TCP_MISS/200 345 GET http://198.51.100.80/x -
 * ORIGINAL_DST/198.51.100.80 application/json`. */
export interface AccessLogEntry {
  time: number;
  elapsedMs: number;
  client: string;
  /** Squid's result code, e.g. TCP_MISS, TCP_MEM_HIT. */
  result: string;
  status: number;
  bytes: number;
  method: string;
  url: string;
  /** Hierarchy code, e.g. ORIGINAL_DST (intercepted) or HIER_DIRECT. */
  hierarchy: string;
  /** The address Squid fetched from, e.g. the original destination. */
  peer: string;
  contentType: string;
}

export function parseAccessLog(text: string): AccessLogEntry[] {
  const out: AccessLogEntry[] = [];
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const [time, elapsed, client, codeStatus, bytes, method, url, , hierPeer, contentType] = f as [
      string,
      string,
      string,
      string,
      string,
      string,
      string,
      string,
      string,
      string,
    ];
    const [result = '', status = '0'] = codeStatus.split('/');
    const slash = hierPeer.indexOf('/');
    out.push({
      time: Number(time),
      elapsedMs: Number(elapsed),
      client,
      result,
      status: Number(status),
      bytes: Number(bytes),
      method,
      url,
      hierarchy: slash < 0 ? hierPeer : hierPeer.slice(0, slash),
      peer: slash < 0 ? '' : hierPeer.slice(slash + 1),
      contentType,
    });
  }
  return out;
}
