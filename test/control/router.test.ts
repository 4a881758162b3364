// The UDP router over real sockets on loopback (127.0.0.x, a non-2048 port): handshake, MD5, allowlist, junk.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { Cluster } from '../../src/cluster/index.js';
import type { ServiceGroupConfig } from '../../src/cluster/index.js';
import { WccpRouter } from '../../src/control/index.js';
import type { RouterServiceOptions } from '../../src/control/index.js';
import { recordingLog } from '../../src/log.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { serviceConfig } from '../cluster/helpers.js';
import { encodeMessage, findComponent } from '../../src/wire/wccp2/index.js';

const ROUTER = '127.0.0.1';

/** Service 0 with strict engines (each HERE_I_AM must echo our Receive ID) unless `over` says otherwise. */
const service = (over: Partial<ServiceGroupConfig> = {}): ServiceGroupConfig =>
  serviceConfig({ lenientReceiveId: 0, ...over });

async function withRouter(
  services: ServiceGroupConfig[],
  routerServices: RouterServiceOptions[],
  body: (r: {
    router: WccpRouter;
    cluster: Cluster;
    log: ReturnType<typeof recordingLog>;
    engine: (o: Partial<ConstructorParameters<typeof TestEngine>[0]> & { address: string }) => Promise<TestEngine>;
  }) => Promise<void>,
): Promise<void> {
  const clock = { now: () => Date.now() };
  const cluster = new Cluster({ clock, routerAddress: ROUTER, hereIAmMs: 10_000, services });
  const log = recordingLog();
  const router = new WccpRouter({ address: ROUTER, port: 0, services: routerServices, cluster, log, clock });
  await router.start();
  const engines: TestEngine[] = [];
  try {
    await body({
      router,
      cluster,
      log,
      engine: async (o) => {
        const e = new TestEngine({ router: { address: ROUTER, port: router.port() }, ...o });
        await e.start();
        engines.push(e);
        return e;
      },
    });
  } finally {
    for (const e of engines) await e.stop();
    await router.stop();
  }
}

test('a strict engine is answered at once and becomes usable after echoing the Receive ID', async () => {
  await withRouter(
    [service({ peers: ['127.0.0.2'] })],
    [{ id: 0, allow: ['127.0.0.0/24'] }],
    async ({ cluster, engine }) => {
      const e = await engine({ address: '127.0.0.11' });
      const first = await e.hereIAm();
      assert.ok(first, 'I_SEE_YOU received');
      assert.notEqual(first.receiveId, 0);
      assert.deepEqual(first.engines, [], 'not usable yet');
      assert.deepEqual(first.routers, [ROUTER, '127.0.0.2']);
      assert.equal(cluster.service(0)?.engines[0]?.state, 'joining');
      const second = await e.hereIAm();
      assert.deepEqual(second?.engines, ['127.0.0.11']);
      assert.equal(second?.myBuckets.length, 256);
      assert.equal(cluster.service(0)?.engines[0]?.state, 'usable');
      const identity = second?.message.components.find((c) => c.kind === 'router-identity');
      assert.deepEqual(identity?.kind === 'router-identity' && identity.receivedFrom, ['127.0.0.11']);
    },
  );
});

test('wrong MD5 is never usable and is counted; the right password works', async () => {
  await withRouter([service()], [{ id: 0, password: 'wccpsec1' }], async ({ router, cluster, engine }) => {
    const bad = await engine({ address: '127.0.0.12', password: 'wccpsec1', badMd5: true });
    for (let i = 0; i < 3; i++) assert.equal(await bad.hereIAm({ timeoutMs: 200 }), null, 'no answer to a bad digest');
    const unsigned = await engine({ address: '127.0.0.13' });
    assert.equal(await unsigned.hereIAm({ timeoutMs: 200 }), null, 'no answer without security');
    assert.equal(router.counters().dropped['auth-failure'], 4);
    assert.equal(cluster.service(0)?.counters['auth-failures'], 4);
    assert.deepEqual(cluster.service(0)?.engines, []);
    const good = await engine({ address: '127.0.0.14', password: 'wccpsec1' });
    await good.hereIAm();
    const seen = await good.hereIAm();
    assert.equal(seen?.myBuckets.length, 256);
    assert.ok(
      seen?.message.components.some((c) => c.kind === 'security' && c.option === 'md5'),
      'our answer is signed',
    );
  });
});

