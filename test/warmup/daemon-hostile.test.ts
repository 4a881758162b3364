// The real wccpd's warm-up broker under an attacker's hands (issue 30): what a hostile host on the engines' network
// can send to its ICP and HTTP ports (source port 0 through a raw socket, forged member addresses, amplification
// bait, a broken source, bodies on a GET, connection floods) is counted and dropped, and the daemon keeps running.
import { readdirSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import type { Socket as UdpSocket } from 'node:dgram';
import { request } from 'node:http';
import { connect } from 'node:net';
import type { Socket } from 'node:net';
import type { EnginesView, StatusView } from '../../src/admin/api-types.js';
import { encodeIcp } from '../../src/wire/icp.js';
import { waitFor, wccpctl } from '../helpers/daemon.js';
import { RawUdpSender } from '../helpers/raw-udp.js';
import { icpQuery } from './sibling.js';
import { A, addressForBucket, C, startWarmDaemon } from './warm-daemon.js';
import type { WarmDaemon } from './warm-daemon.js';

const ROUTER = '127.0.0.1';
const ICP_DENIED = 22;

/** An ICP QUERY with the URL's bytes as given (not necessarily UTF-8). */
function rawQuery(requestNumber: number, url: Buffer): Buffer {
  const out = Buffer.alloc(24 + url.length + 1);
  out[0] = 1;
  out[1] = 2;
  out.writeUInt16BE(out.length, 2);
  out.writeUInt32BE(requestNumber, 4);
  url.copy(out, 24);
  return out;
}

function query(url: string, requestNumber = 1): Buffer {
  return encodeIcp({
    opcode: 'QUERY',
    requestNumber,
    options: 0,
    optionData: 0,
    senderAddress: '0.0.0.0',
    requesterAddress: '0.0.0.0',
    url,
  });
}

/** A UDP socket bound to `address` that keeps every datagram it gets. */
async function udpFrom(address: string): Promise<{ socket: UdpSocket; got: Buffer[] }> {
  const socket = createSocket('udp4');
  const got: Buffer[] = [];
  socket.on('message', (m) => got.push(m));
  await new Promise<void>((r) => socket.bind(0, address, () => r()));
  return { socket, got };
}

/** A GET from `from` through the broker's relay: the status, or 0 when the connection failed. */
function relayed(from: string, port: number, url: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: ROUTER, port, path: url, localAddress: from, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', () => resolve(0));
    });
    req.on('error', () => resolve(0));
    req.setTimeout(5000, () => req.destroy());
    req.end();
  });
}

/** Writes `bytes` on a new connection from `from` and reads until the broker closes it (or 3 s): the status line. */
function rawHttp(from: string, port: number, bytes: string): Promise<{ status: number; closed: boolean }> {
  return new Promise((resolve) => {
    const s = connect({ host: ROUTER, port, localAddress: from });
    let got = '';
    const finish = (closed: boolean): void => {
      clearTimeout(t);
      s.destroy();
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0), closed });
    };
    const t = setTimeout(() => finish(false), 3000);
    s.on('data', (d: Buffer) => (got += d.toString('latin1')));
    s.on('error', () => undefined);
    s.on('close', () => finish(true));
    s.on('connect', () => s.write(bytes));
  });
}

