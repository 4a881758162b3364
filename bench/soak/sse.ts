// Soak: the event stream under clients that never read. Runs the built daemon (bin/wccpd.js, data plane none) with
// two test engines twice, side by side: once with one reading event-stream client only (the reference: what driving
// the events costs by itself), once with N more clients that stop reading after the response head. Events are driven
// through the API (drain/undrain) until the reader has seen E of them, and in the second run on until every stalled
// client is dropped. Prints the daemon's RSS growth at each point, the drops, what the kernel holds for the stalled
// sockets (not the daemon's memory), and the cap: clients past admin.eventClients get 503. Exit 1 when RSS grew by
// the target or more after E events with the stalled clients.
//
//   npm run build && npx tsx bench/soak/sse.ts [--clients 50] [--events 20000] [--target-mb 50]
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TestEngine } from '../../test/helpers/wccp-engine.js';
import { freeTcpPort, freeUdpPort, waitFor } from '../../test/helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../../test/helpers/prom-text.js';
import type { StatusView } from '../../src/admin/api-types.js';
import { EVENT_BUFFER_LIMIT } from '../../src/admin/http.js';
import { checkArgs, orExit } from '../cli.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TOKEN = 'soak-token';

const CLI = {
  name: 'bench/soak/sse',
  usage: `usage: npm run build && npx tsx bench/soak/sse.ts [--clients 50] [--events 20000] [--target-mb 50]
The built daemon's event stream with --clients clients that stop reading, beside one reading client: RSS growth after
--events events, the drops, the cap. Exit 1 when RSS grew by --target-mb or more.`,
  values: ['--clients', '--events', '--target-mb'],
};
orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const v = i < 0 ? fallback : Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} needs a number`);
  return v;
}

const CLIENTS = arg('clients', 50);
const EVENTS = arg('events', 20_000);
const TARGET_MB = arg('target-mb', 50);
const MB = 1024 * 1024;

function rssBytes(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

const mb = (n: number) => `${(n / MB).toFixed(1)} MB`;

interface StreamClient {
  readonly socket: Socket;
  head(): Promise<string>;
  events(): number;
  closed(): boolean;
}

/** An event-stream client; `reading: false` stops reading once the response head arrived. */
function openStream(port: number, reading: boolean): StreamClient {
  const socket = connect(port, '127.0.0.1');
  let head = '';
  let events = 0;
  let tail = '';
  let closed = false;
  socket.on('data', (d: Buffer) => {
    const s = tail + d.toString('latin1');
    if (!head) {
      const end = s.indexOf('\r\n\r\n');
      if (end >= 0) head = s.slice(0, s.indexOf('\r\n'));
      if (end >= 0 && !reading) socket.pause();
    }
    events += s.split('\ndata: ').length - 1;
    tail = s.slice(-8);
  });
  socket.on('close', () => {
    closed = true;
  });
  socket.on('error', () => undefined);
  socket.write(`GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAccept: text/event-stream\r\n\r\n`);
  return {
    socket,
    head: () => waitFor('the response head', async () => head || null, 10_000),
    events: () => events,
    closed: () => closed,
  };
}

/** Bytes the kernel holds for connections to the admin port: the clients' receive queues and the daemon's send queues.
 * */
async function kernelQueued(port: number): Promise<number> {
  const out = await new Promise<string>((resolve) => {
    const p = spawn('ss', ['-Htn', 'state', 'established', `( sport = :${port} or dport = :${port} )`]);
    let text = '';
    p.stdout.on('data', (d: Buffer) => {
      text += d.toString();
    });
    p.on('close', () => resolve(text));
    p.on('error', () => resolve(''));
  });
  return out.split('\n').reduce((sum, line) => {
    const [recvQ, sendQ] = line.trim().split(/\s+/).map(Number);
    return sum + (recvQ ?? 0) + (sendQ ?? 0);
  }, 0);
}

interface Point {
  readonly events: number;
  readonly seconds: number;
  readonly growth: number;
  readonly dropped: number;
  readonly kernel: number;
}

interface RunResult {
  readonly baseline: number;
  readonly accepted: number;
  readonly first: Point;
  /** Only with stalled clients: when every one of them was dropped (or the bound on events was reached). */
  readonly last: Point | null;
  readonly closedSeen: number;
  readonly posts: number;
  readonly cap: {
    readonly max: number;
    readonly opened: number;
    readonly got503: number;
    readonly status: number;
    readonly metric: number;
  };
  readonly droppedMetric: number;
  readonly logLines: number;
  readonly dropLines: number;
}

async function run(stalledClients: number): Promise<RunResult> {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-soak-sse-${process.pid}-`));
  const udpPort = await freeUdpPort();
  const httpPort = await freeTcpPort();
  const config = join(dir, 'wccpd.yaml');
  writeFileSync(
    config,
    [
      'router:',
      '  address: 127.0.0.1',
      `  port: ${udpPort}`,
      'admin:',
      `  listen: 127.0.0.1:${httpPort}`,
      `  token: ${TOKEN}`,
      `stateDir: ${join(dir, 'state')}`,
      'dataplane:',
      '  backend: none',
      'logging:',
      '  level: warn',
      'services:',
      '  - id: 0',
      '    engines:',
      '      allow: [127.0.0.0/24]',
      '',
    ].join('\n'),
  );
  const daemon = spawn(process.execPath, [join(ROOT, 'bin/wccpd.js'), '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((r) => daemon.once('exit', () => r()));
  let logLines = 0;
  let dropLines = 0;
  const onLog = (d: Buffer) => {
    const s = d.toString();
    logLines += s.split('\n').length - 1;
    dropLines += s.split('event-stream client').length - 1;
  };
  daemon.stdout.on('data', onLog);
  daemon.stderr.on('data', onLog);
  const url = `http://127.0.0.1:${httpPort}`;
  const status = async () => (await (await fetch(`${url}/api/v1/status`)).json()) as StatusView;
  const engines = ['127.0.0.11', '127.0.0.12'].map(
    (address) => new TestEngine({ address, router: { address: '127.0.0.1', port: udpPort } }),
  );
  const clients: StreamClient[] = [];
  let keepAlive: ReturnType<typeof setInterval> | undefined;
  let sampler: ReturnType<typeof setInterval> | undefined;
  try {
    await waitFor('the admin API', async () => ((await fetch(`${url}/api/v1/status`)).ok ? true : null), 20_000);
    for (const e of engines) await e.start();
    for (let round = 0; round < 2; round++) for (const e of engines) await e.hereIAm();
    keepAlive = setInterval(() => {
      for (const e of engines) void e.hereIAm().catch(() => undefined);
    }, 3000);
    await waitFor('both engines holding buckets', async () => {
      const t = (await (await fetch(`${url}/api/v1/services/0/buckets`)).json()) as { buckets: (string | null)[] };
      return engines.every((e) => t.buckets.includes(e.options.address)) ? true : null;
    });

    let posts = 0;
    const post = async () => {
      const what = posts++ % 2 === 0 ? 'drain' : 'undrain';
      const r = await fetch(`${url}/api/v1/services/0/engines/127.0.0.12/${what}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      await r.arrayBuffer();
    };
    // Warm up (JIT, the recent-events ring, the state writer) before the baseline.
    for (let i = 0; i < 200; i++) await post();
    await new Promise((r) => setTimeout(r, 1000));
    const baseline = rssBytes(daemon.pid!);

    for (let i = 0; i < stalledClients; i++) clients.push(openStream(httpPort, false));
    const reader = openStream(httpPort, true);
    clients.push(reader);
    const stalled = clients.slice(0, stalledClients);
    const accepted = (await Promise.all(stalled.map((c) => c.head()))).filter((h) => / 200 /.test(h)).length;
    await reader.head();

    let peak = baseline;
    sampler = setInterval(() => {
      peak = Math.max(peak, rssBytes(daemon.pid!));
    }, 100);
    const started = Date.now();
    const from = reader.events();
    /** Drives events until `limit` more reached the reader or `done` (bounded: at least one event per request). */
    const drive = async (limit: number, done: () => Promise<boolean>) => {
      const at = reader.events();
      for (let n = 0; n < limit && reader.events() - at < limit && !reader.closed(); n++) {
        if (n % 100 === 99 && (await done())) break;
        await post();
      }
      await new Promise((r) => setTimeout(r, 500));
      peak = Math.max(peak, rssBytes(daemon.pid!));
    };
    const point = async (): Promise<Point> => ({
      events: reader.events() - from,
      seconds: (Date.now() - started) / 1000,
      growth: peak - baseline,
      dropped: (await status()).admin.eventClientsDropped,
      kernel: await kernelQueued(httpPort),
    });
    // The kernel's socket buffers (a few MB per connection) take the first events, so after E events few or no
    // stalled client may be dropped yet; the second point goes on until every one is (bounded by 3 x E events).
    await drive(EVENTS, async () => false);
    const first = await point();
    let last: Point | null = null;
    let closedSeen = 0;
    if (stalledClients > 0) {
      await drive(3 * EVENTS, async () => (await status()).admin.eventClientsDropped >= stalledClients);
      last = await point();
      // A dropped client sees its stream end once it reads again.
      for (const c of stalled) c.socket.resume();
      await waitFor(
        'the dropped clients to see the end',
        async () => (stalled.filter((c) => c.closed()).length >= last!.dropped ? true : null),
        10_000,
      ).catch(() => undefined);
      closedSeen = stalled.filter((c) => c.closed()).length;
    }

    // Over the cap: open as many as it takes to pass admin.eventClients by 5.
    const mid = await status();
    const opened = Math.max(0, mid.admin.eventClientsMax - mid.admin.eventClients + 5);
    const more = Array.from({ length: opened }, () => openStream(httpPort, false));
    clients.push(...more);
    const got503 = (await Promise.all(more.map((c) => c.head()))).filter((h) => / 503 /.test(h)).length;
    const end = await status();
    const { samples } = parsePrometheusText(await (await fetch(`${url}/metrics`)).text());
    const metric = (name: string) => sampleValue(samples, name, {}) ?? NaN;
    return {
      baseline,
      accepted,
      first,
      last,
      closedSeen,
      posts,
      cap: {
        max: end.admin.eventClientsMax,
        opened,
        got503,
        status: end.admin.eventClientsRefused,
        metric: metric('wccpd_admin_event_clients_refused_total'),
      },
      droppedMetric: metric('wccpd_admin_event_clients_dropped_total'),
      logLines,
      dropLines,
    };
  } finally {
    clearInterval(keepAlive);
    clearInterval(sampler);
    for (const c of clients) c.socket.destroy();
    for (const e of engines) await e.stop();
    daemon.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    if (daemon.exitCode === null && daemon.signalCode === null) daemon.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<number> {
  if (!existsSync(join(ROOT, 'dist')))
    throw new Error('dist/ is missing: run npm run build first (the soak runs the built daemon)');
  const ref = await run(0);
  const soak = await run(CLIENTS);
  const last = soak.last ?? soak.first;
  const rows: Array<[string, string, string, string]> = [
    ['', 'reference: 1 reader', `+ ${CLIENTS} stalled`, '+ stalled, until all dropped'],
    [
      'events delivered to the reader',
      `${ref.first.events} in ${ref.first.seconds.toFixed(0)} s`,
      `${soak.first.events} in ${soak.first.seconds.toFixed(0)} s`,
      `${last.events} in ${last.seconds.toFixed(0)} s`,
    ],
    ['daemon RSS growth (peak - baseline)', mb(ref.first.growth), mb(soak.first.growth), mb(last.growth)],
    ['  minus the reference', '', mb(soak.first.growth - ref.first.growth), mb(last.growth - ref.first.growth)],
    [
      'stalled clients dropped',
      '-',
      `${soak.first.dropped} of ${soak.accepted}`,
      `${last.dropped} of ${soak.accepted}`,
    ],
    ['bytes the kernel holds (not RSS)', mb(ref.first.kernel), mb(soak.first.kernel), mb(last.kernel)],
  ];
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
  console.log(
    `soak/sse: ${CLIENTS} event-stream clients that do not read, ${EVENTS} events driven by drain/undrain, node ${process.version}`,
  );
  for (const r of rows)
    console.log(`  ${r[0].padEnd(widths[0]!)}  ${r[1].padEnd(widths[1]!)}  ${r[2].padEnd(widths[2]!)}  ${r[3]}`);
  console.log(
    `  RSS baselines: reference ${mb(ref.baseline)}, stalled ${mb(soak.baseline)}; bound per client in the daemon ` +
      `${EVENT_BUFFER_LIMIT / 1024} KiB (x ${CLIENTS} = ${mb(CLIENTS * EVENT_BUFFER_LIMIT)})`,
  );
  console.log(
    `  dropped: status ${last.dropped}, metric ${soak.droppedMetric}, end of stream seen by ${soak.closedSeen} clients; ` +
      `log lines ${soak.logLines} (${soak.dropLines} about drops)`,
  );
  console.log(
    `  cap ${soak.cap.max}: ${soak.cap.got503} of ${soak.cap.opened} clients opened past it got 503; refused: status ${soak.cap.status}, metric ${soak.cap.metric}`,
  );
  const ok = soak.first.growth < TARGET_MB * MB && soak.first.events >= EVENTS;
  console.log(
    ok
      ? `  ok: with ${CLIENTS} stalled clients and ${EVENTS} events RSS grew ${mb(soak.first.growth)} (target < ${TARGET_MB} MB)`
      : `  FAILED: RSS grew ${mb(soak.first.growth)} (target < ${TARGET_MB} MB), or the reader got ${soak.first.events} < ${EVENTS} events`,
  );
  return ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(`soak/sse: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(2);
  },
);
