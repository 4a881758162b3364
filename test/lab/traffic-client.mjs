#!/usr/bin/env node
// Steady client traffic for the lab (runs in the client namespace): GETs at a fixed rate over the origin's 256
// addresses (one per WCCP bucket; each bucket once per 256 requests, in a scattered order), each on a new connection,
// each a new uncacheable object (/nocache/traffic/<n>), or with --working-set PREFIX the same object of each bucket
// every time (PREFIX<bucket>, e.g. /long/demo/: cacheable, a working set of 256 objects); and one JSON line per
// answered or failed
// request: {t, bucket, ms, status, engine, direct, err}. `engine` is the Squid that served it (X-Cache / Via),
// `direct` is true when the origin saw the client itself (no engine in the path). Bounded: stops after --seconds
// or on SIGTERM/SIGINT, and prints `done <sent>`.
//   node traffic-client.mjs [--rate 40] [--seconds 300] [--timeout-ms 2000] [--client 203.0.113.10]
//     [--working-set /long/demo/]
import { request } from 'node:http';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : dflt;
};
const rate = Math.min(1000, Math.max(1, Number(opt('rate', 40))));
const seconds = Math.min(3600, Math.max(1, Number(opt('seconds', 300))));
const timeoutMs = Math.min(30_000, Math.max(100, Number(opt('timeout-ms', 2000))));
const client = opt('client', '203.0.113.10');
const workingSet = opt('working-set', null);
if (workingSet !== null && !/^\/[\w/.-]*$/.test(workingSet)) {
  process.stderr.write(`traffic-client: --working-set must be a path such as /long/demo/, got ${workingSet}\n`);
  process.exit(2);
}
const MAX_IN_FLIGHT = 200;

// The origin address of bucket b: the WCCP hash of an address is the XOR of its bytes (test/lab/addresses.ts).
const addressOf = (b) => `198.51.100.${198 ^ 51 ^ 100 ^ b}`;
let seq = 0;
let inFlight = 0;
let stopping = false;

function one() {
  // 97 is odd, so n * 97 mod 256 visits every bucket once per 256 requests, spread over the table.
  const bucket = (seq * 97) % 256;
  const n = seq++;
  const t = Date.now();
  const t0 = performance.now();
  inFlight++;
  let done = false;
  const finish = (fields) => {
    if (done) return;
    done = true;
    inFlight--;
    process.stdout.write(
      JSON.stringify({ t, bucket, ms: Math.round((performance.now() - t0) * 10) / 10, ...fields }) + '\n',
    );
  };
  const req = request(
    {
      host: addressOf(bucket),
      port: 80,
      path: workingSet === null ? `/nocache/traffic/${n}` : `${workingSet}${bucket}`,
      agent: false,
      headers: { Connection: 'close' },
      timeout: timeoutMs,
    },
    (res) => {
      // The engine that answered is the last to add itself: a Squid that got the object from a sibling (the warm-up
      // broker relaying another engine's copy) passes that engine's X-Cache and Via on before its own.
      const xc = [...String(res.headers['x-cache'] ?? '').matchAll(/\bfrom ([^\s,]+)/g)].at(-1);
      const via = [...String(res.headers.via ?? '').matchAll(/\d\.\d ([^\s,]+) \(squid/gi)].at(-1);
      const engine = xc?.[1] ?? via?.[1] ?? null;
      const direct = res.headers['x-origin-remote'] === client;
      res.resume();
      res.on('end', () => finish({ status: res.statusCode ?? 0, engine, direct }));
      res.on('error', (e) => finish({ status: 0, engine, direct, err: e.code ?? e.message }));
    },
  );
  req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
  req.on('error', (e) => finish({ status: 0, engine: null, direct: false, err: e.code ?? e.message }));
  req.end();
}

const started = Date.now();
const tick = setInterval(() => {
  if (stopping) return;
  // Catch up to the schedule, but never more than MAX_IN_FLIGHT open requests.
  const due = Math.floor(((Date.now() - started) / 1000) * rate);
  while (seq < due && inFlight < MAX_IN_FLIGHT) one();
  if (Date.now() - started >= seconds * 1000) stop();
}, 10);

function stop() {
  if (stopping) return;
  stopping = true;
  clearInterval(tick);
  const wait = setInterval(() => {
    if (inFlight === 0 || Date.now() - started > seconds * 1000 + timeoutMs + 1000) {
      clearInterval(wait);
      process.stdout.write(`done ${seq}\n`, () => process.exit(0));
    }
  }, 20);
}
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, stop);
process.stdout.write(`sending ${rate}/s for at most ${seconds} s\n`);
