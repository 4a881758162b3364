#!/usr/bin/env node
// bench/warmup-relay's engine side, in a process of its own: `count` fetches of `url` at once, from `local`, each
// through a proxy at host:port (GET url, only-if-cached, as Squid asks a sibling). With an ICP port, each fetch first
// asks the broker by ICP (from `local`) and fetches only after its HIT, as Squid does. Prints one JSON line:
// [{status, bytes, ms}] per fetch.
//   node relay-client.mjs <local> <proxy-host> <proxy-port> <url> <count> [icp-port]
import { createSocket } from 'node:dgram';
import { request } from 'node:http';

const [local, host, portArg, url, countArg, icpArg] = process.argv.slice(2);

function icpHit(n) {
  return new Promise((resolve, reject) => {
    const s = createSocket('udp4');
    const u = Buffer.from(`${url}\0`);
    const q = Buffer.alloc(24 + u.length);
    q[0] = 1;
    q[1] = 2;
    q.writeUInt16BE(q.length, 2);
    q.writeUInt32BE(1000 + n, 4);
    u.copy(q, 24);
    const t = setTimeout(() => {
      s.close();
      reject(new Error('no ICP reply in 5 s'));
    }, 5000);
    s.on('message', (r) => {
      clearTimeout(t);
      s.close();
      if (r[0] === 2) resolve();
      else reject(new Error(`ICP opcode ${r[0]}, not HIT`));
    });
    s.bind(0, local, () => s.send(q, Number(icpArg), host));
  });
}

function fetchOnce() {
  return new Promise((resolve) => {
    const t0 = performance.now();
    let bytes = 0;
    const req = request(
      {
        host,
        port: Number(portArg),
        path: url,
        localAddress: local,
        agent: false,
        headers: { Host: new URL(url).host, 'Cache-Control': 'only-if-cached' },
      },
      (res) => {
        res.on('data', (c) => (bytes += c.length));
        res.on('end', () => resolve({ status: res.statusCode, bytes, ms: performance.now() - t0 }));
        res.on('error', () => resolve({ status: 0, bytes, ms: performance.now() - t0 }));
      },
    );
    req.on('error', (e) => resolve({ status: 0, bytes, ms: performance.now() - t0, error: e.message }));
    req.end();
  });
}

const out = await Promise.all(
  Array.from({ length: Number(countArg) }, async (_, i) => {
    if (icpArg !== undefined) await icpHit(i);
    return fetchOnce();
  }),
);
process.stdout.write(JSON.stringify(out) + '\n');
