// Replays against strict engines, on the injected clock: a HERE_I_AM counts for liveness only when it echoes an
// I_SEE_YOU sent to that engine since its last counted one. Captured messages (including SHUTDOWN) are dropped and
// counted `stale-receive-id`; lost answers, engine restarts and the Receive ID's wrap at 2^32 still work.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { HereIAm, ServiceGroupConfig } from '../../src/cluster/index.js';
import { hereIAm, testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

/** A group of strict engines unless `service` says otherwise. */
function setup(service: Partial<ServiceGroupConfig> = { lenientReceiveId: 0 }) {
  const group = testCluster({ service });
  const stale = () => group.cluster.service(0)?.counters['stale-receive-id'] ?? 0;
  return { ...group, stale };
}

test('a captured HERE_I_AM replayed every second does not keep a dead strict engine: its buckets move at 30 s', () => {
  const { clock, cluster, say, engine, owned, stale } = setup();
  say(E1);
  say(E1);
  say(E2);
  say(E2);
  assert.equal(owned(E1), 128);
  // E1's last genuine HERE_I_AM, seen on the wire and captured: it echoes the I_SEE_YOU E1 got last.
  const lastSent = cluster.iSeeYou(0, E1)?.receiveId ?? 0;
  const captured = hereIAm(E1, { receivedId: lastSent });
  assert.equal(cluster.hereIAm(captured).kind, 'answer');
  cluster.iSeeYou(0, E1);
  const diedAt = clock.now();
  // E1 dies. The attacker replays the capture every second; E2 keeps talking every 10 s.
  for (let t = 1; t < 30; t++) {
    clock.advance(1000);
    const out = cluster.hereIAm(captured);
    assert.equal(out.kind, 'stale', `replay at ${t} s`);
    if (out.kind === 'stale' && out.answer) cluster.iSeeYou(0, E1, 'stale');
    if (t % 10 === 0) say(E2);
    cluster.tick();
  }
  assert.equal(stale(), 29);
  assert.equal(clock.now() - diedAt, 29_000);
  assert.equal(engine(E1)?.state, 'usable', 'not gone before 3 x HERE_I_AM_T');
  assert.equal(cluster.nextDue(), diedAt + 30_000, 'the removal is due 30 s after its last genuine HERE_I_AM');
  clock.advance(1000);
  cluster.tick();
  assert.equal(engine(E1), undefined);
  assert.equal(owned(E2), 256);
});

test('every older capture is stale too, and so is a capture replayed while the engine still lives', () => {
  const { cluster, say, engine, owned, stale } = setup();
  say(E1);
  say(E2);
  say(E2);
  const captures: HereIAm[] = [];
  let last = cluster.iSeeYou(0, E1)?.receiveId ?? 0;
  for (let i = 0; i < 5; i++) {
    const m = hereIAm(E1, { receivedId: last });
    captures.push(m);
    assert.equal(cluster.hereIAm(m).kind, 'answer', `genuine HERE_I_AM ${i}`);
    last = cluster.iSeeYou(0, E1)?.receiveId ?? 0;
  }
  for (const m of captures) assert.equal(cluster.hereIAm(m).kind, 'stale');
  assert.equal(stale(), 5);
  assert.equal(engine(E1)?.state, 'usable', 'stale messages change nothing');
  assert.equal(owned(E1), 128);
  // The live engine's next genuine HERE_I_AM still counts: answering the replays did not push its Receive ID out.
  assert.equal(cluster.hereIAm(hereIAm(E1, { receivedId: last })).kind, 'answer');
});

test('an old SHUTDOWN does not drain a live strict engine; a fresh one does', () => {
  const { cluster, say, engine, owned, stale } = setup();
  say(E1);
  say(E1);
  say(E2);
  say(E2);
  // E1 as a strict engine: every HERE_I_AM echoes the I_SEE_YOU it got last.
  let echo = cluster.iSeeYou(0, E1)?.receiveId ?? 0;
  const send = (over: Partial<HereIAm> = {}) => {
    const m = hereIAm(E1, { receivedId: echo, ...over });
    const out = cluster.hereIAm(m);
    echo = cluster.iSeeYou(0, E1)?.receiveId ?? 0;
    return { m, out };
  };
  // It shuts down once (genuinely), is captured doing so, and comes back.
  const shutdown = send({ shutdown: true });
  assert.deepEqual(shutdown.out, { kind: 'answer', shutdownResponse: true });
  assert.equal(engine(E1)?.state, 'draining');
  assert.deepEqual(engine(E1)?.drains, ['shutdown']);
  send();
  assert.equal(engine(E1)?.state, 'usable');
  const out = cluster.hereIAm(shutdown.m);
  assert.equal(out.kind, 'stale');
  assert.match(
    out.kind === 'stale' ? out.reason : '',
    /^SHUTDOWN from 192\.0\.2\.11 echoes Receive ID \d+, not an I_SEE_YOU sent to it since its last counted HERE_I_AM/,
  );
  assert.equal(engine(E1)?.state, 'usable');
  assert.equal(owned(E1), 128);
  assert.equal(stale(), 1);
  // A SHUTDOWN without any Receive ID (from an engine that echoed before) is stale as well.
  assert.equal(cluster.hereIAm(hereIAm(E1, { shutdown: true })).kind, 'stale');
  assert.equal(engine(E1)?.state, 'usable');
  assert.deepEqual(send({ shutdown: true }).out, { kind: 'answer', shutdownResponse: true });
  assert.equal(engine(E1)?.state, 'draining');
});

test('a lost I_SEE_YOU: the repeated echo is stale but answered, and the echo of that answer counts', () => {
  const { clock, cluster, say, engine, stale } = setup();
  say(E1);
  say(E1);
  const got = cluster.iSeeYou(0, E1)?.receiveId ?? 0;
  assert.equal(cluster.hereIAm(hereIAm(E1, { receivedId: got })).kind, 'answer');
  cluster.iSeeYou(0, E1); // lost on the way
  clock.advance(10_000);
  const again = cluster.hereIAm(hereIAm(E1, { receivedId: got }));
  assert.deepEqual(again.kind === 'stale' && again.answer, true);
  const fresh = cluster.iSeeYou(0, E1, 'stale')?.receiveId ?? 0;
  // A second stale one within HERE_I_AM_T/10 is not answered (a replay flood gets one answer a second).
  const flood = cluster.hereIAm(hereIAm(E1, { receivedId: got }));
  assert.deepEqual(flood.kind === 'stale' && flood.answer, false);
  clock.advance(10_000);
  assert.equal(cluster.hereIAm(hereIAm(E1, { receivedId: fresh })).kind, 'answer');
  assert.equal(engine(E1)?.state, 'usable');
  assert.equal(engine(E1)?.lastHereIAm, clock.now());
  assert.equal(stale(), 2);
  // Each I_SEE_YOU vouches once: echoing `fresh` again is stale.
  assert.equal(cluster.hereIAm(hereIAm(E1, { receivedId: fresh })).kind, 'stale');
});

test('a strict engine that restarts (Receive ID 0) proves itself again with its next HERE_I_AM and keeps its buckets', () => {
  const { clock, cluster, say, engine, owned } = setup();
  say(E1);
  say(E1);
  say(E2);
  say(E2);
  const before = [...(cluster.service(0)?.buckets ?? [])];
  clock.advance(5_000);
  const first = cluster.hereIAm(hereIAm(E1)); // the restarted engine knows no Receive ID yet
  assert.equal(first.kind, 'stale');
  assert.match(first.kind === 'stale' ? first.reason : '', /without our Receive ID although it echoed one before/);
  const id = cluster.iSeeYou(0, E1, 'stale')?.receiveId ?? 0;
  clock.advance(10_000);
  assert.equal(cluster.hereIAm(hereIAm(E1, { receivedId: id })).kind, 'answer');
  assert.equal(engine(E1)?.state, 'usable');
  assert.equal(owned(E1), 128);
  assert.deepEqual(cluster.service(0)?.buckets, before);
});

test('Receive IDs wrap from 2^32-1 to 1: echoes across the wrap count, an older one (numerically larger) does not', () => {
  const seeded = setup();
  const memory = seeded.cluster.memory()[0];
  assert.ok(memory);
  seeded.cluster.restore({ ...memory, receiveId: 0xfffffffd });
  const c = seeded.cluster;
  assert.equal(c.hereIAm(hereIAm(E1)).kind, 'answer');
  const a = c.iSeeYou(0, E1)?.receiveId;
  assert.equal(a, 0xfffffffe);
  assert.equal(c.hereIAm(hereIAm(E1, { receivedId: a })).kind, 'answer');
  const b = c.iSeeYou(0, E1)?.receiveId;
  assert.equal(b, 0xffffffff);
  assert.equal(c.hereIAm(hereIAm(E1, { receivedId: b })).kind, 'answer');
  const wrapped = c.iSeeYou(0, E1)?.receiveId;
  assert.equal(wrapped, 1, 'never zero');
  assert.equal(c.hereIAm(hereIAm(E1, { receivedId: wrapped })).kind, 'answer');
  assert.equal(c.hereIAm(hereIAm(E1, { receivedId: 0xffffffff })).kind, 'stale', 'sent before 1, so older');
  assert.equal(seeded.engine(E1)?.state, 'usable');
});

test('lenient engines (never echo) are not subject to the check; one that echoes once is strict from then on', () => {
  const { cluster, say, engine, stale } = setup({ lenientReceiveId: 2 });
  for (let i = 0; i < 3; i++) cluster.hereIAm(hereIAm(E1));
  assert.equal(engine(E1)?.state, 'usable');
  assert.equal(engine(E1)?.flags.noReceiveIdEcho, true);
  assert.equal(stale(), 0, 'a Squid 5.7 that never echoes is never stale');
  say(E2);
  say(E2);
  assert.equal(engine(E2)?.flags.noReceiveIdEcho, false);
  assert.equal(
    cluster.hereIAm(hereIAm(E2)).kind,
    'stale',
    'it echoed once: a HERE_I_AM without our Receive ID is a replay or a restart',
  );
});

test('without restored state the Receive ID starts where firstReceiveId says; restored state wins', () => {
  const options = { service: { lenientReceiveId: 0 }, firstReceiveId: () => 0xdeadbeef };
  const fresh = testCluster(options).cluster;
  const restored = testCluster(options).cluster;
  fresh.hereIAm(hereIAm(E1));
  assert.equal(fresh.iSeeYou(0, E1)?.receiveId, 0xdeadbef0);
  const memory = fresh.memory()[0];
  assert.ok(memory);
  restored.restore({ ...memory, receiveId: 41 });
  restored.hereIAm(hereIAm(E1));
  assert.equal(restored.iSeeYou(0, E1)?.receiveId, 42);
});
