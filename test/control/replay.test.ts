// Replays over real UDP on loopback against the router, MD5 on, strict engines, the cluster on an injected clock:
// a captured, validly signed HERE_I_AM (or SHUTDOWN) re-sent from the engine's own address is dropped and counted
// `stale-receive-id`; a dead engine's buckets move 3 x HERE_I_AM_T after its last genuine HERE_I_AM.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster } from '../../src/cluster/index.js';
import { WccpRouter } from '../../src/control/index.js';
import { recordingLog } from '../../src/log.js';
import { CommandType, findComponent } from '../../src/wire/wccp2/index.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { fakeClock, serviceConfig } from '../cluster/helpers.js';

const ROUTER = '127.0.0.1';
const PASSWORD = 'wccpsec1';

async function withRouter(
  body: (r: {
    router: WccpRouter;
    cluster: Cluster;
    clock: { now(): number; advance(ms: number): void };
    e1: TestEngine;
    e2: TestEngine;
  }) => Promise<void>,
  lenientReceiveId = 0,
): Promise<void> {
  const clock = fakeClock(5_000_000);
  const cluster = new Cluster({
    clock,
    routerAddress: ROUTER,
    hereIAmMs: 10_000,
    services: [serviceConfig({ lenientReceiveId })],
  });
  const router = new WccpRouter({
    address: ROUTER,
    port: 0,
    services: [{ id: 0, password: PASSWORD, allow: ['127.0.0.0/24'] }],
    cluster,
    log: recordingLog(),
    clock,
  });
  await router.start();
  const e1 = new TestEngine({
    address: '127.0.0.11',
    router: { address: ROUTER, port: router.port() },
    password: PASSWORD,
  });
  const e2 = new TestEngine({
    address: '127.0.0.12',
    router: { address: ROUTER, port: router.port() },
    password: PASSWORD,
  });
  try {
    await e1.start();
    await e2.start();
    for (const e of [e1, e2, e1, e2]) assert.ok(await e.hereIAm(), 'I_SEE_YOU');
    assert.deepEqual(
      cluster.service(0)?.engines.map((e) => e.state),
      ['usable', 'usable'],
    );
    await body({ router, cluster, clock, e1, e2 });
  } finally {
    await e1.stop();
    await e2.stop();
    await router.stop();
  }
}

test("UDP + MD5: a captured HERE_I_AM replayed from a dead strict engine's address does not keep it; its buckets move at 30 s", async () => {
  await withRouter(async ({ router, cluster, clock, e1, e2 }) => {
    const owned = (a: string) => cluster.service(0)?.buckets.filter((b) => b === a).length ?? 0;
    assert.equal(owned('127.0.0.11'), 128);
    // E1's last HERE_I_AM, captured on the wire: the very bytes it sends (signed, echoing its latest Receive ID).
    const captured = e1.hereIAmBytes();
    assert.ok(await e1.hereIAm(), 'the genuine one is answered');
    const diedAt = clock.now();
    // E1 dies; the capture is replayed from its address every 5 s; E2 keeps talking every 10 s.
    for (let s = 5; s < 30; s += 5) {
      clock.advance(5_000);
      await e1.sendRaw(captured);
      const answer = await e1.next(1000);
      assert.equal(
        answer?.type,
        'I_SEE_YOU',
        'a stale HERE_I_AM is answered (at most once a second) so a restarted engine can prove itself',
      );
      if (s % 10 === 0) assert.ok(await e2.hereIAm());
      cluster.tick();
      assert.equal(
        cluster.service(0)?.engines.find((e) => e.address === '127.0.0.11')?.state,
        'usable',
        `${s} s after it died`,
      );
    }
    const dropped = router.counters().dropped;
    assert.equal(dropped['stale-receive-id'], 5);
    assert.equal(dropped['auth-failure'], undefined, 'the replays are validly signed');
    assert.equal(cluster.service(0)?.counters['stale-receive-id'], 5);
    clock.advance(diedAt + 30_000 - clock.now());
    cluster.tick();
    assert.equal(
      cluster.service(0)?.engines.some((e) => e.address === '127.0.0.11'),
      false,
    );
    assert.equal(owned('127.0.0.12'), 256);
  });
});

