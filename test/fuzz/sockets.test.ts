// The socket-level fuzzer (issue 30): a hostile host throws random and mutated datagrams at every UDP port wccpd
// listens on (the router's WCCP port, the warm-up broker's ICP port), from ordinary sockets, from source port 0 and in
// registered engines' names (a raw socket: any source address and port), and malformed HTTP at the broker's relay and
// the admin API. After each phase the same process answers the API, the table (buckets and change number) is what it
// was, and the counters account for every datagram sent. The mutations start from real Squid datagrams
// (test/fixtures) and from the test engines' own signed HERE_I_AMs; service 0 is MD5-secured, so no forgery or
// mutation is a valid message. The seed is printed; WCCPD_FUZZ_SEED=N replays a run.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isRoot, need } from '../helpers/require.js';
import { within } from '../helpers/processes.js';
import { waitFor } from '../helpers/daemon.js';
import {
  Draw,
  fixtureDatagrams,
  httpAttempt,
  icpDatagram,
  icpMutation,
  mutate,
  randomDatagram,
  sourceAnswer,
  wouldResolve,
} from './inputs.js';
import { A, B, exchange, holdOpen, HostileGateway, OUTSIDER, paced, STRANGER } from './harness.js';
import type { Exchange, Table } from './harness.js';
import { TOKEN } from '../helpers/daemon.js';

const SEED = Number(process.env.WCCPD_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 32));
const skip = need(isRoot, 'root (a raw socket sends from source port 0 and from the engines addresses)');
const withKind = async (kind: string, x: Promise<Exchange>) => ({ ...(await x), kind });
/** Ends every malformed exchange: a request the broker answers (400, not an absolute URL) and then closes. */
const LAST = 'GET /fuzz-end HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
/** The most requests one malformed exchange holds (httpAttempt's pipelined kind, and LAST). */
const MAX_PIPELINED = 9;
/** Datagrams in flight at most: well inside a UDP socket's receive buffer, so the kernel drops none of them. */
const WINDOW = 64;

