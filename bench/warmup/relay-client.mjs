#!/usr/bin/env node
// bench/warmup-relay's engine side, in a process of its own: `count` fetches of `url` at once, from `local`, each
// through a proxy at host:port (GET url, only-if-cached, as Squid asks a sibling). With an ICP port, each fetch first
// asks the broker by ICP (from `local`) and fetches only after its HIT, as Squid does. Prints one JSON line:
// [{status, bytes, ms}] per fetch.
//   node relay-client.mjs <local> <proxy-host> <proxy-port> <url> <count> [icp-port]
import { request } from 'node:http';
import { askIcp } from './icp.mjs';

const [local, host, portArg, url, countArg, icpArg] = process.argv.slice(2);

async function icpHit(n) {
  const opcode = await askIcp(local, host, Number(icpArg), url, 1000 + n, 5000);
  if (opcode !== 2) throw new Error(opcode === null ? 'no ICP reply in 5 s' : `ICP opcode ${opcode}, not HIT`);
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