test('a source outside the allowlist is ignored and counted', async () => {
  await withRouter([service()], [{ id: 0, allow: ['127.0.0.0/28'] }], async ({ router, cluster, engine }) => {
    const outside = await engine({ address: '127.0.0.40' });
    assert.equal(await outside.hereIAm({ timeoutMs: 200 }), null);
    assert.equal(router.counters().dropped['not-allowed'], 1);
    assert.deepEqual(cluster.service(0)?.engines, []);
  });
});

test("a HERE_I_AM claiming another engine's identity is dropped", async () => {
  await withRouter([service()], [{ id: 0 }], async ({ router, cluster, engine }) => {
    const liar = await engine({ address: '127.0.0.15' });
    const bytes = Buffer.from(liar.hereIAmBytes());
    bytes.set([127, 0, 0, 16], 48); // WC Address inside Web-Cache Identity Info
    await liar.sendRaw(bytes);
    await liar.next(200);
    assert.equal(router.counters().dropped['identity-mismatch'], 1);
    assert.deepEqual(cluster.service(0)?.engines, []);
  });
});

/** Seeded xorshift32. */
function prng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x100000000;
  };
}

test('50,000 malformed or random datagrams from many source ports: router stays up, table unchanged, drops by kind, logs rate-limited', async (t) => {
  await withRouter(
    [service({ lenientReceiveId: 2 })],
    [{ id: 0, allow: ['127.0.0.0/24'] }],
    async ({ router, cluster, log, engine }) => {
      const good = await engine({ address: '127.0.0.11', behaviour: 'squid-5.7' });
      await good.hereIAm();
      await good.hereIAm();
      const before = cluster.service(0);
      assert.equal(before?.buckets.filter((b) => b === '127.0.0.11').length, 256);
      const template = good.hereIAmBytes();
      const rand = prng(20260801);
      const senders = await Promise.all(
        Array.from({ length: 50 }, async () => {
          const s = createSocket('udp4');
          await new Promise<void>((r) => s.bind(0, '127.0.0.20', () => r()));
          return s;
        }),
      );
      const junk = (): Buffer => {
        const r = rand();
        if (r < 0.3)
          return Buffer.from(Array.from({ length: Math.floor(rand() * 200) }, () => Math.floor(rand() * 256)));
        const b = Buffer.from(template);
        if (r < 0.6) return b.subarray(0, Math.floor(rand() * b.length));
        const flips = 1 + Math.floor(rand() * 4);
        for (let i = 0; i < flips; i++) {
          const at = Math.floor(rand() * b.length);
          b[at] = (b[at] ?? 0) ^ (1 << Math.floor(rand() * 8));
        }
        return b;
      };
      const TOTAL = 50_000;
      const BATCH = 100;
      for (let sent = 0; sent < TOTAL; sent += BATCH) {
        await Promise.all(
          Array.from(
            { length: BATCH },
            (_, i) =>
              new Promise<void>((resolve) => {
                senders[(sent + i) % senders.length]?.send(junk(), router.port(), ROUTER, () => resolve());
              }),
          ),
        );
        // Let the router catch up (bounded), so the kernel's socket buffer is not what is being tested.
        for (let wait = 0; wait < 50 && router.counters().received - 2 < sent + BATCH; wait++)
          await new Promise((r) => setTimeout(r, 1));
      }
      await new Promise((r) => setTimeout(r, 200));
      for (const s of senders) s.close();
      const c = router.counters();
      const junkReceived = c.received - 2;
      assert.ok(junkReceived >= TOTAL * 0.9, `router received ${junkReceived} of ${TOTAL}`);
      const dropped = Object.values(c.dropped).reduce((a, b) => a + b, 0);
      assert.equal(dropped, junkReceived, `every junk datagram dropped and counted: ${JSON.stringify(c.dropped)}`);
      t.diagnostic(`received ${junkReceived}, dropped ${JSON.stringify(c.dropped)}, ${log.lines.length} log lines`);
      assert.ok(Object.keys(c.dropped).length >= 4, `drops by kind: ${JSON.stringify(c.dropped)}`);
      assert.ok((c.dropped['decode-truncated'] ?? 0) > 0);
      assert.ok(
        log.lines.length <= Object.keys(c.dropped).length * 2,
        `${log.lines.length} log lines for ${dropped} drops`,
      );
      assert.deepEqual(cluster.service(0)?.buckets, before?.buckets);
      assert.equal(cluster.service(0)?.changeNumber, before?.changeNumber);
      const after = await good.hereIAm();
      assert.equal(after?.myBuckets.length, 256, 'the router still answers');
    },
  );
});

