// One engine of bench/load-aware.ts, run in its namespace: registers with the router over WCCP (a strict TestEngine,
// a HERE_I_AM every second) and serves TCP on --port (where the namespace's nft redirects port 80), answering each
// connection with its address and counting it. The count is the engine's own: the bench measures load with it,
// apart from the daemon's kernel counters, so it checks the daemon's claim rather than repeating it.
//   stdout, every second: `c <unix ms> <connections so far> <buckets in the last I_SEE_YOU, or -1 without one>`
// Bounded: stops by itself after --seconds, on SIGTERM, or when stdin closes (the bench went away).
import { createServer } from 'node:net';
import { parseArgs } from 'node:util';
import { TestEngine } from '../../test/helpers/wccp-engine.js';

const { values } = parseArgs({
  options: {
    address: { type: 'string' },
    router: { type: 'string' },
    port: { type: 'string', default: '3129' },
    seconds: { type: 'string', default: '1200' },
  },
});
if (values.address === undefined || values.router === undefined) {
  console.error('usage: engine.ts --address A --router R [--port 3129] [--seconds N]');
  process.exit(1);
}
const address = values.address;
const deadline = Date.now() + Number(values.seconds) * 1000;

let connections = 0;
const server = createServer((s) => {
  connections++;
  s.on('error', () => undefined);
  s.end(`${address}\n`);
});
await new Promise<void>((resolve, reject) => {
  server.once('error', reject);
  server.listen(Number(values.port), '0.0.0.0', () => resolve());
});

const engine = new TestEngine({ address, router: { address: values.router, port: 2048 }, behaviour: 'strict' });
await engine.start();
let buckets = -1;
let running = true;
const stop = (): void => {
  running = false;
};
process.on('SIGTERM', stop);
process.stdin.on('end', stop).on('error', stop).resume();

const report = setInterval(() => process.stdout.write(`c ${Date.now()} ${connections} ${buckets}\n`), 1000);
while (running && Date.now() < deadline) {
  const t0 = Date.now();
  const seen = await engine.hereIAm({ timeoutMs: 900 }).catch(() => null);
  if (seen !== null) buckets = seen.myBuckets.length;
  const rest = 1000 - (Date.now() - t0);
  if (rest > 0 && running) await new Promise((r) => setTimeout(r, rest));
}
clearInterval(report);
process.stdout.write(`c ${Date.now()} ${connections} ${buckets}\n`);
await engine.stop();
server.close();
// Connections still open (none should be: each is answered and ended at once) must not hold the process.
setTimeout(() => process.exit(0), 500).unref();
