// The client of bench/load-aware.ts, run in the lab's client namespace: opens --rate new TCP connections a second to
// port 80 of destinations drawn from the Zipf mix (mix.ts), each read to its end (the engine answers its address) and
// closed. Open loop at a fixed rate: a slow connection does not delay the next; past --max-in-flight a due connection
// is skipped and counted, so the rate never grows into a backlog.
//   stdout, every second: `s <unix ms> <started> <ok> <failed> <skipped> <answerer>=<n>,...` (all since the start)
//   at the end: `b <connections started per bucket, 256 comma-separated>`, then `end`
// Bounded: stops by itself after --seconds, on SIGTERM, or when stdin closes (the bench went away).
import { connect } from 'node:net';
import { parseArgs } from 'node:util';
import { bucketOf } from '../../test/lab/addresses.js';
import { sampler, zipfMix } from './mix.js';

const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '60' },
    seed: { type: 'string', default: '1' },
    exponent: { type: 'string', default: '1' },
    'timeout-ms': { type: 'string', default: '2000' },
    'max-in-flight': { type: 'string', default: '400' },
  },
});
const RATE = Number(values.rate);
const SECONDS = Number(values.seconds);
const TIMEOUT_MS = Number(values['timeout-ms']);
const MAX_IN_FLIGHT = Number(values['max-in-flight']);
const mix = zipfMix(Number(values.exponent), Number(values.seed));
// The draws have a seed of their own (the mix's + 1): the same mix, its own sequence.
const draw = sampler(mix, Number(values.seed) + 1);
const bucketOfRank = mix.addresses.map(bucketOf);

let started = 0;
let ok = 0;
let failed = 0;
let skipped = 0;
let inFlight = 0;
const answered = new Map<string, number>();
const perBucket = new Array<number>(256).fill(0);

function open(): void {
  const rank = draw();
  const host = mix.addresses[rank] as string;
  const b = bucketOfRank[rank] as number;
  perBucket[b] = (perBucket[b] ?? 0) + 1;
  inFlight++;
  let data = '';
  let done = false;
  const finish = (good: boolean): void => {
    if (done) return;
    done = true;
    inFlight--;
    clearTimeout(timer);
    const who = data.trim();
    if (good && who !== '') {
      ok++;
      answered.set(who, (answered.get(who) ?? 0) + 1);
    } else failed++;
    s.destroy();
  };
  const s = connect({ host, port: 80 });
  const timer = setTimeout(() => finish(false), TIMEOUT_MS);
  s.setEncoding('utf8');
  s.on('data', (d: string) => (data += d));
  s.on('end', () => finish(true));
  s.on('error', () => finish(false));
}

const line = (): string =>
  `s ${Date.now()} ${started} ${ok} ${failed} ${skipped} ${[...answered].map(([k, v]) => `${k}=${v}`).join(',')}\n`;

const t0 = performance.now();
let stopping = false;
const tick = setInterval(() => {
  const due = Math.min(Math.floor(((performance.now() - t0) / 1000) * RATE), Math.floor(SECONDS * RATE));
  while (started < due) {
    started++;
    if (inFlight >= MAX_IN_FLIGHT) skipped++;
    else open();
  }
  if (started >= SECONDS * RATE) stop();
}, 10);
const report = setInterval(() => process.stdout.write(line()), 1000);

function stop(): void {
  if (stopping) return;
  stopping = true;
  clearInterval(tick);
  // Connections in flight end within TIMEOUT_MS (each has its timer).
  const wait = setInterval(() => {
    if (inFlight > 0) return;
    clearInterval(wait);
    clearInterval(report);
    process.stdout.write(`${line()}b ${perBucket.join(',')}\nend\n`);
    process.exit(0);
  }, 20);
}
process.on('SIGTERM', stop);
process.stdin.on('end', stop).on('error', stop).resume();
