#!/usr/bin/env node
// bench/failover's relay load, run in a warming engine's namespace (its address): `parallel` loops, each asking the
// warm-up broker by ICP for one of the URLs and, on HIT, fetching it through the broker (only-if-cached, as Squid
// asks a sibling), until killed. Prints one JSON line a second: {bytes, ok, failed, miss} since the start.
//   node relay-load.mjs <local> <broker> <http-port> <icp-port> <parallel> <url>...
import { request } from 'node:http';
import { askIcp } from '../warmup/icp.mjs';

const [local, broker, httpArg, icpArg, parallelArg, ...urls] = process.argv.slice(2);
const totals = { bytes: 0, ok: 0, failed: 0, miss: 0 };
let n = 0;

async function icp(url) {
  return (await askIcp(local, broker, Number(icpArg), url, ++n, 2000)) === 2;
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
