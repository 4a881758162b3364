// Soak: a hostile host for --minutes against the real daemon (test/fuzz/harness.ts: wccpd under tsx, data plane
// none, an MD5-secured service 0 with two registered engines, B warming from A, the warm-up broker on). Every 100 ms
// it sends its share of a mix: floods of random and mutated datagrams to the router's WCCP port and the broker's ICP
// port (ordinary sockets, source port 0, forged engine addresses), forged ICP queries in the warming engine's name,
// malformed HTTP to the broker and the admin API, and it keeps slow clients (unfinished request heads) open against
// both. Every 30 s it prints the daemon's RSS and CPU, what it sent, the counters and the API's latency; at the end
// start vs end and the maximum, the drop counters by reason, the broker's counters, and whether the table stayed
// unchanged.
// Exit 1 if the daemon ended or the table changed. Root (a raw socket).
//   npx tsx bench/soak/hostile.ts [--minutes 10] [--seed N]
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { checkArgs, orExit } from '../cli.js';
import { BenchError } from '../dataplane-measure.js';
import {
  Draw,
  fixtureDatagrams,
  httpAttempt,
  icpDatagram,
  icpMutation,
  mutate,
  randomDatagram,
  wouldResolve,
} from '../../test/fuzz/inputs.js';
import {
  A,
  B,
  exchange,
  holdOpen,
  HostileGateway,
  OUTSIDER,
  STRANGER,
  udpReceiveBufferErrors,
} from '../../test/fuzz/harness.js';
import type { Table } from '../../test/fuzz/harness.js';

const CLI = {
  name: 'bench/soak/hostile',
  usage: `usage: sudo npx tsx bench/soak/hostile.ts [--minutes 10] [--seed N]
A hostile mix against the real daemon with two registered engines for --minutes (default 10): datagram floods to the
router's and the broker's UDP ports (ordinary, source port 0, forged engine addresses), forged ICP queries in the
warming engine's name, malformed HTTP and slow clients against the broker and the admin API. Prints the daemon's RSS
and CPU every 30 s, then start vs end and the maximum, the counters, and whether the table stayed unchanged; exit 1 if
the daemon ended or the table changed. --seed replays a run's choices (default: random, printed). Needs root.`,
  values: ['--minutes', '--seed'],
};
const args = orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));
const value = (name: string, fallback: number): number => {
  const i = args.indexOf(name);
  if (i < 0) return fallback;
  const v = Number(args[i + 1]);
  if (!Number.isFinite(v) || v <= 0)
    orExit(CLI, () => {
      throw new BenchError(`${name} needs a number above 0`);
    });
  return v;
};
const minutes = value('--minutes', 10);
const seed = value('--seed', Math.floor(Math.random() * 2 ** 32)) >>> 0;
if (process.getuid?.() !== 0)
  orExit(CLI, () => {
    throw new BenchError('needs root (a raw socket sends from source port 0 and forged addresses)');
  });

/** Per second: datagrams to the router, to the broker, forged member queries, malformed HTTP exchanges. */
const RATE = { router: 3000, broker: 2000, forged: 300, http: 20 };
/** Slow clients kept open: to the broker (from 8 addresses), to the admin API. */
const SLOW = { broker: 128, admin: 20 };
const TICK_MS = 100;
const REPORT_MS = 30_000;

interface Sample {
  readonly at: number;
  readonly rssMb: number;
  /** utime + stime, seconds. */
  readonly cpuS: number;
}
function sample(pid: number): Sample {
  const rss = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
  // Fields after the command's closing parenthesis: utime and stime are the 14th and 15th of the line.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(f[11]) + Number(f[12]);
  return { at: performance.now(), rssMb: rss, cpuS: ticks / 100 };
}

const d = new Draw(seed);
console.log(`hostile soak: ${minutes} min, seed ${seed} (--seed ${seed} replays the choices)`);
const g = await HostileGateway.start();
const stop = async () => {
  await g.stop();
};
process.once('SIGINT', () => void stop().then(() => process.exit(130)));
process.once('SIGTERM', () => void stop().then(() => process.exit(143)));

