// The warm-up relay's own process (docs/warmup.md, "Where the relay runs"): the broker in the daemon accepts each
// connection on its HTTP port, decides whether to take it and hands the socket over; here its requests are parsed,
// each one is put to the broker (which decides, as for ICP, in one place) and what the broker lets through is relayed
// (relay.ts). So the relayed bytes never cross the daemon's event loop. Counters and log lines go back to the broker.
// It ends when the daemon does: with the IPC channel (even after a kill -9 of the daemon) or when told to stop.
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { ByteRate } from './budget.js';
import { relay } from './relay.js';
import { SourceAgent } from './source-pipe.js';
import type { RelayContext } from './relay.js';
import type { FromChild, RelaySettings, RequestDecision, ToChild } from './relay-messages.js';

const COUNT_FLUSH_MS = 250;

function send(m: FromChild): void {
  if (!process.connected || process.send === undefined) return;
  try {
    process.send(m);
  } catch {
    // The daemon is gone: 'disconnect' ends this process.
  }
}

function plainAddress(a: string | undefined): string {
  return (a ?? '').replace(/^::ffff:/, '');
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Counters go back at once (so a count reaches the broker before the answer it counts reaches the engine), but the
 * bytes relayed, counted per chunk, within COUNT_FLUSH_MS.
 */
const pending: Record<string, number> = {};
let pendingAny = false;
function flush(): void {
  if (!pendingAny) return;
  send({ t: 'counts', counts: { ...pending } });
  for (const k of Object.keys(pending)) delete pending[k];
  pendingAny = false;
}
function count(name: string, by = 1): void {
  pending[name] = (pending[name] ?? 0) + by;
  pendingAny = true;
  if (name !== 'http-bytes') flush();
}
setInterval(flush, COUNT_FLUSH_MS).unref();

function log(via: 'drop' | 'note', key: string, from: string, obj: Record<string, unknown>, msg: string): void {
  send({ t: 'log', via, key, from, obj, msg });
}

function unexpected(counter: string, from: string, err: unknown, what: string): void {
  count(counter);
  const msg = errorText(err);
  log('drop', counter, from, { warmup: counter, from, err: msg }, `warm-up broker: ${what} dropped: ${msg}`);
}

/** Answers with a short text; counted here only when `counter` is given (the broker counts its own refusals). */
function answer(
  res: ServerResponse,
  status: number,
  text: string,
  o: { counter?: string; close?: boolean; extra?: Readonly<Record<string, string>> } = {},
): void {
  if (o.counter !== undefined) {
    count(o.counter);
    count(`http-status-${status}`);
  }
  const body = `${text}\n`;
  res.writeHead(status, {
    'Content-Type': 'text/plain; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
    'Cache-Control': 'no-store',
    ...(o.close === true ? { Connection: 'close' } : {}),
    ...o.extra,
  });
  res.end(body);
}

function start(settings: RelaySettings): void {
  let current = settings;
  const rate = new ByteRate({ now: () => performance.now() }, settings.maxRelayRate);
  // Without a timeout the agent keeps an idle connection until the source closes it.
  const agent = new SourceAgent({ keepAlive: true, maxSockets: 64, timeout: settings.sourceIdleKeepAliveMs });
  const context = (): RelayContext => ({
    agent,
    localAddress: current.localAddress,
    sourceHttpPort: current.sourceHttpPort,
    maxHeaderBytes: current.maxHeaderBytes,
    headersTimeoutMs: current.headersTimeoutMs,
    totalTimeoutMs: current.totalTimeoutMs,
    maxObjectBytes: current.maxObjectBytes,
    count,
    note: (kind, obj, msg) => log('note', kind, '', { ...obj }, msg),
    sourceFailed: (source) => send({ t: 'source-failed', source }),
    pace: (bytes) => rate.take(bytes),
    readSize: (max) => rate.readSize(max),
    refuse: (res, status, counter, text) => answer(res, status, text, { counter }),
  });
  let ctx = context();
  const connOf = new WeakMap<Socket, number>();
  const waiting = new Map<number, { req: IncomingMessage; res: ServerResponse }>();
  let nextRid = 1;

  const decided = (rid: number, d: RequestDecision): void => {
    const w = waiting.get(rid);
    if (w === undefined) return;
    waiting.delete(rid);
    const { req, res } = w;
    if (res.destroyed || res.writableEnded) return;
    if (d.action === 'refuse') {
      answer(res, d.status, d.text, { close: d.close, extra: d.extra });
      return;
    }
    if (!d.keepAlive) res.shouldKeepAlive = false;
    relay(ctx, req, res, d.source, d.url);
  };

  const server = createServer(
    {
      maxHeaderSize: settings.maxHeaderBytes,
      requestTimeout: settings.totalTimeoutMs,
      headersTimeout: settings.headersTimeoutMs,
      // Node checks the two timeouts above only this often (30 s by default): a slow client would hold its slot
      // that long.
      connectionsCheckingInterval: Math.min(1000, settings.headersTimeoutMs),
    },
    (req, res) => {
      const from = plainAddress(req.socket.remoteAddress);
      // The boundary of one request: an error in its handling fails it alone.
      res.on('error', (err) => unexpected('http-internal-error', from, err, `the answer to ${from}`));
      try {
        const rid = nextRid++;
        waiting.set(rid, { req, res });
        res.once('close', () => waiting.delete(rid));
        const via = req.headers.via;
        send({
          t: 'request',
          rid,
          conn: connOf.get(req.socket) ?? 0,
          method: req.method ?? '',
          url: req.url ?? '',
          contentLength: req.headers['content-length'] ?? null,
          transferEncoding: req.headers['transfer-encoding'] !== undefined,
          via: typeof via === 'string' ? via : null,
        });
      } catch (err) {
        unexpected('http-internal-error', from, err, `HTTP request from ${from}`);
        if (res.headersSent) res.destroy();
        else
          answer(res, 500, 'wccpd warm-up broker: internal error', {
            counter: 'http-internal-error-answered',
            close: true,
          });
      }
    },
  );
  server.keepAliveTimeout = settings.idleKeepAliveMs;
  // The server never listens (its connections come from the broker), but Node tracks connections for the two
  // timeouts above only from 'listening' on: without it a slow or silent client would hold its slot for ever.
  server.emit('listening');
  // Node's own answer to a request it cannot parse (400, or 408 for headers too slow), counted here.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    const from = plainAddress(socket.remoteAddress);
    const timeout = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
    const reset = err.code === 'ECONNRESET';
    if (!reset) {
      const counter = timeout ? 'http-headers-timeout' : 'http-bad-request';
      count(counter);
      log(
        'drop',
        counter,
        from,
        { warmup: counter, from, err: err.code ?? err.message },
        `warm-up broker: HTTP from ${from}: ${err.message}`,
      );
    }
    if (socket.writable && !reset)
      socket.end(`HTTP/1.1 ${timeout ? '408 Request Timeout' : '400 Bad Request'}\r\nConnection: close\r\n\r\n`);
    socket.destroy();
  });

  process.on('message', (m: ToChild, handle: unknown) => {
    try {
      switch (m.t) {
        case 'conn': {
          const socket = handle as Socket | undefined;
          if (socket === undefined) {
            send({ t: 'closed', conn: m.conn });
            return;
          }
          connOf.set(socket, m.conn);
          socket.once('close', () => send({ t: 'closed', conn: m.conn }));
          server.emit('connection', socket);
          socket.resume();
          return;
        }
        case 'decision':
          decided(m.rid, m.decision);
          return;
        case 'settings':
          current = m.settings;
          rate.setRate(m.settings.maxRelayRate);
          ctx = context();
          return;
        case 'ping':
          flush();
          send({ t: 'pong', n: m.n });
          return;
        case 'stop':
          flush();
          server.closeAllConnections();
          agent.destroy();
          process.exit(0);
          return;
        case 'init':
          return;
      }
    } catch (err) {
      unexpected('http-internal-error', '', err, `the broker's message ${m.t}`);
    }
  });
}

process.on('disconnect', () => process.exit(0));
process.once('message', (m: ToChild) => {
  if (m.t !== 'init') {
    process.exit(2);
    return;
  }
  start(m.settings);
  send({ t: 'ready' });
});
