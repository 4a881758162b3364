#!/usr/bin/env node
// The lab's origin: one HTTP server on 0.0.0.0:<port> (default 80; on [::] with `::` after the port, dual-stack
// labs) that answers on every address routed to it (AnyIP). Each answer says where it was reached (local address),
// who asked (remote address) and the path, so a test can tell a direct fetch (remote = the client) from a fetch made
// by an engine (remote = the engine).
//   GET /bytes/<n>   n bytes of 'x' (at most 64 MiB) instead of the JSON body, for transfer tests
//   GET /slow/<n>/<ms>  n bytes of 'x' (at most 64 MiB) sent in equal pieces every 100 ms over ms (at most 10 min),
//                    never cached: a long-lived download
//   GET /nocache/... Cache-Control: no-store (otherwise max-age=60, so Squid may cache it)
//   GET /long/...    Cache-Control: max-age=3600 (objects that stay fresh through a long bench); /long/bytes/<n> too
//   GET /_counts     {"<address> <path>": n, ...}: how often each object was fetched (the counts request itself is not
// counted)
//   GET /_busy/<ms>  holds the server's event loop for ms (at most 10 s), as a loaded machine does, then answers
// An idle keep-alive connection stays open 120 s, longer than Squid keeps one (server_idle_pconn_timeout, 60 s): the
// client side closes first, so Squid never sends a request on a connection the origin is closing (docs/lab.md).
import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 80);
// '::' in a dual-stack lab: one socket takes both families (IPv4 peers as ::ffff:a.b.c.d, stripped below).
const host = process.argv[3] ?? '0.0.0.0';
const MAX_BYTES = 64 * 1024 * 1024;

const counts = new Map();

const server = createServer((req, res) => {
  const path = req.url ?? '/';
  if (path === '/_counts') {
    const body = JSON.stringify(Object.fromEntries(counts)) + '\n';
    res.writeHead(200, {
      'Content-Type': 'application/json',
      'Content-Length': String(Buffer.byteLength(body)),
      'Cache-Control': 'no-store',
    });
    res.end(body);
    return;
  }
  const busy = /^\/_busy\/(\d+)$/.exec(path);
  if (busy) {
    // Holds the event loop for <ms> (at most 10 s), as a loaded machine does.
    const until = Date.now() + Math.min(Number(busy[1]), 10_000);
    while (Date.now() < until);
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Cache-Control': 'no-store' });
    res.end('busy\n');
    return;
  }
  const key = `${req.socket.localAddress?.replace(/^::ffff:/, '')} ${path}`;
  if (counts.size < 1_000_000 || counts.has(key)) counts.set(key, (counts.get(key) ?? 0) + 1);
  const info = {
    local: req.socket.localAddress?.replace(/^::ffff:/, ''),
    localPort: req.socket.localPort,
    remote: req.socket.remoteAddress?.replace(/^::ffff:/, ''),
    remotePort: req.socket.remotePort,
    method: req.method,
    path,
    host: req.headers.host ?? null,
  };
  const headers = {
    'X-Origin': '1',
    'X-Origin-Local': String(info.local),
    'X-Origin-Remote': String(info.remote),
    'Cache-Control': path.startsWith('/nocache/')
      ? 'no-store'
      : path.startsWith('/long/')
        ? 'max-age=3600'
        : 'max-age=60',
  };
  const m = /^(?:\/long)?\/bytes\/(\d+)/.exec(path);
  if (m) {
    const n = Math.min(Number(m[1]), MAX_BYTES);
    res.writeHead(200, { ...headers, 'Content-Type': 'application/octet-stream', 'Content-Length': String(n) });
    res.end(Buffer.alloc(n, 0x78));
    return;
  }
  const slow = /^\/slow\/(\d+)\/(\d+)/.exec(path);
  if (slow) {
    const n = Math.min(Number(slow[1]), MAX_BYTES);
    const steps = Math.max(1, Math.ceil(Math.min(Number(slow[2]), 600_000) / 100));
    res.writeHead(200, {
      ...headers,
      'Cache-Control': 'no-store',
      'Content-Type': 'application/octet-stream',
      'Content-Length': String(n),
    });
    let sent = 0;
    let step = 0;
    const timer = setInterval(() => {
      step++;
      const upTo = step >= steps ? n : Math.floor((n * step) / steps);
      if (upTo > sent) res.write(Buffer.alloc(upTo - sent, 0x78));
      sent = upTo;
      if (step >= steps) {
        clearInterval(timer);
        res.end();
      }
    }, 100);
    res.on('close', () => clearInterval(timer));
    return;
  }
  const body = JSON.stringify(info) + '\n';
  res.writeHead(200, {
    ...headers,
    'Content-Type': 'application/json',
    'Content-Length': String(Buffer.byteLength(body)),
  });
  res.end(body);
});
server.keepAliveTimeout = 120_000;
server.listen({ port, host, ipv6Only: false }, () => {
  process.stdout.write(`listening ${host}:${port}\n`);
});
for (const sig of ['SIGTERM', 'SIGINT'])
  process.on(sig, () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
