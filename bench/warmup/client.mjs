#!/usr/bin/env node
// The bench's client, run inside the lab's client namespace: GETs each URL of a file (one per line) with a new
// connection each (intercepted by wccpd like any client's), `concurrency` at a time, and prints one JSON array:
// per URL, in the file's order, [status (0 = failed), milliseconds, start offset in ms].
//   node client.mjs <url-file> <concurrency> <timeout-ms>
import { readFileSync } from 'node:fs';
import { get } from 'node:http';

const [file = '', concurrencyArg = '4', timeoutArg = '15000'] = process.argv.slice(2);
const urls = readFileSync(file, 'utf8')
  .split('\n')
  .filter((l) => l !== '');
const concurrency = Math.max(1, Number(concurrencyArg));
const timeoutMs = Number(timeoutArg);
const out = new Array(urls.length);
const t0 = performance.now();

function one(url) {
  return new Promise((resolve) => {
    const start = performance.now();
    let done = false;
    const finish = (status) => {
      if (!done) {
        done = true;
        resolve([status, performance.now() - start, start - t0]);
      }
    };
    const req = get(url, { agent: false, headers: { Connection: 'close' } }, (res) => {
      res.on('data', () => undefined);
      res.on('end', () => finish(res.statusCode ?? 0));
      res.on('error', () => finish(0));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timeout')));
    req.on('error', () => finish(0));
  });
}

let next = 0;
async function worker() {
  while (next < urls.length) {
    const i = next++;
    out[i] = await one(urls[i]);
  }
}
await Promise.all(Array.from({ length: Math.min(concurrency, urls.length) }, worker));
process.stdout.write(
  JSON.stringify(out.map(([s, ms, at]) => [s, Math.round(ms * 1000) / 1000, Math.round(at)])) + '\n',
);
