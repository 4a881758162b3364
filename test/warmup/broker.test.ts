// The warm-up broker over loopback: engines and warm sources are 127.0.0.x addresses; a source is a small sibling
// (ICP HIT for what it holds; HTTP answers only-if-cached requests from its store, 504 otherwise) that records what
// it was asked. Real Squid on both sides is in test/lab/warmup.test.ts.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { request } from 'node:http';
import { connect } from 'node:net';
import type { IncomingHttpHeaders } from 'node:http';
import { DEFAULT_RELAY_LIMITS, DEFAULT_WARMUP, WarmupBroker, WarmupPolicy } from '../../src/warmup/index.js';
import type { WarmupSettings } from '../../src/warmup/index.js';
import { recordingLog } from '../../src/log.js';
import { freeTcpPort, freeUdpPort, waitFor } from '../helpers/daemon.js';
import { hereIAm, testCluster } from '../cluster/helpers.js';
import { exchange, icpQuery, Sibling } from './sibling.js';

const ROUTER = '127.0.0.1';
const A = '127.0.0.11';
const B = '127.0.0.12';
const C = '127.0.0.13';
const STRANGER = '127.0.0.99';

interface Got {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  error?: string;
}

/** An HTTP request from `from` through the broker (proxy form: absolute URL). */
function viaBroker(
  from: string,
  port: number,
  url: string,
  method = 'GET',
  headers: Record<string, string> = {},
): Promise<Got> {
  return new Promise((resolve) => {
    const req = request({ host: ROUTER, port, method, path: url, localAddress: from, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', (e) =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), error: e.message }),
      );
    });
    req.on('error', (e) => resolve({ status: 0, headers: {}, body: Buffer.alloc(0), error: e.message }));
    req.end();
  });
}

/** `n` bytes, each 4 holding their offset (a piece out of place shows). */
function pattern(n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i + 4 <= n; i += 4) b.writeUInt32LE(i, i);
  return b;
}

/** An origin address (198.51.100.x) whose bucket (the XOR of its bytes) is b. */
function addressForBucket(b: number): string {
  return `198.51.100.${198 ^ 51 ^ 100 ^ b}`;
}