test('UDP + MD5: an old SHUTDOWN replayed does not drain a live strict engine and gets no SHUTDOWN_RESPONSE', async () => {
  await withRouter(async ({ router, cluster, clock, e1 }) => {
    const state = () => cluster.service(0)?.engines.find((e) => e.address === '127.0.0.11')?.state;
    const shutdown = e1.hereIAmBytes({ shutdown: true });
    const seen = await e1.hereIAm({ shutdown: true });
    assert.equal(seen?.shutdownResponse, true);
    assert.equal(state(), 'draining');
    clock.advance(10_000);
    assert.ok(await e1.hereIAm());
    assert.equal(state(), 'usable');
    clock.advance(5_000);
    await e1.sendRaw(shutdown);
    const answer = await e1.next(1000);
    assert.ok(answer);
    assert.equal(answer.type, 'I_SEE_YOU');
    assert.notEqual(findComponent(answer, 'command-extension')?.commandType, CommandType.SHUTDOWN_RESPONSE);
    assert.equal(state(), 'usable');
    assert.equal(cluster.service(0)?.buckets.filter((b) => b === '127.0.0.11').length, 128);
    assert.equal(router.counters().dropped['stale-receive-id'], 1);
    // The live engine carries on: its next HERE_I_AM echoes its own latest Receive ID and counts.
    clock.advance(5_000);
    assert.ok(await e1.hereIAm());
    assert.equal(state(), 'usable');
    assert.equal(router.counters().dropped['stale-receive-id'], 1);
  });
});

test("UDP + MD5, a lenient service: a gone strict engine's captured HERE_I_AM replayed does not make it usable leniently", async () => {
  await withRouter(async ({ router, cluster, clock, e1, e2 }) => {
    const e1State = () => cluster.service(0)?.engines.find((e) => e.address === '127.0.0.11');
    const owned = (a: string) => cluster.service(0)?.buckets.filter((b) => b === a).length ?? 0;
    assert.equal(owned('127.0.0.11'), 128);
    // Its last HERE_I_AM, signed and echoing our latest Receive ID, captured on the wire; then it dies.
    const captured = e1.hereIAmBytes();
    assert.ok(await e1.hereIAm());
    for (let s = 10; s <= 30; s += 10) {
      clock.advance(10_000);
      assert.ok(await e2.hereIAm());
      cluster.tick();
    }
    assert.equal(e1State(), undefined, 'gone 30 s after its last HERE_I_AM');
    assert.equal(owned('127.0.0.12'), 256);
    // Now the capture is replayed every 5 s for a minute (a Squid 5.7 would be usable at its second HERE_I_AM).
    for (let s = 5; s <= 60; s += 5) {
      clock.advance(5_000);
      await e1.sendRaw(captured);
      assert.equal((await e1.next(1000))?.type, 'I_SEE_YOU', 'answered, so a live engine could echo');
      if (s % 10 === 0) assert.ok(await e2.hereIAm());
      cluster.tick();
      assert.equal(e1State()?.state, 'joining', `${s} s into the replay`);
    }
    assert.equal(e1State()?.flags.noReceiveIdEcho, false);
    assert.equal(owned('127.0.0.12'), 256, 'the dead engine got no buckets');
    assert.equal(router.counters().dropped['auth-failure'], undefined, 'the replays are validly signed');
  }, 2);
});

test('UDP + MD5, a lenient service: a live strict engine that comes back after it was gone is usable again at its echo', async () => {
  await withRouter(async ({ cluster, clock, e1, e2 }) => {
    const e1State = () => cluster.service(0)?.engines.find((e) => e.address === '127.0.0.11')?.state;
    for (let s = 10; s <= 30; s += 10) {
      clock.advance(10_000);
      assert.ok(await e2.hereIAm());
      cluster.tick();
    }
    assert.equal(e1State(), undefined, 'gone');
    // It was only cut off: it still echoes the Receive ID it saw last, then the one we answer now.
    assert.ok(await e1.hereIAm());
    assert.equal(e1State(), 'joining');
    assert.ok(await e1.hereIAm());
    assert.equal(e1State(), 'usable');
    assert.equal(cluster.service(0)?.engines.find((e) => e.address === '127.0.0.11')?.flags.noReceiveIdEcho, false);
  }, 2);
});
