#!/usr/bin/env node
// bench/failover's relay load, run in a warming engine's namespace (its address): `parallel` loops, each asking the
// warm-up broker by ICP for one of the URLs and, on HIT, fetching it through the broker (only-if-cached, as Squid
// asks a sibling), until killed. Prints one JSON line a second: {bytes, ok, failed, miss} since the start.
//   node relay-load.mjs <local> <broker> <http-port> <icp-port> <parallel> <url>...
import { createSocket } from 'node:dgram';
import { request } from 'node:http';

const [local, broker, httpArg, icpArg, parallelArg, ...urls] = process.argv.slice(2);
const totals = { bytes: 0, ok: 0, failed: 0, miss: 0 };
let n = 0;

function icp(url) {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    const u = Buffer.from(`${url}\0`);
    const q = Buffer.alloc(24 + u.length);
    q[0] = 1;
    q[1] = 2;
    q.writeUInt16BE(q.length, 2);
    q.writeUInt32BE(++n, 4);
    u.copy(q, 24);
    const t = setTimeout(() => {
      s.close();
      resolve(false);
    }, 2000);
    s.on('message', (r) => {
      clearTimeout(t);
      s.close();
      resolve(r[0] === 2);
    });
    s.on('error', () => resolve(false));
    s.bind(0, local, () => s.send(q, Number(icpArg), broker));
  });
}

function fetchOnce(url) {
  return new Promise((resolve) => {
    let bytes = 0;
    const req = request(
      {
        host: broker,
        port: Number(httpArg),
        path: url,
        localAddress: local,
        agent: false,
        headers: { Host: new URL(url).host, 'Cache-Control': 'only-if-cached' },
        timeout: 10_000,
      },
      (res) => {
        res.on('data', (c) => (bytes += c.length));
        res.on('end', () => resolve({ ok: res.statusCode === 200, bytes }));
        res.on('error', () => resolve({ ok: false, bytes }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => resolve({ ok: false, bytes }));
    req.end();
  });
}

async function loop(k) {
  for (let i = k; ; i++) {
    const url = urls[i % urls.length];
    if (!(await icp(url))) {
      totals.miss++;
      await new Promise((r) => setTimeout(r, 50));
      continue;
    }
    const r = await fetchOnce(url);
    totals.bytes += r.bytes;
    if (r.ok) totals.ok++;
    else totals.failed++;
  }
}

setInterval(() => process.stdout.write(JSON.stringify(totals) + '\n'), 1000);
for (let k = 0; k < Number(parallelArg); k++) void loop(k);