describe('warm-up broker (loopback)', () => {
  const { clock, cluster } = testCluster({ routerAddress: ROUTER });
  let policy: WarmupPolicy;
  let broker: WarmupBroker;
  const a = new Sibling(A);
  const b = new Sibling(B);
  let icpPort = 0;
  let httpPort = 0;
  let gainedFromA: number[] = [];
  let gainedFromB: number[] = [];
  const log = recordingLog();
  const names: Record<string, string> = {};

  const join = (addr: string) => {
    cluster.hereIAm(hereIAm(addr));
    const plan = cluster.iSeeYou(0, addr);
    cluster.hereIAm(hereIAm(addr, { receivedId: plan?.receiveId ?? 0 }));
  };

  before(async () => {
    // The sources joined a moment before the newcomer: minSourceHold 0 lets them be asked all the same.
    const settings: WarmupSettings = {
      ...DEFAULT_WARMUP,
      peerTimeoutMs: 3000,
      maxPeerHits: 1_000_000,
      minHitRatio: 0,
      minSourceHoldMs: 0,
    };
    policy = new WarmupPolicy(new Map([[0, settings]]), clock);
    cluster.onEvent(() => {
      const s = cluster.service(0);
      if (s) policy.observe(s);
    });
    join(A);
    join(B);
    const before = [...(cluster.service(0)?.buckets ?? [])];
    join(C);
    const now = cluster.service(0)?.buckets ?? [];
    gainedFromA = now.flatMap((o, i) => (o === C && before[i] === A ? [i] : []));
    gainedFromB = now.flatMap((o, i) => (o === C && before[i] === B ? [i] : []));
    const sourceIcp = await freeUdpPort();
    const sourceHttp = await freeTcpPort();
    await a.start(sourceIcp, sourceHttp);
    await b.start(sourceIcp, sourceHttp);
    broker = new WarmupBroker({
      listen: ROUTER,
      icpPort: 0,
      httpPort: 0,
      sourceIcpPort: sourceIcp,
      sourceHttpPort: sourceHttp,
      policy,
      clock,
      log,
      lookup: async (host) => names[host] ?? null,
      limits: { maxObjectBytes: 4 * 1024 * 1024 },
    });
    await broker.start();
    icpPort = broker.icpPort() ?? 0;
    httpPort = broker.httpPort() ?? 0;
  });
  after(async () => {
    await broker?.stop();
    await a.stop();
    await b.stop();
  });

  const urlIn = (bucket: number, path: string) => `http://${addressForBucket(bucket)}/${path}`;
  /** The broker's counters once the relay process has reported what it did so far. */
  const counters = async (): Promise<Record<string, number>> => {
    await broker.settled();
    return broker.snapshotCounters();
  };
  /** How much each named counter moved since `before` (a snapshotCounters()). */
  const moved = async (before: Record<string, number>, names: readonly string[]): Promise<[string, number][]> => {
    const after = await counters();
    return names.map((k) => [k, (after[k] ?? 0) - (before[k] ?? 0)]);
  };

  it('answers a non-member DENIED and 403, asks no one and relays nothing, and counts both', async () => {
    const url = urlIn(gainedFromA[0] ?? 0, 'stranger');
    a.store.set(url, { body: Buffer.from('secret') });
    assert.equal(await icpQuery(STRANGER, icpPort, url), 'DENIED');
    const got = await viaBroker(STRANGER, httpPort, url);
    assert.equal(got.status, 403);
    assert.equal(a.icpQueries.includes(url), false);
    assert.equal(a.httpRequests.length, 0);
    const c = await counters();
    assert.equal(c['icp-denied'], 1);
    assert.equal(c['http-denied'], 1);
  });

  it('for a bucket the newcomer gained: asks its previous owner, answers HIT, relays with only-if-cached', async () => {
    const url = urlIn(gainedFromA[1] ?? 0, 'warm/object');
    const body = Buffer.from('object held by A');
    a.store.set(url, { body });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    assert.deepEqual(a.icpQueries.slice(-1), [url]);
    assert.equal(b.icpQueries.includes(url), false, 'only the previous owner is asked');
    const before = await counters();
    const got = await viaBroker(C, httpPort, url, 'GET', {
      'Cache-Control': 'max-age=0',
      Connection: 'X-Secret',
      'X-Secret': '1',
    });
    assert.equal(got.status, 200);
    assert.deepEqual(got.body, body);
    assert.equal(got.headers['x-from'], A);
    assert.deepEqual(
      await moved(before, ['http-relayed', 'http-piped']),
      [
        ['http-relayed', 1],
        ['http-piped', 0],
      ],
      "one object relayed, a small one: through Node's client, not the pipe",
    );
    const seen = a.httpRequests.at(-1);
    assert.equal(seen?.url, url);
    assert.equal(seen?.from, ROUTER, 'the relay connects from the broker address');
    assert.equal(seen?.headers['cache-control'], 'max-age=0, only-if-cached');
    assert.match(String(seen?.headers.via), /wccpd-warmup/);
    assert.equal(seen?.headers['x-secret'], undefined, 'headers named in Connection are hop-by-hop');
    const head = await viaBroker(C, httpPort, url, 'HEAD');
    assert.deepEqual([head.status, head.body.length, head.headers['content-length']], [200, 0, String(body.length)]);
    // Counted towards the warm-up once the query's second and the next have closed within the budget.
    clock.advance(2000);
    await waitFor('the peer hit counted', async () => (policy.view(0, C)?.peerHits === 1 ? true : null));
  });

  it('a source that does not hold the URL: MISS, and a fetch for it is 504 without asking the source', async () => {
    const url = urlIn(gainedFromB[0] ?? 0, 'cold/object');
    const before = b.httpRequests.length;
    assert.equal(await icpQuery(C, icpPort, url), 'MISS');
    assert.ok(b.icpQueries.includes(url));
    const got = await viaBroker(C, httpPort, url);
    assert.equal(got.status, 504);
    assert.equal(b.httpRequests.length, before, 'nothing was fetched for an unconfirmed URL');
    assert.equal((await counters())['http-unconfirmed'], 1);
  });

  it("a source's 504 (it lost the object since its HIT) passes through, counted as the source's 504, not relayed", async () => {
    const url = urlIn(gainedFromB[1] ?? 0, 'evicted');
    b.store.set(url, { body: Buffer.from('x') });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    b.store.set(url, { status: 504, body: Buffer.alloc(0) });
    const before = await counters();
    assert.equal((await viaBroker(C, httpPort, url)).status, 504);
    assert.deepEqual(
      await moved(before, ['http-relay', 'http-source-504', 'http-relayed', 'http-source-error-status']),
      [
        ['http-relay', 1],
        ['http-source-504', 1],
        ['http-relayed', 0],
        ['http-source-error-status', 0],
      ],
    );
  });

  it("a source's other error (403: its http_access refuses the broker) passes through and is no relayed object", async () => {
    const url = urlIn(gainedFromB[2] ?? 0, 'refused');
    b.store.set(url, { body: Buffer.from('x') });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    b.store.set(url, { status: 403, body: Buffer.from('Access Denied') });
    const before = await counters();
    const got = await viaBroker(C, httpPort, url);
    assert.deepEqual([got.status, got.body.toString()], [403, 'Access Denied']);
    assert.deepEqual(await moved(before, ['http-source-error-status', 'http-relayed', 'http-source-504']), [
      ['http-source-error-status', 1],
      ['http-relayed', 0],
      ['http-source-504', 0],
    ]);
  });

  it("an engine reusing its idle keep-alive connection after 7 s (past Node's default 5 s) gets its object", async () => {
    // Squid keeps an idle connection to a peer 60 s (server_idle_pconn_timeout) and reuses it: the broker must not
    // close it first, or a request sent as it closes is reset. (Node 20 closes 1 s after its keepAliveTimeout.)
    const url = urlIn(gainedFromA[6] ?? 0, 'keep-alive');
    a.store.set(url, { body: Buffer.from('kept alive') });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    const socket = connect({ host: ROUTER, port: httpPort, localAddress: C });
    try {
      assert.deepEqual(await exchange(socket, url), { status: 200, body: 'kept alive' });
      await new Promise((r) => setTimeout(r, 7000));
      assert.deepEqual(
        await exchange(socket, url),
        { status: 200, body: 'kept alive' },
        'the same connection, idle 7 s',
      );
    } finally {
      socket.destroy();
    }
    assert.ok(DEFAULT_RELAY_LIMITS.idleKeepAliveMs > 60_000, "idle connections outlive Squid's 60 s");
  });

  it('a source that drops a kept connection as the broker reuses it: asked again on a new one, and not taken for failed', async () => {
    // A Squid closes an idle client connection after client_idle_pconn_timeout; a relay sent on it just then is reset
    // with nothing read, which says nothing about the source.
    const [first, second, third] = [7, 8, 9].map((i) => urlIn(gainedFromA[i] ?? 0, `reused/${i}`));
    for (const u of [first, second, third]) a.store.set(u ?? '', { body: Buffer.from('from A') });
    assert.equal(await icpQuery(C, icpPort, first ?? ''), 'HIT');
    assert.equal((await viaBroker(C, httpPort, first ?? '')).status, 200);
    a.dropReused = true;
    try {
      const before = await counters();
      assert.equal(await icpQuery(C, icpPort, second ?? ''), 'HIT');
      const got = await viaBroker(C, httpPort, second ?? '');
      assert.deepEqual([got.status, got.body.toString()], [200, 'from A'], 'the engine got its object');
      assert.deepEqual(await moved(before, ['http-source-retried', 'http-source-failed', 'http-relayed']), [
        ['http-source-retried', 1],
        ['http-source-failed', 0],
        ['http-relayed', 1],
      ]);
      assert.equal(await icpQuery(C, icpPort, third ?? ''), 'HIT', 'the source is still asked');
    } finally {
      a.dropReused = false;
    }
  });

  it('only GET and HEAD', async () => {
    const url = urlIn(gainedFromA[0] ?? 0, 'post');
    const got = await viaBroker(C, httpPort, url, 'POST');
    assert.equal(got.status, 405);
    assert.equal(got.headers.allow, 'GET, HEAD');
    assert.equal(
      a.httpRequests.some((r) => r.method === 'POST'),
      false,
    );
  });

  it('MISS at once, asking no one, for a bucket the engine did not gain and for an engine that is not warming', async () => {
    const heldByA = (cluster.service(0)?.buckets ?? []).findIndex((o) => o === A);
    const url = urlIn(heldByA, 'not-gained');
    b.store.set(url, { body: Buffer.from('x') });
    a.store.set(url, { body: Buffer.from('x') });
    assert.equal(await icpQuery(C, icpPort, url), 'MISS');
    assert.equal(await icpQuery(A, icpPort, url), 'MISS');
    assert.equal(a.icpQueries.includes(url) || b.icpQueries.includes(url), false);
    const c = await counters();
    assert.equal(c['icp-miss-not-its-bucket'], 1);
  });

  it('resolves a name to find the bucket; an unresolvable name is a MISS', async () => {
    const bucket = gainedFromA[2] ?? 0;
    names['warm.example'] = addressForBucket(bucket);
    const url = 'http://warm.example/by-name';
    a.store.set(url, { body: Buffer.from('named') });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    assert.equal(await icpQuery(C, icpPort, 'http://nowhere.invalid/x'), 'MISS');
    assert.equal(await icpQuery(C, icpPort, 'ftp://198.51.100.1/x'), 'MISS');
    const c = await counters();
    assert.equal(c['icp-miss-unresolvable'], 1);
    assert.equal(c['icp-miss-not-http-url'], 1);
  });

  it('cuts off an object larger than the limit', async () => {
    const url = urlIn(gainedFromA[3] ?? 0, 'huge');
    a.store.set(url, { body: Buffer.alloc(5 * 1024 * 1024, 0x61) });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    const got = await viaBroker(C, httpPort, url);
    assert.equal(got.status, 504);
    assert.equal((await counters())['http-too-large'], 1);
  });

  it('streams a large object whole', async () => {
    const url = urlIn(gainedFromA[4] ?? 0, 'large');
    // Every 4 bytes their offset: a piece written twice, lost or out of place shows.
    const body = pattern(3 * 1024 * 1024 + 17);
    a.store.set(url, { body });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    const before = await counters();
    const got = await viaBroker(C, httpPort, url);
    assert.equal(got.status, 200);
    assert.equal(got.body.length, body.length);
    assert.ok(got.body.equals(body));
    assert.deepEqual(await moved(before, ['http-relayed', 'http-piped']), [
      ['http-relayed', 1],
      ['http-piped', 1],
    ]);
  });

  // A large object's body goes through the relay's pipe (src/warmup/source-pipe.ts): past Node's HTTP parser, from
  // read buffers the relay reuses once their bytes are written.
  it('a large object to an engine that stops reading for a while: every byte, in order', async () => {
    const url = urlIn(gainedFromA[8] ?? 0, 'slow-reader');
    const body = pattern(24 * 1024 * 1024 + 5);
    a.store.set(url, { body });
    const before = await counters();
    try {
      broker.setRelayBudgets({ maxRelayRate: 0, maxObjectBytes: 32 * 1024 * 1024 });
      assert.equal(await icpQuery(C, icpPort, url), 'HIT');
      const got = await new Promise<Buffer>((resolve, reject) => {
        const socket = connect({ host: ROUTER, port: httpPort, localAddress: C });
        const chunks: Buffer[] = [];
        let n = 0;
        let stops = 0;
        socket.on('data', (c: Buffer) => {
          chunks.push(c);
          n += c.length;
          // Three pauses of 300 ms at 64 KiB, 8 MB and 16 MB: the broker's writes wait, its reads of the source too.
          if ((stops === 0 && n > 65536) || (stops === 1 && n > 8e6) || (stops === 2 && n > 16e6)) {
            stops++;
            socket.pause();
            setTimeout(() => socket.resume(), 300);
          }
          if (n >= body.length + 40 && Buffer.concat(chunks).indexOf('\r\n\r\n') + 4 + body.length <= n) {
            socket.destroy();
            resolve(Buffer.concat(chunks));
          }
        });
        socket.on('error', reject);
        socket.on('close', () => resolve(Buffer.concat(chunks)));
        socket.write(`GET ${url} HTTP/1.1\r\nHost: ${new URL(url).host}\r\n\r\n`);
      });
      const end = got.indexOf('\r\n\r\n');
      assert.match(got.subarray(0, end).toString('latin1'), /^HTTP\/1\.1 200 /);
      assert.equal(got.length - end - 4, body.length);
      assert.ok(got.subarray(end + 4).equals(body), 'the body as the source holds it');
      assert.deepEqual(await moved(before, ['http-relayed', 'http-bytes']), [
        ['http-relayed', 1],
        ['http-bytes', body.length],
      ]);
    } finally {
      broker.setRelayBudgets({ maxRelayRate: 0, maxObjectBytes: 4 * 1024 * 1024 });
    }
  });

  it("a large object's source that closes before its Content-Length: the engine's answer is cut off, not relayed", async () => {
    const url = urlIn(gainedFromA[9] ?? 0, 'short');
    a.store.set(url, {
      body: Buffer.alloc(0),
      raw: `HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n${'s'.repeat(400_000)}`,
    });
    const before = await counters();
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    const got = await viaBroker(C, httpPort, url);
    assert.equal(got.status, 200);
    assert.ok(got.error !== undefined || got.body.length < 1_000_000, 'the engine sees the answer cut off');
    assert.ok(got.body.length <= 400_000);
    assert.deepEqual(await moved(before, ['http-relayed', 'http-bytes']), [
      ['http-relayed', 0],
      ['http-bytes', 400_000],
    ]);
  });

  it("a large object's source that sends past its Content-Length: the engine gets the object, its connection goes on", async () => {
    const url = urlIn(gainedFromA[10] ?? 0, 'long');
    const small = urlIn(gainedFromA[10] ?? 0, 'small-after');
    a.store.set(url, {
      body: Buffer.alloc(0),
      raw: `HTTP/1.1 200 OK\r\nContent-Length: 300000\r\n\r\n${'l'.repeat(300_000)}HTTP/1.1 200 OK\r\nX-Unasked: 1\r\n\r\n`,
    });
    a.store.set(small, { body: Buffer.from('small after') });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    assert.equal(await icpQuery(C, icpPort, small), 'HIT');
    const socket = connect({ host: ROUTER, port: httpPort, localAddress: C });
    try {
      assert.deepEqual(await exchange(socket, url), { status: 200, body: 'l'.repeat(300_000) });
      // The next request on the engine's kept connection, relayed from the same source on another connection.
      assert.deepEqual(await exchange(socket, small), { status: 200, body: 'small after' });
    } finally {
      socket.destroy();
    }
  });

  it('keeps to warmup.maxRelayRate over the relays, and answers 504 above warmup.maxObjectSize', async () => {
    const url = urlIn(gainedFromA[6] ?? 0, 'paced');
    const body = Buffer.alloc(2_000_000, 0x63);
    a.store.set(url, { body });
    const before = await counters();
    try {
      // 1 MB/s with a burst of 256 KiB: the 2 MB object cannot come in less than ~1.7 s.
      broker.setRelayBudgets({ maxRelayRate: 1_000_000, maxObjectBytes: 4 * 1024 * 1024 });
      assert.equal(await icpQuery(C, icpPort, url), 'HIT');
      const t0 = performance.now();
      const got = await viaBroker(C, httpPort, url);
      const s = (performance.now() - t0) / 1000;
      assert.equal(got.status, 200);
      assert.ok(got.body.equals(body));
      assert.ok(s >= 1.6, `2 MB at 1 MB/s took ${s.toFixed(2)} s`);
      assert.ok(((await counters())['http-rate-waits'] ?? 0) > (before['http-rate-waits'] ?? 0), 'the waits counted');
      // A smaller maximum object size holds for the next relay: 504, as when the source lost it.
      broker.setRelayBudgets({ maxRelayRate: 0, maxObjectBytes: 1_000_000 });
      assert.equal(await icpQuery(C, icpPort, url), 'HIT');
      const big = await viaBroker(C, httpPort, url);
      assert.equal(big.status, 504);
      assert.deepEqual(await moved(before, ['http-too-large', 'http-relayed']), [
        ['http-too-large', 1],
        ['http-relayed', 1],
      ]);
    } finally {
      broker.setRelayBudgets({ maxRelayRate: 0, maxObjectBytes: 4 * 1024 * 1024 });
    }
  });

  it('a relay process that dies ends nothing: counted, 504 while it is down, started again', async () => {
    const url = urlIn(gainedFromA[7] ?? 0, 'after-crash');
    a.store.set(url, { body: Buffer.from('still relayed') });
    const pid = broker.relayPid();
    assert.ok(pid !== null);
    const exited = new Promise<void>((r) => {
      const t = setInterval(() => {
        if (broker.relayPid() !== pid) {
          clearInterval(t);
          r();
        }
      }, 5);
    });
    process.kill(pid, 'SIGKILL');
    await exited;
    assert.equal(broker.snapshotCounters()['relay-process-exits'], 1);
    assert.equal(broker.gauges().connections, 0, "the dead process's connections are no longer counted");
    // Down: the engine is told 504 and goes to the origin.
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    const down = await viaBroker(C, httpPort, url);
    assert.equal(down.status, 504);
    assert.equal(broker.snapshotCounters()['http-relay-unavailable'], 1);
    assert.ok(
      log.lines.some((l) => /the relay process ended \(SIGKILL\)/.test(l.msg ?? '')),
      'the end is logged with its signal',
    );
    // Started again after a pause: relays go on.
    for (let i = 0; i < 200 && broker.relayPid() === null; i++) await new Promise((r) => setTimeout(r, 50));
    assert.notEqual(broker.relayPid(), null, 'started again');
    const got = await viaBroker(C, httpPort, url);
    assert.equal(got.status, 200);
    assert.equal(got.body.toString(), 'still relayed');
  });

  it('ignores garbage and keeps answering', async () => {
    const s = createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, C, () => r()));
    for (const junk of [Buffer.alloc(3), Buffer.from('GET / HTTP/1.0\r\n\r\n'), Buffer.alloc(40, 0xff)]) {
      await new Promise<void>((r) => s.send(junk, icpPort, ROUTER, () => r()));
    }
    s.close();
    const url = urlIn(gainedFromB[2] ?? 0, 'after-junk');
    assert.equal(await icpQuery(C, icpPort, url), 'MISS');
    assert.equal((await counters())['icp-bad'], 3);
  });

  it('a killed source fails hard at once (ICMP port unreachable), and is not asked again', async () => {
    const url = urlIn(gainedFromB[3] ?? 0, 'source-killed');
    b.store.set(url, { body: Buffer.from('x') });
    await b.stop();
    const before = await counters();
    assert.equal(await icpQuery(C, icpPort, url), 'MISS');
    const mid = await counters();
    assert.equal(
      (mid['icp-source-failed'] ?? 0) - (before['icp-source-failed'] ?? 0),
      1,
      'a hard failure, not a timeout',
    );
    assert.equal((mid['icp-source-timeout'] ?? 0) - (before['icp-source-timeout'] ?? 0), 0);
    assert.equal(await icpQuery(C, icpPort, url), 'MISS');
    const end = await counters();
    assert.equal(end['icp-asked'], mid['icp-asked'], 'the dead source was not asked again');
    assert.equal((end['icp-miss-no-live-source'] ?? 0) - (mid['icp-miss-no-live-source'] ?? 0), 1);
    // A's buckets are still warmed from A.
    const fromA = urlIn(gainedFromA[5] ?? 0, 'still-a');
    a.store.set(fromA, { body: Buffer.from('a') });
    assert.equal(await icpQuery(C, icpPort, fromA), 'HIT');
  });
});