let exitCode = 0;
try {
  const table: Table = await g.table();
  const wccp = [...fixtureDatagrams().values(), ...g.engines.map((e) => e.hereIAmBytes())];
  const adminPort = Number(new URL(g.daemon.url).port);
  const adminHost = new URL(g.daemon.url).host;
  const sent = { router: 0, broker: 0, forged: 0, http: 0, slowOpened: 0 };
  const kernelDrops0 = udpReceiveBufferErrors();
  const seen0 = await g.seen();
  const first = sample(g.pid);
  let last = first;
  let peakRss = first.rssMb;
  let peakCpu = 0;
  let apiWorstMs = 0;
  let tableChanged: string | null = null;
  console.log(`  start: RSS ${first.rssMb.toFixed(1)} MB (wccpd under tsx, PID ${g.pid})`);
  console.log(
    '  time   RSS MB  CPU%(30s)  router sent/counted   broker sent/counted   forged  HTTP  slow  API ms  table',
  );

  // Slow clients: kept at SLOW.* open, reopened as the servers close them.
  type Held = Awaited<ReturnType<typeof holdOpen>> & { readonly count: number };
  const slow: { broker: Held[]; admin: Held[] } = { broker: [], admin: [] };
  const openNow = (xs: Held[]) => xs.reduce((a, h) => a + h.count - h.closedByServer(), 0);
  const topUp = async (xs: Held[], want: number, port: number, from: () => string) => {
    for (let i = xs.length - 1; i >= 0; i--) if ((xs[i]?.closedByServer() ?? 0) >= (xs[i]?.count ?? 0)) xs.splice(i, 1);
    if (openNow(xs) >= want) return;
    xs.push({ ...(await holdOpen(port, from(), 16)), count: 16 });
    sent.slowOpened += 16;
  };

  const end = performance.now() + minutes * 60_000;
  let nextReport = performance.now() + REPORT_MS;
  const httpInFlight = new Set<Promise<unknown>>();
  while (performance.now() < end) {
    const tick = performance.now();
    if (!(await g.alive())) throw new BenchError(`wccpd (PID ${g.pid}) ended:\n${g.lastOutput()}`);
    await g.keepAlive();
    for (let i = 0; i < RATE.router / (1000 / TICK_MS); i++) {
      const b = d.chance(0.2) ? randomDatagram(d) : mutate(d, d.pick(wccp), 'wccp', d.pick(wccp));
      if (d.chance(0.5)) await g.sendFrom(d.pick([A, B, STRANGER, OUTSIDER]), g.daemon.udpPort, b);
      else
        await g.sendRaw(d.pick([A, B, STRANGER, OUTSIDER]), d.chance(0.5) ? 0 : d.range(1, 65535), g.daemon.udpPort, b);
      sent.router++;
    }
    for (let i = 0; i < RATE.broker / (1000 / TICK_MS); i++) {
      const from = d.pick([STRANGER, OUTSIDER, A, B]);
      let b = d.chance(0.2) ? randomDatagram(d) : icpMutation(d, icpDatagram(d), icpDatagram(d));
      if ((from === A || from === B) && wouldResolve(b)) b = icpDatagram(d);
      if (d.chance(0.5)) await g.sendFrom(from, g.icpPort, b);
      else await g.sendRaw(from, d.chance(0.5) ? 0 : d.range(1, 65535), g.icpPort, b);
      sent.broker++;
    }
    // Forged queries in the warming engine's name (ICP has no authentication).
    for (let i = 0; i < RATE.forged / (1000 / TICK_MS); i++) {
      await g.sendRaw(
        B,
        d.range(1, 65535),
        g.icpPort,
        icpDatagram(d, `http://198.51.100.${d.int(256)}/forged${d.int(1e6)}`),
      );
      sent.forged++;
    }
    for (let i = 0; i < RATE.http / (1000 / TICK_MS); i++) {
      const admin = d.chance(0.5);
      const a = httpAttempt(d, admin ? '/api/v1/status' : `http://198.51.100.${d.int(256)}/h`, admin ? adminHost : 'x');
      const last = `GET /api/v1/status HTTP/1.1\r\nHost: ${adminHost}\r\nConnection: close\r\n\r\n`;
      const p = exchange(admin ? adminPort : g.httpPort, d.pick([STRANGER, B]), a.pieces, a.pauseMs, last);
      httpInFlight.add(p);
      void p.then(() => httpInFlight.delete(p));
      sent.http++;
    }
    await topUp(slow.broker, SLOW.broker, g.httpPort, () => `127.0.0.${60 + d.int(8)}`);
    await topUp(slow.admin, SLOW.admin, adminPort, () => STRANGER);

    if (performance.now() >= nextReport) {
      nextReport += REPORT_MS;
      const t0 = performance.now();
      const seen = await g.seen();
      const now = await g.table();
      const apiMs = performance.now() - t0;
      apiWorstMs = Math.max(apiWorstMs, apiMs);
      if (tableChanged === null && JSON.stringify(now) !== JSON.stringify(table))
        tableChanged = `changed after ${((performance.now() - first.at) / 60_000).toFixed(1)} min: change number ${table.changeNumber} -> ${now.changeNumber}`;
      const s = sample(g.pid);
      const cpu = (100 * (s.cpuS - last.cpuS)) / ((s.at - last.at) / 1000);
      peakRss = Math.max(peakRss, s.rssMb);
      peakCpu = Math.max(peakCpu, cpu);
      last = s;
      const open = openNow(slow.broker) + openNow(slow.admin);
      console.log(
        `  ${((s.at - first.at) / 60_000).toFixed(1).padStart(4)}m  ${s.rssMb.toFixed(1).padStart(6)}  ${cpu.toFixed(0).padStart(9)}  ${`${sent.router}/${seen.router - seen0.router}`.padStart(19)}  ${`${sent.broker + sent.forged}/${seen.broker - seen0.broker}`.padStart(20)}  ${String(sent.forged).padStart(6)}  ${String(sent.http).padStart(4)}  ${String(open).padStart(4)}  ${apiMs.toFixed(0).padStart(6)}  ${tableChanged === null ? 'same' : 'CHANGED'}`,
      );
    }
    const rest = TICK_MS - (performance.now() - tick);
    if (rest > 0) await new Promise((r) => setTimeout(r, rest));
  }
  await Promise.all(httpInFlight);
  for (const h of [...slow.broker, ...slow.admin]) h.close();
  await new Promise((r) => setTimeout(r, 1000));
  await g.keepAlive(true);

  const alive = await g.alive();
  const s = sample(g.pid);
  peakRss = Math.max(peakRss, s.rssMb);
  const status = await g.status();
  const seen = g.seenIn(status);
  const now = await g.table();
  if (tableChanged === null && JSON.stringify(now) !== JSON.stringify(table)) tableChanged = 'changed at the end';
  const elapsedS = (s.at - first.at) / 1000;
  console.log(`\nafter ${(elapsedS / 60).toFixed(1)} min (seed ${seed}):`);
  console.log(`  daemon             ${alive ? `runs, same PID ${g.pid}` : 'ENDED'}`);
  console.log(
    `  RSS                start ${first.rssMb.toFixed(1)} MB, end ${s.rssMb.toFixed(1)} MB, max ${peakRss.toFixed(1)} MB`,
  );
  console.log(
    `  CPU                ${((100 * (s.cpuS - first.cpuS)) / elapsedS).toFixed(0)}% of a core on average, ${peakCpu.toFixed(0)}% at most over 30 s`,
  );
  console.log(`  API                slowest status+buckets read at a report: ${apiWorstMs.toFixed(0)} ms`);
  console.log(
    `  sent               router ${sent.router}, broker ICP ${sent.broker} + ${sent.forged} forged member queries, ${sent.http} malformed HTTP exchanges, ${sent.slowOpened} slow connections`,
  );
  console.log(
    `  counted            router ${seen.router - seen0.router} (drops + HERE_I_AMs; the engines sent ${g.hereIAmsSent} in all), broker icp-received ${seen.broker - seen0.broker}; the kernel dropped ${udpReceiveBufferErrors() - kernelDrops0} for full receive buffers`,
  );
  console.log(
    `  router drops       ${JSON.stringify({ ...status.dropped, ...Object.fromEntries(Object.entries(status.decodeErrors).map(([k, v]) => [`decode-${k}`, v])) })}`,
  );
  console.log(`  broker counters    ${JSON.stringify(status.warmup)}`);
  console.log(`  admin counters     ${JSON.stringify(status.admin)}`);
  console.log(
    `  table              ${tableChanged === null ? `unchanged (change number ${now.changeNumber}, ${now.buckets.filter((b) => b === A).length} buckets A, ${now.buckets.filter((b) => b === B).length} B)` : tableChanged}`,
  );
  const engines = (await g.get('services/0/engines')) as {
    engines: {
      address: string;
      state: string;
      warmup: { warming: boolean; queries: number; peerHits: number; endReason: string | null } | null;
    }[];
  };
  for (const e of engines.engines)
    console.log(
      `  engine ${e.address}    ${e.state}${e.warmup === null ? '' : `, warm-up ${e.warmup.warming ? 'running' : `ended (${e.warmup.endReason ?? '?'})`}: ${e.warmup.queries} queries asked, ${e.warmup.peerHits} peer hits`}`,
    );
  if (!alive || tableChanged !== null) exitCode = 1;
} catch (e) {
  if (!(e instanceof BenchError)) throw e;
  console.error(`${CLI.name}: ${e.message}`);
  exitCode = 1;
} finally {
  await stop();
}
process.exit(exitCode);
