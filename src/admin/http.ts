// The admin HTTP server (node:http): JSON API under /api/v1/, routed by api.ts. Changes need
// `Authorization: Bearer <admin.token>`; reads need none.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import { matchRoute, routes } from './api.js';
import type { ApiContext, Route } from './api.js';

export interface AdminServerOptions {
  readonly host: string;
  readonly port: number;
  /** null: every change is refused. */
  readonly token: string | null;
  readonly context: ApiContext;
  readonly routes?: readonly Route[];
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = `${JSON.stringify(body)}\n`;
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  res.end(text);
}

function authorized(req: IncomingMessage, token: string | null): boolean {
  if (token === null) return false;
  const header = req.headers.authorization ?? '';
  const m = /^Bearer (.+)$/.exec(header);
  if (!m?.[1]) return false;
  const given = Buffer.from(m[1]);
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

export class AdminServer {
  private server: Server | null = null;

  constructor(private readonly options: AdminServerOptions) {}

  async start(): Promise<void> {
    const server = createServer((req, res) => this.handle(req, res));
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

  private handle(req: IncomingMessage, res: ServerResponse): void {
    try {
      const url = new URL(req.url ?? '/', 'http://localhost');
      const found = matchRoute(req.method ?? 'GET', url.pathname, this.options.routes ?? routes);
      if (found === null) return send(res, 404, { error: 'not-found', message: `no such path: ${url.pathname}` });
      if (found === 'method') return send(res, 405, { error: 'method-not-allowed', message: `${req.method} is not allowed on ${url.pathname}` });
      if (found.route.auth && !authorized(req, this.options.token)) {
        res.setHeader('www-authenticate', 'Bearer');
        return send(res, 401, { error: 'unauthorized', message: 'this change needs Authorization: Bearer <admin.token>' });
      }
      req.resume();
      const out = found.route.handle(found.params, this.options.context, url.searchParams);
      send(res, out.status, out.body);
    } catch (e) {
      send(res, 500, { error: 'internal', message: e instanceof Error ? e.message : String(e) });
    }
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (s) {
      s.closeAllConnections();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    }
  }
}