describe(`socket fuzzer (seed ${SEED}; WCCPD_FUZZ_SEED=${SEED} replays it)`, { skip }, () => {
  let g: HostileGateway;
  let table: Table;
  const d = new Draw(SEED);
  const totals = { datagrams: 0, http: 0 };
  const started = Date.now();

  before(async () => {
    g = await HostileGateway.start();
    table = await g.table();
  });
  after(async () => {
    console.log(
      `# fuzz seed ${SEED}: ${totals.datagrams} datagrams, ${totals.http} malformed HTTP exchanges in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    await g?.stop();
  });

  const why = (phase: string, what: string) =>
    `${phase}: ${what} (seed ${SEED})\n--- the daemon's last output:\n${g.lastOutput()}`;

  /** Runs a phase; a failure says whether the daemon still runs, and its last lines. */
  async function phase(name: string, run: () => Promise<void>): Promise<void> {
    try {
      await run();
    } catch (e) {
      const state = (await g.alive())
        ? 'wccpd runs still'
        : `wccpd (PID ${g.pid}) is gone: exit ${g.daemon.child.exitCode}, signal ${g.daemon.child.signalCode}`;
      throw new Error(why(name, `${(e as Error).message.replace(`${name}: `, '')}; ${state}`), { cause: e });
    }
  }

  /** Same process, answering, same table. */
  async function unharmed(name: string): Promise<void> {
    assert.ok(
      await g.alive(),
      why(name, `wccpd (PID ${g.pid}) is gone: exit ${g.daemon.child.exitCode}, signal ${g.daemon.child.signalCode}`),
    );
    await g.keepAlive(true);
    assert.deepEqual(await g.table(), table, why(name, 'the bucket table or its change number changed'));
  }

  const wccpBases = () => [...fixtureDatagrams().values(), ...g.engines.map((e) => e.hereIAmBytes())];
  const icpBases = () => [icpDatagram(d), icpDatagram(d, 'http://198.51.100.7/'), icpDatagram(d)];

  /** A datagram for the router: random, a mutated WCCP message, or something of the broker's. */
  function forRouter(bases: readonly Buffer[]): Buffer {
    const r = d.int(100);
    if (r < 15) return randomDatagram(d);
    if (r < 90) return mutate(d, d.pick(bases), 'wccp', d.pick(bases));
    return d.chance(0.5) ? icpDatagram(d) : icpMutation(d, icpDatagram(d));
  }

  /** A datagram for the broker's ICP port; in a member's name (`member`), never one that makes it resolve a name. */
  function forBroker(member: boolean, wccp: readonly Buffer[]): Buffer {
    const r = d.int(100);
    let b: Buffer;
    if (r < 15) b = randomDatagram(d);
    else if (r < 40) b = icpDatagram(d);
    else if (r < 90) b = icpMutation(d, d.pick(icpBases()), icpDatagram(d));
    else b = mutate(d, d.pick(wccp), 'wccp');
    return member && wouldResolve(b) ? icpDatagram(d) : b;
  }

  /**
   * `total` datagrams to the router or the broker, each from `from(i)` (an address, and a port for the raw socket, or
   * null for an ordinary socket), drawn by `draw(member)`; then the daemon must be unharmed.
   */
  async function datagrams(
    name: string,
    total: number,
    to: 'router' | 'broker',
    from: (i: number) => { address: string; port: number | null },
    draw: (member: boolean) => Buffer,
  ): Promise<void> {
    const port = to === 'router' ? g.daemon.udpPort : g.icpPort;
    await phase(name, () =>
      paced(
        name,
        total,
        WINDOW,
        (i) => {
          const f = from(i);
          const b = draw(f.address === A || f.address === B);
          const send =
            f.port === null ? () => g.sendFrom(f.address, port, b) : () => g.sendRaw(f.address, f.port ?? 0, port, b);
          return { bytes: b.length, send };
        },
        async () => (await g.seen())[to],
        // The engines' HERE_I_AMs are counted by the router.
        async () => (to === 'router' ? g.keepAlive() : (await g.keepAlive(), 0)),
      ),
    );
    totals.datagrams += total;
    await unharmed(name);
  }
  /** Half from source port 0, half from any port (the ports of Squid's WCCP and ICP among them). */
  const rawPort = (i: number) => (i % 2 === 0 ? 0 : d.pick([2048, 3130, d.range(1, 65535)]));

  it('router, WCCP port: 30,000 datagrams from ordinary sockets (engines, a stranger, an outsider)', async () => {
    const bases = wccpBases();
    const from = [A, B, STRANGER, OUTSIDER];
    await datagrams(
      'router/ordinary',
      30_000,
      'router',
      (i) => ({ address: from[i % 4] ?? A, port: null }),
      () => forRouter(bases),
    );
  });

  it('router, WCCP port: 30,000 datagrams from source port 0 and in the engines names (raw socket)', async () => {
    const bases = wccpBases();
    const from = [A, B, STRANGER, OUTSIDER, '127.0.0.1'];
    await datagrams(
      'router/raw',
      30_000,
      'router',
      (i) => ({ address: d.pick(from), port: rawPort(i) }),
      () => forRouter(bases),
    );
  });

  it('broker, ICP port: 20,000 datagrams from ordinary sockets (the warming engine, a stranger, an outsider)', async () => {
    const wccp = wccpBases();
    const from = [B, STRANGER, OUTSIDER, A];
    await datagrams(
      'broker/ordinary',
      20_000,
      'broker',
      (i) => ({ address: from[i % 4] ?? B, port: null }),
      (m) => forBroker(m, wccp),
    );
  });

  it('broker, ICP port: 20,000 datagrams from source port 0 and in the engines names (raw socket)', async () => {
    const wccp = wccpBases();
    const from = [A, B, STRANGER, OUTSIDER];
    await datagrams(
      'broker/raw',
      20_000,
      'broker',
      (i) => ({ address: d.pick(from), port: rawPort(i) }),
      (m) => forBroker(m, wccp),
    );
  });

  /** Runs `attempts` exchanges, `parallel` at a time; none may be left hanging. */
  async function exchanges(
    phase: string,
    n: number,
    one: (i: number) => Promise<Exchange & { kind: string }>,
    parallel = 16,
  ): Promise<Exchange[]> {
    const out: (Exchange & { kind: string })[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: parallel }, async () => {
        while (next < n) {
          const i = next++;
          out.push(await within(one(i), 20_000, `${phase} exchange ${i}`));
        }
      }),
    );
    totals.http += n;
    const slow = new Map<string, number>();
    for (const x of out) if (x.timedOut) slow.set(x.kind, (slow.get(x.kind) ?? 0) + 1);
    console.log(
      `# ${phase}: ${n} exchanges, ${out.reduce((a, x) => a + x.statuses.length, 0)} answers (${out.reduce((a, x) => a + x.parserAnswers, 0)} from node's parser), left open by the server (closed by us after 3 s): ${[...slow].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`,
    );
    return out;
  }
  /**
   * The daemon's count against the answers read: every answer read was counted, and what was counted but never read
   * is no more than the requests of the exchanges cut short (node's parser refused a later request, or the server
   * left the connection open: an answer still buffered is lost when node closes the connection).
   */
  function accounted(what: string, counted: number, xs: readonly Exchange[], read: (x: Exchange) => number): void {
    const seen = xs.reduce((a, x) => a + read(x), 0);
    const cut = xs.filter((x) => x.parserAnswers > 0 || x.timedOut).length;
    assert.ok(
      counted >= seen && counted <= seen + MAX_PIPELINED * cut,
      `${what}: counted ${counted}, read ${seen} answers, ${cut} exchanges cut short (seed ${SEED})`,
    );
  }

  it('broker, HTTP port: 400 malformed requests from a stranger, 400 from the warming engine (its source answering badly)', async () => {
    const before = (await g.status()).warmup ?? {};
    const stranger = await exchanges('broker/stranger', 400, (i) => {
      const a = httpAttempt(d, `http://198.51.100.${i % 256}/x`, `198.51.100.${i % 256}`);
      return withKind(a.kind, exchange(g.httpPort, STRANGER, a.pieces, a.pauseMs, LAST));
    });
    // B asks by ICP first (its source says HIT), then fetches through the relay: the request malformed, or the source's
    // answer.
    const member = await exchanges('broker/member', 400, async (i) => {
      const url = `http://198.51.100.${i % 256}/m${i}`;
      g.source.answers.set(url, sourceAnswer(d).bytes);
      const a = httpAttempt(d, url, `198.51.100.${i % 256}`);
      await g.askIcp(B, icpDatagram(d, url));
      return withKind(a.kind, exchange(g.httpPort, B, a.pieces, a.pauseMs, LAST));
    });
    await unharmed('broker/http');
    const after = (await g.status()).warmup ?? {};
    const requests = (after['http-requests'] ?? 0) - (before['http-requests'] ?? 0);
    assert.equal(g.source.bodiesRelayed, 0, `GETs and HEADs with a body relayed to the source (seed ${SEED})`);
    // Node's parser's refusals are the broker's http-bad-request (400) and http-headers-timeout (408).
    const refusals = (w: Readonly<Record<string, number>>) =>
      (w['http-bad-request'] ?? 0) + (w['http-headers-timeout'] ?? 0);
    const xs = [...stranger, ...member];
    const parserSeen = xs.reduce((a, x) => a + x.parserAnswers, 0);
    const parserCounted = refusals(after) - refusals(before);
    assert.ok(
      parserCounted >= parserSeen && parserCounted <= xs.length,
      `the broker counted ${parserCounted} requests its parser refused; ${parserSeen} such answers were read, in ${xs.length} exchanges (seed ${SEED})`,
    );
    accounted('broker', requests, [...stranger, ...member], (x) => x.statuses.length - x.parserAnswers);
  });

  it('admin API: 400 malformed requests', async () => {
    const before = (await g.status()).admin;
    const host = new URL(g.daemon.url).host;
    const adminLast = `GET /api/v1/status HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;
    const targets = ['/api/v1/status', '/metrics', '/', `/api/v1/services/0/engines/${A}/drain`, '/api/v1/events'];
    const xs = await exchanges('admin', 400, (i) => {
      const a = httpAttempt(d, targets[i % targets.length] ?? '/', d.chance(0.9) ? host : 'evil.example');
      return withKind(a.kind, exchange(Number(new URL(g.daemon.url).port), STRANGER, a.pieces, a.pauseMs, adminLast));
    });
    await unharmed('admin/http');
    const after = (await g.status()).admin;
    accounted(
      'admin (421)',
      after.hostRefused - before.hostRefused,
      xs,
      (x) => x.statuses.filter((s) => s === 421).length,
    );
    // Malformed (node's parser: 400, 408, 431; ours: a target that is no URL, a bad body) and 401 without the token.
    accounted(
      'admin (400, 408, 431)',
      after.badRequests - before.badRequests,
      xs,
      (x) => x.statuses.filter((s) => s === 400 || s === 408 || s === 431).length,
    );
    accounted(
      'admin (401)',
      after.unauthorized - before.unauthorized,
      xs,
      (x) => x.statuses.filter((s) => s === 401).length,
    );
    assert.ok(TOKEN.length > 0); // the token is never sent: no change can be made
  });

  it('slow clients: 8 strangers x 64 unfinished requests to the broker, 40 to the admin API; the engine is served', async () => {
    const held: Awaited<ReturnType<typeof holdOpen>>[] = [];
    for (let k = 0; k < 8; k++) held.push(await holdOpen(g.httpPort, `127.0.0.${60 + k}`, 64));
    const admin = await holdOpen(Number(new URL(g.daemon.url).port), STRANGER, 40);
    try {
      const x = await exchange(
        g.httpPort,
        B,
        [],
        0,
        'GET http://198.51.100.1/slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      );
      assert.equal(x.statuses.length, 1, `the engine B was served while strangers held connections (seed ${SEED})`);
      await unharmed('slow');
      // The broker closes a connection that sent no complete head within its headers timeout (5 s).
      await waitFor(
        'the broker to close the unfinished requests',
        async () => (held.every((h) => h.closedByServer() === 64) ? true : null),
        10_000,
      );
    } finally {
      for (const h of held) h.close();
      admin.close();
    }
    totals.http += 8 * 64 + 40;
  });
});
