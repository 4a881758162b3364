// The admin HTTP server (node:http): the JSON API under /api/v1/ (routed by api.ts), the live page at /, /metrics,
// and the Server-Sent Events stream. Changes need `Authorization: Bearer <admin.token>`; reads need none.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import { matchRoute, routes, wantsEventStream } from './api.js';
import type { ApiContext, ApiResponse, Route } from './api.js';

export interface AdminServerOptions {
  readonly host: string;
  readonly port: number;
  /** null: every change is refused. */
  readonly token: string | null;
  readonly context: ApiContext;
  readonly routes?: readonly Route[];
}

const MAX_BODY = 4096;
const KEEPALIVE_MS = 15_000;

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = `${JSON.stringify(body)}\n`;
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  res.end(text);
}

function send(res: ServerResponse, out: ApiResponse): void {
  if ('text' in out) {
    res.writeHead(out.status, { 'content-type': out.contentType, 'content-length': Buffer.byteLength(out.text), 'cache-control': 'no-store' });
    res.end(out.text);
  } else if ('body' in out) sendJson(res, out.status, out.body);
}

function authorized(req: IncomingMessage, token: string | null): boolean {
  if (token === null) return false;
  const m = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
  if (!m?.[1]) return false;
  const given = Buffer.from(m[1]);
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
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

export class AdminServer {
  private server: Server | null = null;
  private readonly streams = new Set<ServerResponse>();

  constructor(private readonly options: AdminServerOptions) {}

  async start(): Promise<void> {
    const server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e) => reject(new Error(`cannot listen on admin ${this.options.host}:${this.options.port}: ${e.message}`)));
      server.listen(this.options.port, this.options.host, () => resolve());
    });
    this.server = server;
  }

  port(): number {
    const a = this.server?.address();
    return a && typeof a === 'object' ? a.port : this.options.port;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const url = new URL(req.url ?? '/', 'http://localhost');
      const method = req.method ?? 'GET';
      if (wantsEventStream(method, url.pathname, req.headers.accept)) return this.stream(req, res);
      const found = matchRoute(method, url.pathname, this.options.routes ?? routes);
      if (found === null) return sendJson(res, 404, { error: 'not-found', message: `no such path: ${url.pathname}` });
      if (found === 'method') return sendJson(res, 405, { error: 'method-not-allowed', message: `${method} is not allowed on ${url.pathname}` });
      if (found.route.auth && !authorized(req, this.options.token)) {
        req.resume();
        res.setHeader('www-authenticate', 'Bearer');
        return sendJson(res, 401, { error: 'unauthorized', message: 'this change needs Authorization: Bearer <admin.token>' });
      }
      let body: unknown;
      try {
        body = method === 'POST' ? await readBody(req) : (req.resume(), undefined);
      } catch (e) {
        return sendJson(res, 400, { error: 'bad-request', message: e instanceof Error ? e.message : String(e) });
      }
      send(res, await found.route.handle(found.params, this.options.context, url.searchParams, body));
    } catch (e) {
      if (!res.headersSent) sendJson(res, 500, { error: 'internal', message: e instanceof Error ? e.message : String(e) });
    }
  }

  /** Server-Sent Events: one `data:` line of JSON per event, a comment every 15 s to keep proxies from closing it. */
  private stream(req: IncomingMessage, res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    res.write(': wccpd events\n\n');
    this.streams.add(res);
    const unsubscribe = this.options.context.model.subscribe((e) => res.write(`data: ${JSON.stringify(e)}\n\n`));
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), KEEPALIVE_MS);
    const end = () => {
      clearInterval(keepAlive);
      unsubscribe();
      this.streams.delete(res);
    };
    req.on('close', end);
    res.on('close', end);
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    for (const r of this.streams) r.end();
    if (s) {
      s.closeAllConnections();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    }
  }
}
