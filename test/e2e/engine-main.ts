// A strict WCCP test engine as a process, for end-to-end tests: runs in an engine namespace and sends a HERE_I_AM
// every --interval-ms (echoing the Receive ID of the last I_SEE_YOU), printing one JSON line per round. Bounded: it
// stops by itself after --rounds (default 600) or on SIGTERM.
import { parseArgs } from 'node:util';
import { TestEngine } from '../helpers/wccp-engine.js';

const { values } = parseArgs({
  options: {
    address: { type: 'string' },
    router: { type: 'string' },
    'interval-ms': { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '600' },
    weight: { type: 'string', default: '10000' },
  },
});
if (values.address === undefined || values.router === undefined) {
  console.error('usage: engine-main --address A --router R [--interval-ms N] [--rounds N] [--weight W]');
  process.exit(1);
}
const intervalMs = Number(values['interval-ms']);
const rounds = Number(values.rounds);
const engine = new TestEngine({
  address: values.address,
  router: { address: values.router, port: 2048 },
  weight: Number(values.weight),
  behaviour: 'strict',
});
await engine.start();
let stopping = false;
process.on('SIGTERM', () => {
  stopping = true;
});
console.log(`engine ${values.address} started`);
for (let i = 0; i < rounds && !stopping; i++) {
  const t0 = Date.now();
  const seen = await engine.hereIAm({ timeoutMs: Math.max(50, Math.min(intervalMs - 50, 900)) });
  console.log(
    JSON.stringify({
      at: t0,
      round: i,
      iSeeYou: seen && { receiveId: seen.receiveId, engines: seen.engines, buckets: seen.myBuckets.length },
    }),
  );
  const rest = intervalMs - (Date.now() - t0);
  if (rest > 0) await new Promise((r) => setTimeout(r, rest));
}
await engine.stop();
