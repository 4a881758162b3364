// The admin HTTP server (node:http): the JSON API under /api/v1/ (routed by api.ts), the live page at /, /metrics,
// and the Server-Sent Events stream. Changes need `Authorization: Bearer <admin.token>`; reads need none. Every
// request must name this server in its Host header (host-check.ts); the event stream is capped and drops a client
// that does not read, so neither a rebinding web page nor a crowd of stalled clients can reach or exhaust the daemon.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { timingSafeEqual } from 'node:crypto';
import { matchRoute, routes, wantsEventStream } from './api.js';
import type { ApiContext, ApiResponse, Route } from './api.js';
import type { AdminServerView } from './api-types.js';
import { hostAllowed } from './host-check.js';
import type { Log } from '../log.js';
import { monotonicNow } from '../clock.js';

export interface AdminServerOptions {
  readonly host: string;
  readonly port: number;
  /** null: every change is refused. */
  readonly token: string | null;
  readonly context: ApiContext;
  readonly routes?: readonly Route[];
  /** Names answered besides the listen address (admin.hosts), lower case. */
  readonly hosts: readonly string[];
  /** Event-stream clients at once (admin.eventClients). */
  readonly eventClients: number;
  /** Unsent bytes after which an event-stream client is dropped (default EVENT_BUFFER_LIMIT). */
  readonly eventBufferLimit?: number;
  /** Time a client has to send its request headers (default HEADERS_TIMEOUT_MS). */
  readonly headersTimeoutMs?: number;
  readonly log?: Pick<Log, 'warn'>;
}

/** What a reload may change of the server (admin.token or tokenFile, hosts, eventClients). */
export type AdminAccess = Pick<AdminServerOptions, 'token' | 'hosts' | 'eventClients'>;

const MAX_BODY = 4096;
const KEEPALIVE_MS = 15_000;
/** About a thousand events: a client this far behind is not reading. 64 such clients hold 16 MiB at most. */
export const EVENT_BUFFER_LIMIT = 256 * 1024;
/** Refused Host headers are logged at most this often (a rebinding page may retry in a loop). */
const HOST_LOG_INTERVAL_MS = 60_000;
/**
 * Connections at once besides the event-stream clients. Node sets no bound: idle or stalled connections would use up
 * the daemon's file descriptors (1024 under systemd), which the probes, the state saves and nft need too.
 */
export const MAX_REQUEST_CONNECTIONS = 128;
/** Time to send the request headers, and REQUEST_TIMEOUT_MS for the whole request (node: 60 s and 300 s). */
export const HEADERS_TIMEOUT_MS = 10_000;
const REQUEST_TIMEOUT_MS = 30_000;
/** Requests that failed inside wccpd are logged at most this often. */
const ERROR_LOG_INTERVAL_MS = 60_000;
/** Connections refused at the cap are logged at most this often. */
const CONNECTION_LOG_INTERVAL_MS = 60_000;

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = `${JSON.stringify(body)}\n`;
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  });
  res.end(text);
}

function send(res: ServerResponse, out: ApiResponse): void {
  if ('text' in out) {
    res.writeHead(out.status, {
      'content-type': out.contentType,
      'content-length': Buffer.byteLength(out.text),
      'cache-control': 'no-store',
    });
    res.end(out.text);
  } else sendJson(res, out.status, out.body);
}

function authorized(req: IncomingMessage, token: string | null): boolean {
  if (token === null) return false;
  const m = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
  if (!m?.[1]) return false;
  const given = Buffer.from(m[1]);
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

/** The request target as a URL; null when it is none (`http://[`: new URL throws on what a client may send). */
function requestUrl(target: string | undefined): URL | null {
  try {
    return new URL(target ?? '/', 'http://localhost');
  } catch {
    return null;
  }
}

/** Reads a small JSON body; undefined when there is none. Throws a message for a person on bad input. */
async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new Error(`request body over ${MAX_BODY} bytes`);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8').trim();
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new Error('request body is not JSON');
  }
}

