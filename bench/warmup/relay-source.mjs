#!/usr/bin/env node
// bench/warmup-relay's source engine, in a process of its own: on each address given it answers every ICP query HIT
// and every only-if-cached GET with one object of `bytes` bytes from memory (Content-Length), as a warm Squid would.
//   node relay-source.mjs <icp-port> <http-port> <bytes> <address>...
// Prints "ready" once it listens.
import { createSocket } from 'node:dgram';
import { createServer } from 'node:http';

const [icpArg, httpArg, bytesArg, ...addresses] = process.argv.slice(2);
const body = Buffer.alloc(Number(bytesArg), 0x61);
let pending = 0;
for (const address of addresses) {
  pending += 2;
  const icp = createSocket('udp4');
  icp.on('message', (q, r) => {
    // ICP_OP_QUERY (1) -> ICP_OP_HIT (2): the header with the query's request number, then the URL (after the
    // query's 4-byte requester address).
    if (q.length < 25 || q[0] !== 1) return;
    const url = q.subarray(24);
    const out = Buffer.alloc(20 + url.length);
    out[0] = 2;
    out[1] = 2;
    out.writeUInt16BE(out.length, 2);
    q.copy(out, 4, 4, 8);
    url.copy(out, 20);
    icp.send(out, r.port, r.address);
  });
  icp.bind(Number(icpArg), address, () => --pending === 0 && console.log('ready'));
  const http = createServer((req, res) => {
    if (!/only-if-cached/.test(String(req.headers['cache-control'] ?? ''))) {
      res.writeHead(504, { 'Content-Length': 0 });
      res.end();
      return;
    }
    res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': body.length });
    res.end(req.method === 'HEAD' ? undefined : body);
  });
  http.keepAliveTimeout = 120_000;
  http.listen(Number(httpArg), address, () => --pending === 0 && console.log('ready'));
}
