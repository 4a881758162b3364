// Client load for bench/failover.ts, run in the lab's client namespace: one open-loop request stream per bucket (a
// GET to the origin address of that bucket, each on a new connection, so each is classified by the table in force
// when its SYN passes the gateway). Every bucket is asked once per --slow-ms; buckets being watched are asked every
// --fast-ms until one answer comes from an engine other than the faulted one. Open loop: a hung request does not
// delay the next, so the first request after the table changed is never held back by one sent before.
//   stdin:  `watch <engine name> <b,b,...>` | `slow` | `quit`
//   --records FILE: `<bucket> <start ms> <end ms> <status> <engine|-> <error|->` per request, appended every 100 ms
//   stdout: `w <bucket> <ms>` when a watched bucket was served elsewhere, `l <most timer lateness ms in the last
// second>`
// The records go to a file, not a pipe: a write to a full pipe blocks Node (pipes are synchronous on Linux), and a
// reader slower than the requests would stall them.
import { openSync, writeSync } from 'node:fs';
import { request } from 'node:http';
import { createInterface } from 'node:readline';
import { originAddressForBucket } from '../../test/lab/addresses.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(name);
  const v = i < 0 ? NaN : Number(process.argv[i + 1]);
  return Number.isFinite(v) && v > 0 ? v : dflt;
};
const FAST_MS = arg('--fast-ms', 100);
const SLOW_MS = arg('--slow-ms', 1000);
const TIMEOUT_MS = arg('--timeout-ms', 2000);
// Bound: never outlive the bench that started it.
const MAX_MS = arg('--max-s', 3600) * 1000;
const BUCKETS = 256;

const recordsAt = process.argv.indexOf('--records');
const records = openSync(recordsAt < 0 ? '/dev/null' : (process.argv[recordsAt + 1] ?? '/dev/null'), 'a');

const now = (): number => performance.timeOrigin + performance.now();
const out: string[] = [];
const rec: string[] = [];
const flush = (): void => {
  if (rec.length > 0) writeSync(records, rec.join('\n') + '\n');
  rec.length = 0;
  if (out.length > 0) process.stdout.write(out.join('\n') + '\n');
  out.length = 0;
};
setInterval(flush, 100);

/** Per bucket: the engine whose buckets are watched (null = slow), the last start, the pending timer. */
const watching: (string | null)[] = new Array<string | null>(BUCKETS).fill(null);
const lastStart: number[] = new Array<number>(BUCKETS).fill(0);
const timers: (ReturnType<typeof setTimeout> | null)[] = new Array<ReturnType<typeof setTimeout> | null>(BUCKETS).fill(
  null,
);
let inFlight = 0;
let lateMost = 0;
let stopping = false;

function schedule(b: number): void {
  if (stopping) return;
  const period = watching[b] !== null ? FAST_MS : SLOW_MS;
  const due = lastStart[b] === 0 ? now() + (b * SLOW_MS) / BUCKETS : (lastStart[b] ?? 0) + period;
  // A bucket watched anew is due at once (its last start was up to SLOW_MS ago): that is not lateness.
  const dueFrom = Math.max(due, now());
  const t = setTimeout(
    () => {
      timers[b] = null;
      lateMost = Math.max(lateMost, now() - dueFrom);
      fire(b);
      schedule(b);
    },
    Math.max(0, due - now()),
  );
  timers[b] = t;
}

function reschedule(b: number): void {
  const t = timers[b];
  if (t) clearTimeout(t);
  schedule(b);
}

function fire(b: number): void {
  const start = now();
  lastStart[b] = start;
  const watched = watching[b] ?? null;
  inFlight++;
  let done = false;
  const finish = (status: number, engine: string, err: string): void => {
    if (done) return;
    done = true;
    inFlight--;
    clearTimeout(timer);
    const end = now();
    rec.push(`${b} ${start.toFixed(1)} ${end.toFixed(1)} ${status} ${engine} ${err}`);
    if (status === 200 && watched !== null && watching[b] === watched && engine !== watched) {
      watching[b] = null;
      out.push(`w ${b} ${start.toFixed(1)}`);
      reschedule(b);
    }
  };
  const req = request(
    {
      host: originAddressForBucket(b),
      port: 80,
      path: `/failover/${b}`,
      agent: false,
      headers: { Connection: 'close' },
    },
    (res) => {
      const engine = /\bfrom (\S+)/.exec(String(res.headers['x-cache'] ?? ''))?.[1] ?? '-';
      res.resume();
      res.on('end', () => finish(res.statusCode ?? 0, engine, '-'));
      res.on('error', (e: NodeJS.ErrnoException) => finish(0, engine, e.code ?? 'error'));
    },
  );
  const timer = setTimeout(() => {
    req.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' }));
  }, TIMEOUT_MS);
  req.on('error', (e: NodeJS.ErrnoException) => finish(0, '-', e.code ?? 'error'));
  req.end();
}

function stop(): void {
  if (stopping) return;
  stopping = true;
  for (const t of timers) if (t) clearTimeout(t);
  flush();
  // Let in-flight requests end (each is bounded by TIMEOUT_MS), then go.
  setTimeout(() => {
    flush();
    process.exit(0);
  }, TIMEOUT_MS + 200).unref();
  const poll = setInterval(() => {
    if (inFlight === 0) {
      clearInterval(poll);
      flush();
      process.exit(0);
    }
  }, 50);
}

setInterval(() => {
  out.push(`l ${lateMost.toFixed(0)}`);
  lateMost = 0;
}, 1000);
setTimeout(stop, MAX_MS);
for (let b = 0; b < BUCKETS; b++) schedule(b);

const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const [cmd, engine, list] = line.trim().split(/\s+/);
  if (cmd === 'watch' && engine && list) {
    for (const s of list.split(',')) {
      const b = Number(s);
      if (!Number.isInteger(b) || b < 0 || b >= BUCKETS) continue;
      watching[b] = engine;
      reschedule(b);
    }
  } else if (cmd === 'slow') {
    watching.fill(null);
  } else if (cmd === 'quit') {
    stop();
  }
});
// The bench went away: stop too.
rl.on('close', stop);