const NOTHING_COUNTED = {
  eventClientsRefused: 0,
  eventClientsDropped: 0,
  hostRefused: 0,
  connectionsRefused: 0,
  badRequests: 0,
  unauthorized: 0,
  internalErrors: 0,
};

/** The counters of a server not started yet (cap: admin.eventClients). */
export const idleAdminCounters = (eventClientsMax: number): AdminServerView => ({
  eventClients: 0,
  eventClientsMax,
  ...NOTHING_COUNTED,
});

export class AdminServer {
  private server: Server | null = null;
  private readonly streams = new Set<ServerResponse>();
  private unsubscribe: (() => void) | null = null;
  private keepAlive: ReturnType<typeof setInterval> | null = null;
  private readonly count = { ...NOTHING_COUNTED };
  private hostLog = { at: -Infinity, since: 0 };
  private connectionLog = { at: -Infinity, since: 0 };
  private errorLog = { at: -Infinity, since: 0 };
  private badRequestLog = { at: -Infinity, since: 0 };

  /** The token, the names answered and the event-stream cap: the config's, then a reload's (setAccess). */
  private access: AdminAccess;

  constructor(private readonly options: AdminServerOptions) {
    this.access = { token: options.token, hosts: options.hosts, eventClients: options.eventClients };
  }

  /**
   * A config reload's admin settings, in force for the next request: the token, admin.hosts, the event-stream cap
   * (clients beyond a lowered cap stay until they leave; new ones are refused until below it).
   */
  setAccess(access: AdminAccess): void {
    this.access = access;
    if (this.server !== null) this.server.maxConnections = access.eventClients + MAX_REQUEST_CONNECTIONS;
  }

  counters(): AdminServerView {
    return { eventClients: this.streams.size, eventClientsMax: this.access.eventClients, ...this.count };
  }