describe('daemon: the warm-up broker under hostile input', () => {
  let w: WarmDaemon;
  /** A bucket C gained from A: C warms from A for it. */
  let gained = -1;
  const counters = async (): Promise<Record<string, number>> => (await w.get<StatusView>('status')).warmup ?? {};
  const cWarmup = async () =>
    (await w.get<EnginesView>('services/0/engines')).engines.find((e) => e.address === C)?.warmup ?? null;
  const alive = (): void => assert.equal(w.daemon.child.exitCode, null, w.daemon.output.join('').slice(-3000));

  before(async () => {
    w = await startWarmDaemon();
  });
  after(async () => {
    await w?.stop();
  });

  it('ICP from source port 0 (a raw socket), from anyone and from a member: dropped and counted, the daemon lives', async () => {
    const raw = new RawUdpSender();
    try {
      for (const source of ['127.0.0.97', A])
        await raw.send({
          source,
          sourcePort: 0,
          destination: ROUTER,
          destinationPort: w.icpPort,
          payload: query('http://198.51.100.1/port-zero'),
        });
    } finally {
      raw.close();
    }
    await waitFor('both counted', async () => ((await counters())['icp-source-port-0'] === 2 ? true : null));
    alive();
    assert.equal(await icpQuery('127.0.0.96', w.icpPort, 'http://198.51.100.1/after'), 'DENIED');
  });

  it('ICP DENIED is never larger than its query (the URL bytes as received) and is rate-limited per source and in all', async () => {
    const base = await counters();
    const denied = async (): Promise<number> => ((await counters())['icp-denied'] ?? 0) - (base['icp-denied'] ?? 0);
    const { socket, got } = await udpFrom('127.0.0.98');
    try {
      // 1,300 bytes that are no UTF-8: decoded and encoded again, each would become 3.
      const url = Buffer.concat([Buffer.from('http://198.51.100.1/'), Buffer.alloc(1300, 0xff)]);
      const q = rawQuery(1, url);
      socket.send(q, w.icpPort, ROUTER);
      await waitFor('the DENIED', async () => (got.length === 1 ? true : null));
      const r = got[0] ?? Buffer.alloc(0);
      assert.ok(r.length <= q.length, `a ${r.length}-byte reply to a ${q.length}-byte query`);
      assert.equal(r[0], ICP_DENIED);
      assert.ok(r.subarray(20, r.length - 1).equals(url), 'the URL bytes as received');
      // One source: 5 replies a second (the burst too); the rest are counted, not sent.
      const started = Date.now();
      for (let i = 0; i < 50; i++) socket.send(q, w.icpPort, ROUTER);
      await waitFor('all counted', async () => ((await denied()) === 51 ? true : null));
      await new Promise((r) => setTimeout(r, 200));
      // What the budget allows over the time the daemon took (a loaded machine refills it a little).
      const allowed = 1 + 5 + Math.ceil((5 * (Date.now() - started)) / 1000);
      assert.ok(got.length <= Math.min(allowed, 40), `${got.length} replies to one source's 51 queries`);
    } finally {
      socket.close();
    }
    // Forty sources, five each: within each one's budget, not within the 100 a second in all.
    const many = await Promise.all(Array.from({ length: 40 }, (_, i) => udpFrom(`127.0.1.${i + 1}`)));
    try {
      const q = query('http://198.51.100.1/many');
      const started = Date.now();
      for (let round = 0; round < 5; round++) for (const m of many) m.socket.send(q, w.icpPort, ROUTER);
      await waitFor('all counted', async () => ((await denied()) === 251 ? true : null));
      await new Promise((r) => setTimeout(r, 200));
      const replies = many.reduce((n, m) => n + m.got.length, 0);
      const allowed = 100 + Math.ceil((100 * (Date.now() - started)) / 1000);
      assert.ok(replies <= Math.min(allowed, 190), `${replies} replies to 200 queries from 40 sources`);
      const c = await counters();
      const sent = (c['icp-answered-denied'] ?? 0) - (base['icp-answered-denied'] ?? 0);
      assert.equal(sent + (c['icp-denied-unanswered'] ?? 0), 251, JSON.stringify(c));
    } finally {
      for (const m of many) m.socket.close();
    }
    alive();
  });

  it('a newcomer joins and warms from A', async () => {
    const old = await w.buckets();
    await w.join(C);
    const now = await w.buckets();
    gained = now.findIndex((o, i) => o === C && old[i] === A);
    assert.ok(gained >= 0);
    assert.equal((await cWarmup())?.warming, true);
  });

  it("a source's invalid status line or reason phrase: 502 to the engine, counted, the daemon lives", async () => {
    const lines = ['HTTP/1.1 200 O\x01K', 'HTTP/1.1 099 Odd'];
    for (const [i, line] of lines.entries()) {
      const url = `http://${addressForBucket(gained)}/bad-status/${i}`;
      w.siblings[0]?.store.set(url, { body: Buffer.alloc(0), raw: `${line}\r\nContent-Length: 2\r\n\r\nok` });
      assert.equal(await icpQuery(C, w.icpPort, url), 'HIT', JSON.stringify(await counters()));
      assert.equal(await relayed(C, w.httpPort, url), 502, line);
    }
    alive();
    // Counted in the relay process, which reports each count as it happens (docs/warmup.md, "Where the relay runs").
    await waitFor('both counted', async () => ((await counters())['http-source-bad-status'] === 2 ? true : null));
  });

  it('a GET with a body (Content-Length or Transfer-Encoding): 400, the connection closed, never relayed', async () => {
    const url = `http://${addressForBucket(gained)}/with-body`;
    w.siblings[0]?.store.set(url, { body: Buffer.from('warm') });
    const relaysBefore = w.siblings[0]?.httpRequests.length ?? 0;
    const head = `GET ${url} HTTP/1.1\r\nHost: ${new URL(url).host}\r\n`;
    for (const framing of [
      `Content-Length: 40\r\n\r\n${'b'.repeat(40)}`,
      'Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
    ]) {
      assert.equal(await icpQuery(C, w.icpPort, url), 'HIT');
      assert.deepEqual(await rawHttp(C, w.httpPort, head + framing), { status: 400, closed: true }, framing);
    }
    assert.equal(w.siblings[0]?.httpRequests.length, relaysBefore, 'nothing was relayed');
    assert.equal((await counters())['http-bad-body'], 2);
    alive();
  });

  it("other addresses' connections (8 x 64) leave a member engine served; each is closed after its 403", async () => {
    const sockets: Socket[] = [];
    let answered = 0;
    let closed = 0;
    try {
      await Promise.all(
        Array.from(
          { length: 8 * 64 },
          (_, i) =>
            new Promise<void>((resolve) => {
              const s = connect({ host: ROUTER, port: w.httpPort, localAddress: `127.0.2.${(i >> 6) + 1}` });
              sockets.push(s);
              s.on('error', () => undefined);
              s.on('connect', () => {
                s.write('GET http://198.51.100.1/x HTTP/1.1\r\nHost: 198.51.100.1\r\n\r\n');
                resolve();
              });
              s.on('data', (d: Buffer) => {
                if (/^HTTP\/1\.1 403 /.test(d.toString('latin1'))) answered++;
              });
              s.on('close', () => {
                closed++;
                resolve();
              });
            }),
        ),
      );
      await waitFor('every other connection answered or refused, and closed', async () =>
        closed === 8 * 64 ? true : null,
      );
      assert.ok(answered > 0, 'some got their 403');
      const url = `http://${addressForBucket(gained)}/after-the-crowd`;
      w.siblings[0]?.store.set(url, { body: Buffer.from('warm') });
      assert.equal(await icpQuery(C, w.icpPort, url), 'HIT');
      assert.equal(await relayed(C, w.httpPort, url), 200);
    } finally {
      for (const s of sockets) s.destroy();
    }
    alive();
  });

  it("queries under a member's address: no name looked up for an engine that is not warming", async () => {
    const before = (await counters())['resolver-lookups'] ?? 0;
    assert.equal(await icpQuery(A, w.icpPort, 'http://slow.example.invalid/forged'), 'MISS');
    const c = await counters();
    assert.equal(c['resolver-lookups'] ?? 0, before, 'no lookup for A, which is not warming');
    assert.ok((c['icp-miss-not-warming'] ?? 0) >= 1);
  });

  it("a flood of forged queries under a warming engine's address does not end its warm-up", async () => {
    const { socket } = await udpFrom(C);
    try {
      // Every one of them a MISS at A, in C's gained bucket: asked and counted, 200 would end C's warm-up.
      for (let i = 0; i < 3000; i++) {
        socket.send(query(`http://${addressForBucket(gained)}/flood/${i}`, i + 1), w.icpPort, ROUTER);
        // In batches the daemon's socket buffer holds (a few hundred datagrams), well over 500 a second in all.
        if (i % 200 === 199) await new Promise((r) => setTimeout(r, 10));
      }
      // A flood's seconds are judged once the second after them has closed.
      await new Promise((r) => setTimeout(r, 3000));
    } finally {
      socket.close();
    }
    const v = await cWarmup();
    const c = await counters();
    const seen = ['icp-received', 'icp-miss-over-budget', 'icp-asked'].map((k) => `${k} ${c[k] ?? 0}`).join(', ');
    assert.deepEqual([v?.warming, v?.endReason], [true, null], `${JSON.stringify(v)}; ${seen}`);
    assert.ok(((await counters())['icp-miss-over-budget'] ?? 0) > 0);
    const url = `http://${addressForBucket(gained)}/after-the-flood`;
    w.siblings[0]?.store.set(url, { body: Buffer.from('warm') });
    assert.equal(await icpQuery(C, w.icpPort, url), 'HIT');
    alive();
    // What an operator sees of all of the above.
    const status = await wccpctl(['--url', w.daemon.url, 'status']);
    assert.match(
      status.stdout,
      /Dropped \(docs\/warmup\.md\): +from port 0 2, DENIED unsent \d+, over budget \d+, connections \d+, GET with body 2, bad source status 2\n/,
      status.stdout,
    );
  });

  it('a kill -9 of the relay process ends nothing: the daemon lives, counts and logs it, and relays again', async () => {
    const daemonPid = w.daemon.child.pid ?? 0;
    // The relay process is the daemon's one child process.
    const children = (): number[] =>
      readdirSync('/proc')
        .filter((n) => /^\d+$/.test(n))
        .filter((n) => {
          try {
            const stat = readFileSync(`/proc/${n}/stat`, 'utf8');
            return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === daemonPid;
          } catch {
            return false;
          }
        })
        .map(Number);
    const [relayPid] = children();
    assert.ok(relayPid !== undefined, 'the daemon runs a relay process');
    process.kill(relayPid, 'SIGKILL');
    await waitFor('the end counted', async () => ((await counters())['relay-process-exits'] === 1 ? true : null));
    alive();
    assert.ok(w.daemon.output.join('').includes('the relay process ended (SIGKILL)'), 'logged with its signal');
    const url = `http://${addressForBucket(gained)}/after-the-crash`;
    w.siblings[0]?.store.set(url, { body: Buffer.from('warm') });
    await waitFor('a relay again', async () => {
      if ((await icpQuery(C, w.icpPort, url)) !== 'HIT') return null;
      return (await relayed(C, w.httpPort, url)) === 200 ? true : null;
    });
    assert.notEqual(children()[0], relayPid, 'a new relay process');
    alive();
  });
});