test("a mask service: when only the Mask/Value Sets change, the I_SEE_YOU's Assignment Key change number advances", async () => {
  const A = '127.0.0.11';
  const B = '127.0.0.12';
  await withRouter(
    // consistent: these weights give the same 256 buckets before and after the change below, but not the same values.
    [service({ assignment: 'mask', mode: 'consistent' })],
    [{ id: 0, allow: ['127.0.0.0/24'] }],
    async ({ cluster, engine }) => {
      const mask = { forwarding: 0x2, assignment: 0x2, return: 0x2 };
      const a = await engine({ address: A, weight: 24000, capabilities: mask });
      const b = await engine({ address: B, weight: 1000, capabilities: mask });
      for (const e of [a, b, a, b]) assert.ok(await e.hereIAm());
      /** What A is told: the Router View's Assignment Key and which engine each masked value names. */
      const told = async () => {
        const seen = await a.hereIAm();
        const view = seen ? findComponent(seen.message, 'router-view') : undefined;
        const map = seen ? findComponent(seen.message, 'assignment-map') : undefined;
        assert.ok(view && map, 'Router View and Assignment Map');
        return {
          key: view.assignmentKey,
          values: map.sets.flatMap((s) => s.values.map((v) => `${v.dstAddrValue}->${v.webCache}`)),
        };
      };
      const before = await told();
      const bucketsBefore = cluster.service(0)?.buckets;
      assert.equal(before.values.length, 64);
      assert.deepEqual(cluster.setWeight(0, A, 25000), { ok: true });
      const after = await told();
      assert.deepEqual(cluster.service(0)?.buckets, bucketsBefore, 'the bucket table did not change');
      assert.notDeepEqual(after.values, before.values, 'the mask values did');
      assert.equal(after.key.address, '127.0.0.1');
      assert.equal(after.key.changeNumber, before.key.changeNumber + 1, 'the Assignment Key advanced by one');
      assert.equal(cluster.service(0)?.changeNumber, after.key.changeNumber, 'the API shows the same change number');
    },
  );
});

test('engines that come and go (735 addresses, 32 at a time): the source ports the router remembers stay bounded', () => {
  let now = 1_000_000;
  const clock = { now: () => now };
  const cluster = new Cluster({
    clock,
    routerAddress: ROUTER,
    hereIAmMs: 10_000,
    services: [service({ lenientReceiveId: 2 })],
  });
  const log = recordingLog();
  const allow = ['192.0.2.0/24', '198.51.100.0/24', '203.0.113.0/24'];
  // Not started: handle() runs the real path, the answers go nowhere.
  const router = new WccpRouter({ address: ROUTER, port: 0, services: [{ id: 0, allow }], cluster, log, clock });
  const addresses = ['192.0.2', '198.51.100', '203.0.113'].flatMap((net) =>
    Array.from({ length: 245 }, (_, i) => `${net}.${i + 10}`),
  );
  let heard = 0;
  for (let round = 0; round * 32 < addresses.length; round++) {
    const batch = addresses.slice(round * 32, round * 32 + 32);
    for (const address of batch) {
      const e = new TestEngine({ address, router: { address: ROUTER, port: 2048 }, behaviour: 'squid-5.7' });
      for (let i = 0; i < 2; i++) router.handle(encodeMessage(e.hereIAmMessage()), { address, port: 40_000 + i });
      heard++;
    }
    assert.equal(cluster.service(0)?.engines.filter((x) => x.state === 'usable').length, batch.length);
    now += 31_000;
    cluster.tick();
    assert.equal(cluster.service(0)?.engines.length, 0, 'the batch is gone');
  }
  assert.equal(heard, addresses.length);
  assert.deepEqual(router.counters().dropped, {}, 'every HERE_I_AM was taken');
  assert.ok(router.trackedEngines() <= 64, `${router.trackedEngines()} engines' ports remembered`);
});
