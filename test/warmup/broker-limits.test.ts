// The warm-up broker read as an attacker and over weeks: source sockets stay bounded through many joins and
// departures; a flood of queries cannot grow the work in flight; a flood of fresh names cannot hold the resolver's
// threads; slow or idle HTTP clients hold a bounded number of connections, for a bounded time; a forged ICP answer
// that does not name the queried URL is not taken for a HIT.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { readdirSync } from 'node:fs';
import { connect } from 'node:net';
import type { Socket as TcpSocket } from 'node:net';
import { DEFAULT_WARMUP, DestinationResolver, IcpAsker, WarmupBroker, WarmupPolicy } from '../../src/warmup/index.js';
import type { RelayLimits, WarmupSettings } from '../../src/warmup/index.js';
import { decodeIcp, encodeIcp } from '../../src/wire/icp.js';
import { recordingLog } from '../../src/log.js';
import { freeTcpPort, freeUdpPort, waitFor } from '../helpers/daemon.js';
import { fakeClock, hereIAm, testCluster } from '../cluster/helpers.js';
import { exchange, icpQuery, Sibling } from './sibling.js';

const ROUTER = '127.0.0.1';

function addressForBucket(b: number): string {
  return `198.51.100.${198 ^ 51 ^ 100 ^ b}`;
}

function openFds(): number {
  return readdirSync('/proc/self/fd').length;
}

/** A cluster, a policy that observes it, a broker on loopback; `join` registers an engine as Squid does. */
async function setup(
  opts: {
    settings?: Partial<WarmupSettings>;
    limits?: Partial<RelayLimits>;
    lookup?: (h: string) => Promise<string | null>;
    sourceIcp?: number;
    log?: ReturnType<typeof recordingLog>;
  } = {},
) {
  const { clock, cluster } = testCluster({ routerAddress: ROUTER });
  // Sources join a moment before their newcomers here: minSourceHold 0 lets them be asked all the same.
  const policy = new WarmupPolicy(
    new Map([[0, { ...DEFAULT_WARMUP, maxPeerHits: 1_000_000, minHitRatio: 0, minSourceHoldMs: 0, ...opts.settings }]]),
    clock,
  );
  cluster.onEvent(() => {
    const s = cluster.service(0);
    if (s) policy.observe(s);
  });
  const sourceIcp = opts.sourceIcp ?? (await freeUdpPort());
  const sourceHttp = await freeTcpPort();
  const broker = new WarmupBroker({
    listen: ROUTER,
    icpPort: 0,
    httpPort: 0,
    sourceIcpPort: sourceIcp,
    sourceHttpPort: sourceHttp,
    policy,
    clock,
    log: opts.log ?? recordingLog(),
    lookup: opts.lookup ?? (async () => null),
    ...(opts.limits ? { limits: opts.limits } : {}),
  });
  await broker.start();
  const join = (addr: string): void => {
    cluster.hereIAm(hereIAm(addr));
    const plan = cluster.iSeeYou(0, addr);
    cluster.hereIAm(hereIAm(addr, { receivedId: plan?.receiveId ?? 0 }));
  };
  /** Lets every engine's HERE_I_AMs lapse until the cluster has none left (bounded). */
  const departAll = (): void => {
    for (let i = 0; i < 20 && (cluster.service(0)?.engines.length ?? 0) > 0; i++) {
      clock.advance(10_000);
      cluster.tick();
    }
    assert.equal(cluster.service(0)?.engines.length, 0, 'every engine departed');
  };
  return {
    clock,
    cluster,
    policy,
    broker,
    join,
    departAll,
    sourceIcp,
    sourceHttp,
    icpPort: broker.icpPort() ?? 0,
    httpPort: broker.httpPort() ?? 0,
  };
}

/** Sends one datagram to 127.0.0.1:`port` from `address` (a loopback address of its own). */
async function sendFrom(address: string, port: number, bytes: Buffer): Promise<void> {
  const s = createSocket('udp4');
  try {
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.bind(0, address, () => resolve());
    });
    await new Promise<void>((resolve, reject) => s.send(bytes, port, ROUTER, (e) => (e ? reject(e) : resolve())));
  } finally {
    s.close();
  }
}

