// A small ICP/HTTP sibling for the broker tests: holds `store` (URL -> body), answers ICP HIT/MISS and only-if-cached
// HTTP requests (504 for anything it does not hold), and records every query and request it got.
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import type { Socket } from 'node:dgram';
import type { Socket as TcpSocket } from 'node:net';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, Server } from 'node:http';
import { decodeIcp, encodeIcp } from '../../src/wire/icp.js';

/** A sibling cache: holds `store` (URL -> body), answers ICP and only-if-cached HTTP; records what it was asked. */
export class Sibling {
  icp: Socket | null = null;
  http: Server | null = null;
  /** `raw`: bytes written on the connection as the whole answer, as they are (a broken source's status line). */
  readonly store = new Map<string, { status?: number; body: Buffer; raw?: string }>();
  readonly icpQueries: string[] = [];
  readonly httpRequests: { method: string; url: string; headers: IncomingHttpHeaders; from: string }[] = [];
  /** Drop a kept-alive connection when a second request comes on it, unanswered (a source closing it as it comes). */
  dropReused = false;
  constructor(readonly address: string) {}
  async start(icpPort: number, httpPort: number): Promise<void> {
    const icp = createSocket('udp4');
    icp.on('message', (buf, r) => {
      const d = decodeIcp(buf);
      if (!d.ok || d.value.opcode !== 'QUERY') return;
      this.icpQueries.push(d.value.url);
      const opcode = this.store.has(d.value.url) ? 'HIT' : 'MISS';
      icp.send(
        encodeIcp({
          opcode,
          requestNumber: d.value.requestNumber,
          options: 0,
          optionData: 0,
          senderAddress: this.address,
          url: d.value.url,
        }),
        r.port,
        r.address,
      );
    });
    await new Promise<void>((r) => icp.bind(icpPort, this.address, () => r()));
    this.icp = icp;
    const served = new WeakMap<object, number>();
    const http = createServer((req, res) => {
      const n = (served.get(req.socket) ?? 0) + 1;
      served.set(req.socket, n);
      if (this.dropReused && n > 1) {
        req.socket.destroy();
        return;
      }
      this.httpRequests.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        from: req.socket.remoteAddress ?? '',
      });
      const o = this.store.get(req.url ?? '');
      if (o?.raw !== undefined) {
        req.socket.end(Buffer.from(o.raw, 'latin1'));
        return;
      }
      const onlyIfCached = /only-if-cached/.test(String(req.headers['cache-control'] ?? ''));
      if (!o || !onlyIfCached || o.status === 504) {
        res.writeHead(504, { 'Content-Length': 0 });
        res.end();
        return;
      }
      // A status of its own (say 403: the source's http_access refuses the broker) is answered with the body as is.
      res.writeHead(o.status ?? 200, {
        'Content-Type': 'application/octet-stream',
        'Content-Length': o.body.length,
        'X-From': this.address,
      });
      res.end(req.method === 'HEAD' ? undefined : o.body);
    });
    // As Squid keeps an idle client connection (client_idle_pconn_timeout, 2 minutes).
    http.keepAliveTimeout = 120_000;
    await new Promise<void>((r) => http.listen(httpPort, this.address, () => r()));
    this.http = http;
  }
  async stop(): Promise<void> {
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
}

/** One ICP query from `from` (a socket bound to that address) to the broker; resolves with the reply's opcode. */
export async function icpQuery(
  from: string,
  port: number,
  url: string,
  requestNumber = 7,
  to = '127.0.0.1',
): Promise<string> {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, from, () => r()));
  try {
    return await new Promise<string>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no ICP reply to ${url} within 5 s`)), 5000);
      s.on('message', (buf) => {
        const d = decodeIcp(buf);
        if (!d.ok) return;
        clearTimeout(t);
        assert.equal(d.value.requestNumber, requestNumber, 'the reply echoes the request number');
        assert.equal(d.value.url, url, 'the reply echoes the URL');
        resolve(d.value.opcode);
      });
      s.send(
        encodeIcp({
          opcode: 'QUERY',
          requestNumber,
          options: 0,
          optionData: 0,
          senderAddress: '0.0.0.0',
          requesterAddress: from,
          url,
        }),
        port,
        to,
      );
    });
  } finally {
    s.close();
  }
}

/** One request on a socket of the caller's (a keep-alive connection, as Squid keeps one to a peer) and its answer. */
export function exchange(
  socket: TcpSocket,
  url: string,
): Promise<{ status: number; body: string } | { error: string }> {
  return new Promise((resolve) => {
    if (socket.destroyed) {
      resolve({ error: 'the connection was already closed' });
      return;
    }
    let got = Buffer.alloc(0);
    const finish = (r: { status: number; body: string } | { error: string }): void => {
      socket.off('data', onData);
      socket.off('close', onClose);
      socket.off('error', onError);
      resolve(r);
    };
    const onData = (chunk: Buffer): void => {
      got = Buffer.concat([got, chunk]);
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = got.subarray(0, end).toString('latin1');
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? NaN);
      if (got.length < end + 4 + length) return;
      const status = Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? 0);
      finish({ status, body: got.subarray(end + 4, end + 4 + length).toString() });
    };
    const onClose = (): void => finish({ error: 'the broker closed the connection' });
    const onError = (e: Error): void => finish({ error: e.message });
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.once('error', onError);
    socket.write(`GET ${url} HTTP/1.1\r\nHost: ${new URL(url).host}\r\n\r\n`);
  });
}