  async start(): Promise<void> {
    // One subscription and one JSON text per event, whatever the number of clients.
    this.unsubscribe = this.options.context.model.subscribe((e) => this.broadcast(`data: ${JSON.stringify(e)}\n\n`));
    this.keepAlive = setInterval(() => this.broadcast(': keep-alive\n\n'), KEEPALIVE_MS);
    const headersTimeout = this.options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS;
    const server = createServer(
      // How often node looks for connections past headersTimeout / requestTimeout (default 30 s).
      { connectionsCheckingInterval: Math.min(1000, headersTimeout) },
      (req, res) => void this.handle(req, res),
    );
    server.headersTimeout = headersTimeout;
    server.requestTimeout = Math.max(REQUEST_TIMEOUT_MS, headersTimeout);
    server.maxConnections = this.access.eventClients + MAX_REQUEST_CONNECTIONS;
    server.on('drop', (data?: { remoteAddress?: string }) => this.refuseConnection(data?.remoteAddress));
    server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => this.clientError(err, socket));
    await new Promise<void>((resolve, reject) => {
      const onError = (e: Error): void =>
        reject(new Error(`cannot listen on admin ${this.options.host}:${this.options.port}: ${e.message}`));
      server.once('error', onError);
      server.listen(this.options.port, this.options.host, () => {
        server.off('error', onError);
        resolve();
      });
    });
    // After the listen, an 'error' (an accept that failed) with no listener would end the process.
    server.on('error', (e) => this.options.log?.warn({ err: e.message }, `admin server error: ${e.message}`));
    this.server = server;
  }

  port(): number {
    const a = this.server?.address();
    return a && typeof a === 'object' ? a.port : this.options.port;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      if (!hostAllowed(req.headers.host, this.port(), { listenHost: this.options.host, names: this.access.hosts })) {
        return this.refuseHost(req, res);
      }
      const url = requestUrl(req.url);
      if (url === null) return this.badRequest(req, res, 'the request target is no URL');
      const method = req.method ?? 'GET';
      if (wantsEventStream(method, url.pathname, req.headers.accept)) return this.stream(req, res);
      const found = matchRoute(method, url.pathname, this.options.routes ?? routes);
      if (found === null) return sendJson(res, 404, { error: 'not-found', message: `no such path: ${url.pathname}` });
      if (found === 'method')
        return sendJson(res, 405, {
          error: 'method-not-allowed',
          message: `${method} is not allowed on ${url.pathname}`,
        });
      if (found.route.auth && !authorized(req, this.access.token)) {
        req.resume();
        this.count.unauthorized++;
        res.setHeader('www-authenticate', 'Bearer');
        return sendJson(res, 401, {
          error: 'unauthorized',
          message: 'this change needs Authorization: Bearer <admin.token>',
        });
      }
      let body: unknown;
      try {
        body = method === 'POST' ? await readBody(req) : (req.resume(), undefined);
      } catch (e) {
        return this.badRequest(req, res, e instanceof Error ? e.message : String(e));
      }
      send(res, await found.route.handle(found.params, this.options.context, url.searchParams, body));
    } catch (e) {
      this.internalError(req, e);
      if (!res.headersSent)
        sendJson(res, 500, { error: 'internal', message: e instanceof Error ? e.message : String(e) });
    }
  }

  /** A request whose handling threw: a bug, never the client's; counted, logged at most once a minute. */
  private internalError(req: IncomingMessage, e: unknown): void {
    this.count.internalErrors++;
    this.errorLog.since++;
    const now = monotonicNow();
    if (now >= this.errorLog.at && now - this.errorLog.at < ERROR_LOG_INTERVAL_MS) return;
    const err = e instanceof Error ? e.message : String(e);
    this.options.log?.warn(
      { method: req.method, path: (req.url ?? '').slice(0, 200), err, failed: this.errorLog.since },
      `admin: ${this.errorLog.since} request(s) failed inside wccpd (answered 500), e.g. ${req.method ?? '?'} ${(req.url ?? '').slice(0, 200)}: ${err}`,
    );
    this.errorLog = { at: now, since: 0 };
  }

  /** A connection past server.maxConnections, closed by node at once: counted, logged at most once a minute. */
  /** Our own 400 (a target that is no URL, a body too large or not JSON): counted with node's parser refusals. */
  private badRequest(req: IncomingMessage, res: ServerResponse, message: string): void {
    this.noteBadRequest(req.socket.remoteAddress, message);
    sendJson(res, 400, { error: 'bad-request', message });
  }

  /**
   * What node's parser refuses before a request exists (bad syntax, headers over the limit, a head not finished in
   * time): answered as node would (400, 431, 408) and closed, but counted and logged instead of silent.
   */
  private clientError(err: NodeJS.ErrnoException, socket: Socket): void {
    if (err.code === 'ECONNRESET') return void socket.destroy(); // the client left; nothing to answer
    const status =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? '431 Request Header Fields Too Large'
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? '408 Request Timeout'
          : '400 Bad Request';
    this.noteBadRequest(socket.remoteAddress, `${status.slice(0, 3)}: ${err.code ?? err.message}`);
    if (socket.writable && socket.bytesWritten === 0) socket.write(`HTTP/1.1 ${status}\r\nConnection: close\r\n\r\n`);
    socket.destroy();
  }

  private noteBadRequest(remote: string | undefined, why: string): void {
    this.count.badRequests++;
    this.badRequestLog.since++;
    const now = monotonicNow();
    if (now >= this.badRequestLog.at && now - this.badRequestLog.at < ERROR_LOG_INTERVAL_MS) return;
    this.options.log?.warn(
      { remote, refused: this.badRequestLog.since, why },
      `admin: refused ${this.badRequestLog.since} bad request(s), e.g. from ${remote ?? '?'}: ${why}`,
    );
    this.badRequestLog = { at: now, since: 0 };
  }

  private refuseConnection(remote: string | undefined): void {
    this.count.connectionsRefused++;
    this.connectionLog.since++;
    const now = monotonicNow();
    if (now >= this.connectionLog.at && now - this.connectionLog.at < CONNECTION_LOG_INTERVAL_MS) return;
    this.options.log?.warn(
      { remote, refused: this.connectionLog.since, max: this.server?.maxConnections },
      `admin: refused ${this.connectionLog.since} connection(s), e.g. from ${remote ?? '?'}: ${this.server?.maxConnections ?? '?'} are open (admin.eventClients + ${MAX_REQUEST_CONNECTIONS}); idle ones are closed after ${(this.options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS) / 1000} s without a request`,
    );
    this.connectionLog = { at: now, since: 0 };
  }

  /** 421 Misdirected Request: the Host header names another server (or none); counted, logged at most once a minute. */
  private refuseHost(req: IncomingMessage, res: ServerResponse): void {
    req.resume();
    this.count.hostRefused++;
    this.hostLog.since++;
    const host = JSON.stringify((req.headers.host ?? '').slice(0, 100));
    const now = monotonicNow();
    if (now < this.hostLog.at || now - this.hostLog.at >= HOST_LOG_INTERVAL_MS) {
      this.options.log?.warn(
        { host, remote: req.socket.remoteAddress, refused: this.hostLog.since },
        `admin: refused ${this.hostLog.since} request(s) whose Host header names another server, e.g. ${host} (DNS rebinding protection; names to accept go in admin.hosts)`,
      );
      this.hostLog = { at: now, since: 0 };
    }
    res.setHeader('connection', 'close');
    sendJson(res, 421, {
      error: 'misdirected-request',
      message:
        `Host ${host} is not this server's address or a name in admin.hosts; wccpd answers only requests for ` +
        `${this.options.host}:${this.port()} or a listed name (DNS rebinding protection, see docs/api.md)`,
    });
  }

  /**
   * Server-Sent Events: one `data:` line of JSON per event, a comment every 15 s to keep proxies from closing it.
   * At most admin.eventClients at once (503 beyond); a client whose unsent bytes pass the bound is dropped.
   */
  private stream(req: IncomingMessage, res: ServerResponse): void {
    req.resume();
    if (this.streams.size >= this.access.eventClients) {
      this.count.eventClientsRefused++;
      res.setHeader('retry-after', '10');
      return sendJson(res, 503, {
        error: 'too-many-event-clients',
        message:
          `the event stream already has its ${this.access.eventClients} clients (admin.eventClients); ` +
          'try again later, or read the recent events with GET /api/v1/events',
      });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    res.write(': wccpd events\n\n');
    this.streams.add(res);
    // The response's close, not the request's: node closes the request once its (empty) body is read.
    res.on('close', () => {
      this.streams.delete(res);
    });
  }

  private broadcast(text: string): void {
    const limit = this.options.eventBufferLimit ?? EVENT_BUFFER_LIMIT;
    for (const res of this.streams) {
      // writableLength: bytes the response and its socket hold that the kernel has not taken yet.
      if (res.writableLength + text.length > limit) this.drop(res, limit);
      else res.write(text);
    }
  }

  private drop(res: ServerResponse, limit: number): void {
    this.streams.delete(res);
    this.count.eventClientsDropped++;
    this.options.log?.warn(
      { remote: res.socket?.remoteAddress, buffered: res.writableLength, limit },
      `admin: event-stream client ${res.socket?.remoteAddress ?? '?'} dropped: it did not read and ${res.writableLength} bytes waited (bound ${limit})`,
    );
    res.destroy();
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    this.unsubscribe?.();
    this.unsubscribe = null;
    if (this.keepAlive) clearInterval(this.keepAlive);
    this.keepAlive = null;
    for (const r of this.streams) r.end();
    this.streams.clear();
    if (s) {
      s.closeAllConnections();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    }
  }
}