describe('warm-up broker limits', () => {
  it('ICP from 400 forged sources (queries from no member, junk): counted each, logged a few lines, not one per source', async () => {
    const log = recordingLog();
    const t = await setup({ log });
    try {
      const query = encodeIcp({
        opcode: 'QUERY',
        requestNumber: 7,
        options: 0,
        optionData: 0,
        senderAddress: '0.0.0.0',
        requesterAddress: '0.0.0.0',
        url: 'http://198.51.100.1/x',
      });
      for (let i = 0; i < 400; i++) {
        const from = `127.3.${i >> 7}.${(i & 127) + 1}`;
        await sendFrom(from, t.icpPort, i % 2 === 0 ? query : Buffer.from('not ICP at all'));
        // Let the broker read them in batches: more than a socket buffer's worth at once would be lost, not refused.
        if (i % 32 === 31)
          await waitFor(
            'the batch read',
            async () => ((t.broker.snapshotCounters()['icp-received'] ?? 0) > i ? true : null),
            10_000,
          );
      }
      await waitFor(
        'every datagram counted',
        async () => (t.broker.snapshotCounters()['icp-received'] === 400 ? true : null),
        10_000,
      );
      const c = t.broker.snapshotCounters();
      assert.equal(c['icp-denied'], 200);
      assert.equal(c['icp-bad'], 200);
      const lines = log.lines.filter((l) => /warm-up broker: (bad ICP datagram|ICP query from)/.test(l.msg ?? ''));
      assert.ok(lines.length <= 2, `${lines.length} log lines for 400 sources`);
      assert.equal(lines.length, 2, 'each reason is reported');
      // The next report (10 s on the broker's clock) says how many it held back, and from how many sources.
      t.clock.advance(10_000);
      await sendFrom('127.3.9.9', t.icpPort, query);
      await waitFor(
        'the summary line',
        async () => log.lines.find((l) => /and 199 more like it from 199 sources/.test(l.msg ?? '')) ?? null,
        10_000,
      );
    } finally {
      await t.broker.stop();
    }
  });

  it("closes a departed source's ICP socket: 60 sources joined, warmed a newcomer and left; sockets and fds stay bounded", async () => {
    const t = await setup();
    const fdsBefore = openFds();
    let maxSockets = 0;
    let hits = 0;
    try {
      for (let i = 0; i < 60; i++) {
        const source = `127.0.1.${i + 1}`;
        const newcomer = `127.0.2.${i + 1}`;
        const sibling = new Sibling(source);
        await sibling.start(t.sourceIcp, t.sourceHttp);
        try {
          t.join(source);
          t.join(newcomer);
          const buckets = t.cluster.service(0)?.buckets ?? [];
          const gained = buckets.findIndex((o) => o === newcomer);
          assert.ok(gained >= 0, 'the newcomer gained buckets from the source');
          const url = `http://${addressForBucket(gained)}/cycle/${i}`;
          sibling.store.set(url, { body: Buffer.from('x') });
          if ((await icpQuery(newcomer, t.icpPort, url)) === 'HIT') hits++;
          maxSockets = Math.max(maxSockets, t.broker.gauges().sourceSockets);
          t.departAll();
          assert.equal(t.broker.gauges().sourceSockets, 0, `cycle ${i}: the departed source's socket is closed`);
        } finally {
          await sibling.stop();
        }
      }
    } finally {
      await t.broker.stop();
    }
    assert.equal(hits, 60, 'every newcomer was warmed from its source');
    assert.equal(maxSockets, 1);
    // The broker's own two sockets are closed by stop(); what is left is what the test itself still holds.
    assert.ok(openFds() <= fdsBefore + 2, `fds: ${fdsBefore} before, ${openFds()} after 60 sources`);
  });

  it('a flood of queries from a member: at most maxPendingQueries in flight, the rest MISS at once', async () => {
    // The source swallows queries: each asked one waits the whole peerTimeout.
    const sourceIcp = await freeUdpPort();
    const sink = createSocket('udp4');
    let swallowed = 0;
    sink.on('message', () => {
      swallowed++;
    });
    await new Promise<void>((r) => sink.bind(sourceIcp, '127.0.0.11', () => r()));
    const t = await setup({ sourceIcp, settings: { peerTimeoutMs: 1500 }, limits: { maxPendingQueries: 8 } });
    const flood = createSocket('udp4');
    try {
      t.join('127.0.0.11');
      t.join('127.0.0.13');
      const gained = (t.cluster.service(0)?.buckets ?? []).findIndex((o) => o === '127.0.0.13');
      await new Promise<void>((r) => flood.bind(0, '127.0.0.13', () => r()));
      const answers: string[] = [];
      flood.on('message', (m) => {
        const d = decodeIcp(m);
        if (d.ok) answers.push(d.value.opcode);
      });
      for (let i = 0; i < 200; i++) {
        const url = `http://${addressForBucket(gained)}/flood/${i}`;
        flood.send(
          encodeIcp({
            opcode: 'QUERY',
            requestNumber: i + 1,
            options: 0,
            optionData: 0,
            senderAddress: '0.0.0.0',
            requesterAddress: '127.0.0.13',
            url,
          }),
          t.icpPort,
          ROUTER,
        );
      }
      // The 192 beyond the bound are answered MISS at once, well before the 8 asked ones time out.
      for (let i = 0; i < 100 && answers.length < 192; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(answers.length, 192);
      const g = t.broker.gauges();
      assert.ok(g.pendingQueries <= 8 && g.sourceQueries <= 8, JSON.stringify(g));
      assert.equal(t.broker.snapshotCounters()['icp-miss-overload'], 192);
      for (let i = 0; i < 300 && answers.length < 200; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(answers.length, 200, 'the asked ones are answered after peerTimeout');
      assert.ok(answers.every((a) => a === 'MISS'));
      assert.equal(swallowed, 8);
      assert.deepEqual([t.broker.gauges().pendingQueries, t.broker.gauges().sourceQueries], [0, 0]);
    } finally {
      flood.close();
      await t.broker.stop();
      sink.close();
    }
  });

  it('a flood of fresh names: at most two lookups at once, the rest MISS at once; the name cache stays bounded', async () => {
    const stuck: (() => void)[] = [];
    const lookup = (): Promise<string | null> =>
      new Promise((resolve) => {
        stuck.push(() => resolve(null));
      });
    const t = await setup({ lookup, settings: { peerTimeoutMs: 200 } });
    try {
      t.join('127.0.0.11');
      t.join('127.0.0.13');
      const replies = await Promise.all(
        Array.from({ length: 50 }, (_, i) => icpQuery('127.0.0.13', t.icpPort, `http://n${i}.flood.example/x`, i + 1)),
      );
      assert.ok(replies.every((r) => r === 'MISS'));
      assert.equal(stuck.length, 2, 'only two lookups were started');
      assert.equal(t.broker.gauges().resolverInflight, 2);
      assert.equal(t.broker.snapshotCounters()['resolver-busy'], 48);
      for (const f of stuck) f();
    } finally {
      await t.broker.stop();
    }
    const clock = fakeClock();
    const r = new DestinationResolver({
      clock,
      lookup: async (h) => (h.startsWith('a') ? '198.51.100.7' : null),
      maxEntries: 100,
      maxInflight: 1000,
    });
    for (let i = 0; i < 1000; i++) await r.resolve(`${i % 2 === 0 ? 'a' : 'b'}${i}.example`, 100);
    assert.equal(r.size(), 100);
  });

  it('idle and slow HTTP clients: bounded per address and in all, and dropped after headersTimeout', async () => {
    const t = await setup({ limits: { maxConnectionsPerAddress: 4, maxConnections: 6, headersTimeoutMs: 600 } });
    // The bounds of member engines' connections (other addresses have a pool of their own).
    t.join('127.0.0.99');
    t.join('127.0.0.98');
    const sockets: TcpSocket[] = [];
    const open = (from: string): Promise<TcpSocket> =>
      new Promise((resolve) => {
        const s = connect({ host: ROUTER, port: t.httpPort, localAddress: from }, () => resolve(s));
        s.on('error', () => undefined);
        sockets.push(s);
      });
    const closed = (s: TcpSocket): Promise<boolean> =>
      new Promise((resolve) => {
        if (s.destroyed || s.readableEnded) {
          resolve(true);
          return;
        }
        const timer = setTimeout(() => resolve(false), 300);
        s.once('close', () => {
          clearTimeout(timer);
          resolve(true);
        });
      });
    try {
      const first = await Promise.all(Array.from({ length: 6 }, () => open('127.0.0.99')));
      // A slow client: a request line, and then nothing.
      for (const s of first) s.write('GET http://198.51.100.1/ HTTP/1.1\r\n');
      const fromOne = await Promise.all(first.map(closed));
      assert.deepEqual(
        fromOne.map((c) => (c ? 1 : 0) as number).reduce((a, b) => a + b, 0),
        2,
        'two past the per-address bound were closed',
      );
      const others = await Promise.all(Array.from({ length: 3 }, () => open('127.0.0.98')));
      const fromOther = await Promise.all(others.map(closed));
      assert.equal(fromOther.filter(Boolean).length, 1, 'one past the total bound was closed');
      assert.equal(t.broker.gauges().connections, 6);
      assert.equal(t.broker.snapshotCounters()['http-connections-refused'], 3);
      // headersTimeout (checked every second at most): every slow client is gone within a few seconds.
      for (let i = 0; i < 50 && t.broker.gauges().connections > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal(t.broker.gauges().connections, 0, 'slow clients were dropped');
    } finally {
      for (const s of sockets) s.destroy();
      await t.broker.stop();
    }
  });

  it('a client that connects and never sends a byte is dropped after headersTimeout', async () => {
    // Node starts a new connection's headersTimeout when it is accepted (408 and closed), so idle connections that
    // never send anything cannot hold the broker's slots (512, 64 per address) for longer than that.
    const t = await setup({ limits: { headersTimeoutMs: 600 } });
    t.join('127.0.0.99');
    const sockets: TcpSocket[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const s = connect({ host: ROUTER, port: t.httpPort, localAddress: '127.0.0.99' });
        s.on('error', () => undefined);
        sockets.push(s);
        await new Promise((r) => s.once('connect', r));
        s.resume();
      }
      await waitFor(
        'the broker counts the connections',
        async () => (t.broker.gauges().connections === 3 ? true : null),
        5000,
      );
      for (let i = 0; i < 100 && t.broker.gauges().connections > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal(t.broker.gauges().connections, 0, 'silent connections were dropped');
      await waitFor(
        'the clients see the close',
        async () => (sockets.every((s) => s.readableEnded) ? true : null),
        5000,
      );
    } finally {
      for (const s of sockets) s.destroy();
      await t.broker.stop();
    }
  });

  it('idle keep-alive connections count against the same bounds and are closed after idleKeepAliveMs', async () => {
    const t = await setup({ limits: { maxConnectionsPerAddress: 4, maxConnections: 6, idleKeepAliveMs: 1000 } });
    t.join('127.0.0.13');
    const sockets: TcpSocket[] = [];
    try {
      // Each connection gets one answer (no source confirmed the URL: 504) and then stays idle, as Squid keeps one.
      const answers = [];
      for (let i = 0; i < 5; i++) {
        const s = connect({ host: ROUTER, port: t.httpPort, localAddress: '127.0.0.13' });
        s.on('error', () => undefined);
        sockets.push(s);
        answers.push(await exchange(s, 'http://198.51.100.1/idle'));
      }
      assert.deepEqual(
        answers.map((a) => ('status' in a ? a.status : a.error)),
        [504, 504, 504, 504, 'the broker closed the connection'],
        'the fifth connection from one address is closed at once',
      );
      assert.equal(t.broker.gauges().connections, 4);
      assert.equal(t.broker.snapshotCounters()['http-connections-refused'], 1);
      for (let i = 0; i < 100 && t.broker.gauges().connections > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal(t.broker.gauges().connections, 0, 'idle connections were closed');
      assert.ok(sockets.every((s) => s.destroyed || s.readableEnded));
    } finally {
      for (const s of sockets) s.destroy();
      await t.broker.stop();
    }
  });

  it("closes its idle connection to a source after sourceIdleKeepAliveMs, before the source's own keep-alive", async () => {
    const t = await setup({ limits: { sourceIdleKeepAliveMs: 500 } });
    const source = new Sibling('127.0.0.11');
    await source.start(t.sourceIcp, t.sourceHttp);
    const engine = connect({ host: ROUTER, port: t.httpPort, localAddress: '127.0.0.13' });
    engine.on('error', () => undefined);
    const sourceConnections = (): Promise<number> =>
      new Promise((resolve) => source.http?.getConnections((_e, n) => resolve(n)) ?? resolve(0));
    try {
      t.join('127.0.0.11');
      t.join('127.0.0.13');
      const gained = (t.cluster.service(0)?.buckets ?? []).findIndex((o) => o === '127.0.0.13');
      const url = `http://${addressForBucket(gained)}/source-idle`;
      source.store.set(url, { body: Buffer.from('x') });
      assert.equal(await icpQuery('127.0.0.13', t.icpPort, url), 'HIT');
      assert.deepEqual(await exchange(engine, url), { status: 200, body: 'x' });
      assert.equal(await sourceConnections(), 1, 'the relay left its connection to the source open for reuse');
      // The source (like Squid, 120 s) would keep it much longer: the broker closes it first.
      for (let i = 0; i < 100 && (await sourceConnections()) > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal(await sourceConnections(), 0, 'the broker closed its idle connection to the source');
    } finally {
      engine.destroy();
      await t.broker.stop();
      await source.stop();
    }
  });

  it('an ICP answer with the right request number but another URL is not a HIT', async () => {
    const port = await freeUdpPort();
    const forger = createSocket('udp4');
    forger.on('message', (m, r) => {
      const d = decodeIcp(m);
      if (!d.ok) return;
      forger.send(
        encodeIcp({
          opcode: 'HIT',
          requestNumber: d.value.requestNumber,
          options: 0,
          optionData: 0,
          senderAddress: '127.0.0.11',
          url: `${d.value.url}/other`,
        }),
        r.port,
        r.address,
      );
    });
    await new Promise<void>((r) => forger.bind(port, '127.0.0.11', () => r()));
    const asker = new IcpAsker({ bindAddress: ROUTER, port });
    try {
      assert.equal(await asker.ask('127.0.0.11', 'http://198.51.100.5/x', '127.0.0.13', 300), 'timeout');
    } finally {
      asker.close();
      forger.close();
    }
  });
});
