// The warm-up broker: an ICP responder and an HTTP relay on the router's address, which the engines' Squid uses as
// an ordinary sibling (docs/warmup.md). For an engine's ICP_QUERY about a URL in a bucket it gained recently, the
// broker asks the bucket's previous owner by ICP and answers HIT only if it says HIT; the engine then fetches the
// URL from the broker, which relays it from that source's proxy port with `Cache-Control: only-if-cached`.
// The broker never fetches from an origin and serves member engines only (ICP DENIED, HTTP 403 to anyone else).
import { createSocket } from 'node:dgram';
import type { RemoteInfo, Socket } from 'node:dgram';
import { Agent, createServer, request as httpRequest } from 'node:http';
import type {
  ClientRequest,
  IncomingHttpHeaders,
  IncomingMessage,
  OutgoingHttpHeaders,
  Server,
  ServerResponse,
} from 'node:http';
import { wccpHash } from '../buckets/hash.js';
import { ServiceFlag } from '../vocabulary.js';
import type { Clock } from '../cluster/types.js';
import { decodeIcp, encodeIcp } from '../wire/icp.js';
import type { IcpQuery } from '../wire/icp.js';
import type { Log } from '../log.js';
import { RateLimitedLog } from '../rate-limited-log.js';
import { DestinationResolver, ipv4Value, urlTarget } from './destination.js';
import type { Lookup } from './destination.js';
import { IcpAsker } from './icp-client.js';
import type { AskOutcome } from './icp-client.js';
import type { WarmupPolicy } from './policy.js';

export interface RelayLimits {
  /** Request and response header bytes, each. */
  readonly maxHeaderBytes: number;
  /** From connecting to the source until its response headers. */
  readonly headersTimeoutMs: number;
  /** A whole relayed response, headers to last byte. */
  readonly totalTimeoutMs: number;
  /** A larger object is not relayed (by Content-Length) or is cut off (while streaming). */
  readonly maxObjectBytes: number;
  /** How long a HIT the broker answered lets the engine fetch that URL through it. */
  readonly hitMemoryMs: number;
  readonly maxHitMemory: number;
  /** Member queries being worked on at once (resolving or waiting for a source); more are answered MISS at once. */
  readonly maxPendingQueries: number;
  /** Open HTTP connections to the broker, in all and from one address; more are closed at once. */
  readonly maxConnections: number;
  readonly maxConnectionsPerAddress: number;
  /**
   * How long an idle keep-alive connection stays open after a response. Longer than Squid keeps an idle connection to
   * a peer (server_idle_pconn_timeout, 60 s by default), so Squid always closes first: a request Squid sends on a
   * connection the broker is closing gets a reset, and Squid answers it with an error (Node's default was 5 s).
   */
  readonly idleKeepAliveMs: number;
  /**
   * How long the broker keeps an idle connection to a source's proxy port for reuse. Shorter than Squid keeps an idle
   * client connection (client_idle_pconn_timeout, 120 s by default), so the broker closes first: a relay sent on a
   * connection the source is closing would be reset, and the source taken for failed.
   */
  readonly sourceIdleKeepAliveMs: number;
}

export const DEFAULT_RELAY_LIMITS: RelayLimits = {
  maxHeaderBytes: 16 * 1024,
  headersTimeoutMs: 5000,
  totalTimeoutMs: 120_000,
  maxObjectBytes: 256 * 1024 * 1024,
  hitMemoryMs: 30_000,
  maxHitMemory: 10_000,
  maxPendingQueries: 1024,
  maxConnections: 512,
  maxConnectionsPerAddress: 64,
  idleKeepAliveMs: 120_000,
  sourceIdleKeepAliveMs: 60_000,
};

export interface BrokerOptions {
  /** The address the broker listens on (the router's address on the engines' network). */
  readonly listen: string;
  readonly icpPort: number;
  readonly httpPort: number;
  /** Where the engines answer ICP and proxy HTTP (Squid: icp_port 3130, http_port 3128). */
  readonly sourceIcpPort: number;
  readonly sourceHttpPort: number;
  readonly policy: WarmupPolicy;
  readonly clock: Clock;
  readonly log: Log;
  readonly lookup?: Lookup;
  readonly limits?: Partial<RelayLimits>;
}

/** Via token the relay adds; a request that already carries it is a loop. */
const VIA = 'wccpd-warmup';
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'proxy-authorization',
  'proxy-authenticate',
]);
const LOG_INTERVAL_MS = 10_000;

function plainAddress(a: string | undefined): string {
  return (a ?? '').replace(/^::ffff:/, '');
}

/** Canonical form of a URL for matching an HTTP request to the ICP query that preceded it. */
function canonical(url: string): string | null {
  try {
    return new URL(url).href;
  } catch {
    return null;
  }
}

function forwardHeaders(h: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const named = new Set(
    (typeof h.connection === 'string' ? h.connection : '').split(',').map((s) => s.trim().toLowerCase()),
  );
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || HOP_BY_HOP.has(k) || named.has(k)) continue;
    out[k] = v;
  }
  return out;
}

export class WarmupBroker {
  private icp: Socket | null = null;
  private http: Server | null = null;
  private readonly asker: IcpAsker;
  private readonly resolver: DestinationResolver;
  private readonly agent: Agent;
  private readonly limits: RelayLimits;
  private readonly counters: Record<string, number> = {};
  /** `${engine} ${url}` -> the source that said HIT, until when. */
  private readonly hits = new Map<string, { source: string; until: number }>();
  private readonly logged = new Map<string, number>();
  /**
   * ICP is UDP: its source address is whatever a sender writes. Bad and refused datagrams are logged per reason, not
   * per address, or forged sources would write a line each (rate-limited-log.ts).
   */
  private readonly icpLog: RateLimitedLog;
  /** Member queries being answered now (see maxPendingQueries). */
  private pendingQueries = 0;
  private readonly connections = new Map<string, number>();
  private openConnections = 0;
  private unobserve: (() => void) | null = null;

  constructor(private readonly options: BrokerOptions) {
    this.limits = { ...DEFAULT_RELAY_LIMITS, ...options.limits };
    // Without a timeout the agent keeps an idle connection until the source closes it (Node ignores the server's
    // Keep-Alive hint then).
    this.agent = new Agent({ keepAlive: true, maxSockets: 64, timeout: this.limits.sourceIdleKeepAliveMs });
    this.icpLog = new RateLimitedLog(options.log, options.clock, LOG_INTERVAL_MS);
    this.asker = new IcpAsker({ bindAddress: options.listen, port: options.sourceIcpPort });
    this.resolver = new DestinationResolver({
      clock: options.clock,
      ...(options.lookup ? { lookup: options.lookup } : {}),
    });
  }

  private count(name: string, by = 1): void {
    this.counters[name] = (this.counters[name] ?? 0) + by;
  }

  /** Running totals: icp-*, http-*, resolver-*. */
  snapshotCounters(): Record<string, number> {
    const r = this.resolver.counters;
    return {
      ...this.counters,
      'resolver-lookups': r.lookups,
      'resolver-cache-hits': r.cacheHits,
      'resolver-failures': r.failures,
      'resolver-timeouts': r.timeouts,
      'resolver-busy': r.busy,
    };
  }

  /** What the broker holds now: source sockets, queries in flight, names cached, HTTP connections (for tests). */
  gauges(): {
    sourceSockets: number;
    pendingQueries: number;
    sourceQueries: number;
    resolverEntries: number;
    resolverInflight: number;
    hitMemory: number;
    connections: number;
  } {
    return {
      sourceSockets: this.asker.socketCount(),
      pendingQueries: this.pendingQueries,
      sourceQueries: this.asker.pendingCount(),
      resolverEntries: this.resolver.size(),
      resolverInflight: this.resolver.inflightCount(),
      hitMemory: this.hits.size,
      connections: this.openConnections,
    };
  }

  /** Closes the ICP sockets of sources that are no longer member engines of any service. */
  prune(): void {
    this.asker.retain((source) => this.options.policy.memberOf(source).length > 0);
  }

  /** Logs the first of each kind at once, then at most one line per kind every 10 s. */
  private note(kind: string, obj: object, msg: string): void {
    const now = this.options.clock.now();
    const last = this.logged.get(kind);
    if (last !== undefined && now >= last && now - last < LOG_INTERVAL_MS) return;
    if (this.logged.size > 1000) this.logged.clear();
    this.logged.set(kind, now);
    this.options.log.warn({ warmup: kind, ...obj }, msg);
  }

  async start(): Promise<void> {
    const { listen, icpPort, httpPort } = this.options;
    const icp = createSocket('udp4');
    icp.on('message', (buf, rinfo) => {
      void this.onIcp(buf, rinfo);
    });
    icp.on('error', (err) => this.options.log.error({ err: err.message }, `warm-up ICP socket error: ${err.message}`));
    await new Promise<void>((resolve, reject) => {
      icp.once('error', reject);
      icp.bind({ address: listen, port: icpPort }, () => {
        icp.off('error', reject);
        resolve();
      });
    });
    this.icp = icp;
    const server = createServer(
      {
        maxHeaderSize: this.limits.maxHeaderBytes,
        requestTimeout: this.limits.totalTimeoutMs,
        headersTimeout: this.limits.headersTimeoutMs,
        // Node checks the two timeouts above only this often (30 s by default): a slow client would hold its slot that
        // long.
        connectionsCheckingInterval: Math.min(1000, this.limits.headersTimeoutMs),
      },
      (req, res) => this.onHttp(req, res),
    );
    server.keepAliveTimeout = this.limits.idleKeepAliveMs;
    // Slow or idle clients hold a connection at most headersTimeout (per request) or the keep-alive timeout; these
    // caps bound how many they can hold at once, and keep one address from taking every slot.
    server.on('connection', (socket) => {
      const from = plainAddress(socket.remoteAddress);
      const mine = this.connections.get(from) ?? 0;
      if (this.openConnections >= this.limits.maxConnections || mine >= this.limits.maxConnectionsPerAddress) {
        this.count('http-connections-refused');
        this.note(
          `http-connections-refused ${from}`,
          { from, open: this.openConnections, fromAddress: mine },
          `warm-up broker: connection from ${from} closed: ${mine} open from that address, ${this.openConnections} in all`,
        );
        socket.destroy();
        return;
      }
      this.openConnections++;
      this.connections.set(from, mine + 1);
      socket.once('close', () => {
        this.openConnections--;
        const n = (this.connections.get(from) ?? 1) - 1;
        if (n <= 0) this.connections.delete(from);
        else this.connections.set(from, n);
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(httpPort, listen, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.http = server;
    // A departed source's socket closes when the policy sees it go, not at the next query.
    this.unobserve = this.options.policy.onObserve(() => this.prune());
  }

  icpPort(): number | null {
    const a = this.icp?.address();
    return a ? a.port : null;
  }

  httpPort(): number | null {
    const a = this.http?.address();
    return a && typeof a === 'object' ? a.port : null;
  }

  async stop(): Promise<void> {
    this.unobserve?.();
    this.unobserve = null;
    this.asker.close();
    this.agent.destroy();
    const icp = this.icp;
    this.icp = null;
    if (icp) await new Promise<void>((r) => icp.close(() => r()));
    const http = this.http;
    this.http = null;
    if (http) {
      http.closeAllConnections();
      await new Promise<void>((r) => http.close(() => r()));
    }
  }

  private reply(q: IcpQuery, to: RemoteInfo, opcode: 'HIT' | 'MISS' | 'DENIED'): void {
    this.count(`icp-answered-${opcode.toLowerCase()}`);
    let buf: Buffer;
    try {
      buf = encodeIcp({
        opcode,
        requestNumber: q.requestNumber,
        options: 0,
        optionData: 0,
        senderAddress: this.options.listen,
        url: q.url,
      });
    } catch {
      return;
    }
    this.icp?.send(buf, to.port, to.address);
  }

  private async onIcp(buf: Buffer, rinfo: RemoteInfo): Promise<void> {
    this.count('icp-received');
    const d = decodeIcp(buf);
    if (!d.ok) {
      this.count('icp-bad');
      this.icpLog.warn(
        rinfo.address,
        'icp-bad',
        { warmup: 'icp-bad', from: rinfo.address, detail: d.error.reason },
        `warm-up broker: bad ICP datagram from ${rinfo.address}: ${d.error.message}`,
      );
      return;
    }
    if (d.value.opcode !== 'QUERY') {
      this.count('icp-unexpected');
      return;
    }
    const q = d.value;
    const engine = rinfo.address;
    const members = this.options.policy.memberOf(engine);
    if (members.length === 0) {
      this.count('icp-denied');
      this.icpLog.warn(
        engine,
        'icp-denied',
        { warmup: 'icp-denied', from: engine },
        `warm-up broker: ICP query from ${engine}, which is no member engine: DENIED`,
      );
      this.reply(q, rinfo, 'DENIED');
      return;
    }
    if (this.pendingQueries >= this.limits.maxPendingQueries) {
      // A flood (forged or not) cannot grow the work in flight: past the bound, the engine goes direct.
      this.count('icp-miss-overload');
      this.note(
        'icp-overload',
        { pending: this.pendingQueries },
        `warm-up broker: ${this.pendingQueries} queries in flight (maxPendingQueries): answering MISS at once`,
      );
      this.reply(q, rinfo, 'MISS');
      return;
    }
    this.pendingQueries++;
    let answer: 'HIT' | 'MISS';
    try {
      answer = await this.answer(engine, q.url, members);
    } finally {
      this.pendingQueries--;
    }
    this.reply(q, rinfo, answer);
  }

  /** HIT or MISS for a member engine's query (counting why a MISS was at once). */
  private async answer(
    engine: string,
    url: string,
    members: ReturnType<WarmupPolicy['memberOf']>,
  ): Promise<'HIT' | 'MISS'> {
    const target = urlTarget(url);
    const miss = (why: string): 'MISS' => {
      this.count(`icp-miss-${why}`);
      return 'MISS';
    };
    if (target === null) return miss('not-http-url');
    const enabled = members.filter((m) => m.enabled);
    if (enabled.length === 0) return miss('disabled');
    const service =
      enabled.find((m) => m.definition?.protocol === 6 && m.definition.ports.includes(target.port)) ?? enabled[0];
    if (service === undefined) return miss('disabled');
    const settings = this.options.policy.settings(service.id);
    if (settings === null) return miss('disabled');
    const flags = service.definition?.flags ?? ServiceFlag.DST_IP_HASH;
    const fields = flags & 0x000f;
    if (fields !== 0 && fields !== ServiceFlag.DST_IP_HASH) return miss('hash-not-destination');
    const address = await this.resolver.resolve(target.host, settings.peerTimeoutMs);
    const value = address === null ? null : ipv4Value(address);
    if (value === null) return miss('unresolvable');
    const bucket = wccpHash(value);
    const decision = this.options.policy.decide(service.id, engine, bucket);
    if ('miss' in decision) return miss(decision.miss);
    this.count('icp-asked');
    const onOutcome = (source: string, o: AskOutcome): void => {
      this.count(`icp-source-${o}`);
      if (o === 'failed') {
        this.options.policy.sourceFailed(source);
        this.note(
          `source-failed ${source}`,
          { source },
          `warm-up broker: source ${source} refused an ICP query (port ${this.options.sourceIcpPort}); not asking it again until its state changes`,
        );
      }
    };
    const hit = await this.asker.askAll(decision.ask, url, engine, settings.peerTimeoutMs, onOutcome);
    this.options.policy.record(service.id, engine, hit !== null);
    if (hit === null) return 'MISS';
    const key = canonical(url);
    if (key !== null) this.remember(`${engine} ${key}`, hit);
    return 'HIT';
  }

  private remember(key: string, source: string): void {
    this.hits.delete(key);
    this.hits.set(key, { source, until: this.options.clock.now() + this.limits.hitMemoryMs });
    while (this.hits.size > this.limits.maxHitMemory) {
      const oldest = this.hits.keys().next().value;
      if (oldest === undefined) break;
      this.hits.delete(oldest);
    }
  }

  private refuse(
    res: ServerResponse,
    status: number,
    counter: string,
    text: string,
    extra: OutgoingHttpHeaders = {},
  ): void {
    this.count(counter);
    this.count(`http-status-${status}`);
    const body = `${text}\n`;
    res.writeHead(status, {
      'Content-Type': 'text/plain; charset=utf-8',
      'Content-Length': Buffer.byteLength(body),
      'Cache-Control': 'no-store',
      ...extra,
    });
    res.end(body);
  }

  private onHttp(req: IncomingMessage, res: ServerResponse): void {
    this.count('http-requests');
    const engine = plainAddress(req.socket.remoteAddress);
    if (this.options.policy.memberOf(engine).length === 0) {
      this.note(
        `http-denied ${engine}`,
        { from: engine },
        `warm-up broker: HTTP request from ${engine}, which is no member engine: 403`,
      );
      this.refuse(res, 403, 'http-denied', `wccpd warm-up broker: ${engine} is not a member engine`);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      this.refuse(res, 405, 'http-bad-method', `wccpd warm-up broker: only GET and HEAD, not ${req.method ?? '?'}`, {
        Allow: 'GET, HEAD',
      });
      return;
    }
    const url = req.url ?? '';
    const key = urlTarget(url) === null ? null : canonical(url);
    if (key === null) {
      this.refuse(res, 400, 'http-bad-url', 'wccpd warm-up broker: expected an absolute http:// URL');
      return;
    }
    const via = req.headers.via;
    if (typeof via === 'string' && via.includes(VIA)) {
      this.refuse(res, 504, 'http-loop', 'wccpd warm-up broker: forwarding loop (Via)');
      return;
    }
    const hit = this.hits.get(`${engine} ${key}`);
    if (hit === undefined || hit.until < this.options.clock.now()) {
      // Only what a source just said HIT for is relayed; anything else goes direct from the engine.
      this.refuse(res, 504, 'http-unconfirmed', 'wccpd warm-up broker: no source confirmed this URL by ICP');
      return;
    }
    this.relay(req, res, hit.source, url);
  }

  private relay(req: IncomingMessage, res: ServerResponse, source: string, url: string): void {
    this.count('http-relay');
    const headers = forwardHeaders(req.headers);
    const cc = typeof headers['cache-control'] === 'string' ? headers['cache-control'] : '';
    headers['cache-control'] = cc === '' ? 'only-if-cached' : `${cc}, only-if-cached`;
    const via = typeof req.headers.via === 'string' ? req.headers.via : '';
    headers.via = via === '' ? `1.1 ${VIA}` : `${via}, 1.1 ${VIA}`;
    let finished = false;
    /** The request to the source now (a second one after a kept connection the source dropped as it was reused). */
    let current: ClientRequest | null = null;
    const total = setTimeout(() => {
      this.count('http-timeout');
      current?.destroy(new Error('total time limit'));
      res.destroy();
    }, this.limits.totalTimeoutMs);
    const done = (): void => {
      finished = true;
      clearTimeout(total);
    };
    const send = (fresh: boolean): void => {
      const up = httpRequest({
        host: source,
        port: this.options.sourceHttpPort,
        method: req.method,
        path: url,
        headers,
        agent: fresh ? false : this.agent,
        localAddress: this.options.listen,
        maxHeaderSize: this.limits.maxHeaderBytes,
        timeout: this.limits.headersTimeoutMs,
      });
      current = up;
      up.on('timeout', () => up.destroy(new Error('no response headers in time')));
      up.on('error', (err: NodeJS.ErrnoException) => {
        if (finished) return;
        if (!res.headersSent && !fresh && up.reusedSocket && err.code === 'ECONNRESET') {
          // The source closed a kept connection just as the broker reused it (its idle timeout): nothing was read, and
          // that says nothing about the source. GET and HEAD are safe to send again, on a new connection.
          this.count('http-source-retried');
          send(true);
          return;
        }
        if (!res.headersSent) {
          done();
          if (err.code === 'ECONNREFUSED' || err.code === 'EHOSTUNREACH' || err.code === 'ECONNRESET') {
            this.options.policy.sourceFailed(source);
            this.count('http-source-failed');
            this.note(
              `source-failed ${source}`,
              { source, err: err.code },
              `warm-up broker: source ${source} failed (${err.code}); not asking it again until its state changes`,
            );
          }
          this.refuse(res, 504, 'http-source-error', `wccpd warm-up broker: source ${source}: ${err.message}`);
        } else {
          done();
          res.destroy();
        }
      });
      up.on('response', (answer) => {
        up.setTimeout(0);
        const length = Number(answer.headers['content-length'] ?? NaN);
        if (Number.isFinite(length) && length > this.limits.maxObjectBytes) {
          answer.destroy();
          up.destroy();
          done();
          this.refuse(
            res,
            504,
            'http-too-large',
            `wccpd warm-up broker: object of ${length} bytes exceeds the relay's limit`,
          );
          return;
        }
        const status = answer.statusCode ?? 0;
        this.count(`http-status-${status}`);
        // Only an answer from the source's cache is a relayed object: its 504 is the only-if-cached miss (it lost the
        // object since its HIT), any other error is no object either. Both still go to the engine as they are.
        const outcome =
          status === 504 ? 'http-source-504' : status >= 400 ? 'http-source-error-status' : 'http-relayed';
        if (outcome !== 'http-relayed') this.count(outcome);
        res.writeHead(answer.statusCode ?? 502, answer.statusMessage, forwardHeaders(answer.headers));
        let bytes = 0;
        answer.on('data', (chunk: Buffer) => {
          bytes += chunk.length;
          this.count('http-bytes', chunk.length);
          if (bytes > this.limits.maxObjectBytes) {
            this.count('http-too-large');
            answer.destroy();
            res.destroy();
            done();
            return;
          }
          // Backpressure: stop reading from the source while the engine's socket is full.
          if (!res.write(chunk)) {
            answer.pause();
            res.once('drain', () => answer.resume());
          }
        });
        answer.on('end', () => {
          done();
          res.end();
          if (outcome === 'http-relayed') this.count('http-relayed');
        });
        answer.on('error', () => {
          done();
          res.destroy();
        });
      });
      up.end();
    };
    res.on('close', () => {
      if (!finished) {
        done();
        current?.destroy();
      }
    });
    req.on('error', () => {
      done();
      current?.destroy();
    });
    send(false);
  }
}
