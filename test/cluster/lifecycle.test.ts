// Engine lifecycle of a service group under a fake clock: timers, Receive ID rules, capabilities, drain, events.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster } from '../../src/cluster/index.js';
import type { ServiceGroupConfig } from '../../src/cluster/index.js';
import { ROUTER, hereIAm, testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const E3 = '192.0.2.13';

test('a silent engine gets a REMOVAL_QUERY at 25 s and is removed at 30 s, not before', () => {
  const { clock, cluster, events, engine, join } = testCluster();
  join(E1);
  assert.equal(engine(E1)?.state, 'usable');
  assert.equal(cluster.nextDue(), clock.now() + 25_000);
  clock.advance(24_999);
  assert.deepEqual(cluster.tick(), []);
  clock.advance(1);
  const queries = cluster.tick();
  assert.deepEqual(
    queries.map((q) => [q.engine, q.routerAddress]),
    [[E1, ROUTER]],
  );
  assert.deepEqual(cluster.tick(), [], 'one REMOVAL_QUERY per silence');
  assert.equal(cluster.nextDue(), clock.now() + 5_000);
  clock.advance(4_999);
  cluster.tick();
  assert.equal(engine(E1)?.state, 'usable');
  clock.advance(1);
  cluster.tick();
  assert.equal(engine(E1), undefined);
  const last = events.filter((e) => e.type === 'engine-state').at(-1);
  assert.deepEqual(last && { ...last, at: 0 }, {
    type: 'engine-state',
    service: 0,
    engine: E1,
    from: 'usable',
    to: 'gone',
    reason: 'no HERE_I_AM for 30 s',
    at: 0,
  });
  assert.deepEqual(
    cluster.service(0)?.buckets.filter((b) => b !== null),
    [],
  );
});

test('a HERE_I_AM in time resets the timers', () => {
  const { clock, cluster, engine, join, say } = testCluster();
  join(E1);
  clock.advance(20_000);
  say(E1);
  clock.advance(20_000);
  assert.deepEqual(cluster.tick(), []);
  assert.equal(engine(E1)?.state, 'usable');
});

test('strict: an engine is usable only after echoing the Receive ID of our I_SEE_YOU', () => {
  const { cluster, engine } = testCluster({ service: { lenientReceiveId: 0 } });
  for (let i = 0; i < 5; i++) {
    cluster.hereIAm(hereIAm(E1));
    cluster.iSeeYou(0, E1);
  }
  assert.equal(engine(E1)?.state, 'joining');
  cluster.hereIAm(hereIAm(E1, { receivedId: 12345 }));
  assert.equal(engine(E1)?.state, 'joining', 'a Receive ID we never sent does not count');
  const plan = cluster.iSeeYou(0, E1);
  assert.ok(plan && plan.receiveId !== 0);
  cluster.hereIAm(hereIAm(E1, { receivedId: plan.receiveId }));
  assert.equal(engine(E1)?.state, 'usable');
  assert.equal(engine(E1)?.flags.noReceiveIdEcho, false);
  assert.equal(cluster.service(0)?.buckets.filter((b) => b === E1).length, 256);
});

test('lenient: usable after lenientReceiveId HERE_I_AMs without an echo, and flagged', () => {
  const { cluster, engine, events } = testCluster({ service: { lenientReceiveId: 3 } });
  cluster.hereIAm(hereIAm(E1));
  cluster.hereIAm(hereIAm(E1));
  assert.equal(engine(E1)?.state, 'joining');
  cluster.hereIAm(hereIAm(E1));
  assert.equal(engine(E1)?.state, 'usable');
  assert.equal(engine(E1)?.flags.noReceiveIdEcho, true);
  const usableEvent = events.find((e) => e.type === 'engine-state' && e.to === 'usable');
  assert.match(
    usableEvent?.type === 'engine-state' ? usableEvent.reason : '',
    /lenient: 3 HERE_I_AMs without our Receive ID/,
  );
  // It later echoes: the flag clears.
  const plan = cluster.iSeeYou(0, E1);
  cluster.hereIAm(hereIAm(E1, { receivedId: plan?.receiveId ?? 0 }));
  assert.equal(engine(E1)?.flags.noReceiveIdEcho, false);
});

test('capability mismatch is refused with the reason, never usable', () => {
  const { cluster, engine } = testCluster();
  for (let i = 0; i < 4; i++) {
    const out = cluster.hereIAm(hereIAm(E1, { capabilities: {} }));
    assert.equal(out.kind, 'refused');
    assert.match(out.kind === 'refused' ? out.reason : '', /forwarding method: engine offers GRE, service uses L2/);
    assert.match(out.kind === 'refused' ? out.reason : '', /return method: engine offers GRE, service uses L2/);
  }
  assert.equal(engine(E1)?.state, 'joining');
  assert.match(engine(E1)?.flags.refused ?? '', /forwarding/);
  assert.equal(cluster.service(0)?.counters['capability-refused'], 1);
  // Mask assignment asked of a hash service.
  const out = cluster.hereIAm(hereIAm(E2, { capabilities: { forwarding: 2, assignment: 2, return: 2 } }));
  assert.match(out.kind === 'refused' ? out.reason : '', /assignment method: engine offers MASK, service uses HASH/);
  // Each refusal names the fix on both sides: the squid.conf line, or the wccpd key taking what the engine offers.
  assert.match(
    out.kind === 'refused' ? out.reason : '',
    /; fix: on a Squid engine add to squid\.conf "wccp2_assignment_method hash"; or set assignment: mask in the service's wccpd config \(docs\/squid\.md\)$/,
  );
});

test('Receive ID is never zero and advances per I_SEE_YOU; member change number per membership change', () => {
  const { cluster, join } = testCluster();
  const before = cluster.service(0);
  assert.equal(before?.receiveId, 0);
  join(E1);
  const a = cluster.service(0);
  assert.equal(a?.receiveId, 2);
  const m1 = a?.memberChangeNumber ?? 0;
  join(E2);
  const b = cluster.service(0);
  assert.equal(b?.memberChangeNumber, m1 + 1);
  assert.deepEqual(b?.buckets.filter((x) => x === E1).length, 128);
  assert.deepEqual(b?.buckets.filter((x) => x === E2).length, 128);
});

test("drain moves only that engine's buckets; undrain brings it back; each transition one event", () => {
  const { cluster, engine, events, join, say } = testCluster();
  join(E1);
  join(E2);
  join(E3);
  const before = cluster.service(0)?.buckets ?? [];
  events.length = 0;
  assert.deepEqual(cluster.drain(0, E2), { ok: true });
  assert.equal(engine(E2)?.state, 'draining');
  const after = cluster.service(0)?.buckets ?? [];
  let moved = 0;
  for (let i = 0; i < 256; i++) {
    if (before[i] !== after[i]) {
      moved++;
      assert.equal(before[i], E2, `bucket ${i} moved although it was ${before[i]}'s`);
    }
  }
  assert.equal(moved, before.filter((b) => b === E2).length);
  assert.equal(after.filter((b) => b === E2).length, 0);
  assert.deepEqual(
    events.map((e) =>
      e.type === 'engine-state' ? `${e.engine} ${e.from}->${e.to} ${e.reason}` : `table moved ${e.moved}`,
    ),
    [`${E2} usable->draining admin drain`, `table moved ${moved}`],
  );
  // A drained engine keeps sending HERE_I_AM: it stays drained.
  say(E2);
  assert.equal(engine(E2)?.state, 'draining');
  assert.deepEqual(engine(E2)?.drains, ['admin']);
  assert.deepEqual(cluster.undrain(0, E2), { ok: true });
  assert.equal(engine(E2)?.state, 'usable');
  assert.deepEqual(cluster.drain(0, '192.0.2.99'), {
    ok: false,
    error: 'unknown-engine',
    message: 'engine 192.0.2.99 is not in service group 0',
  });
  assert.equal(cluster.drain(7, E1).ok, false);
});

test('Command Extension SHUTDOWN drains (not dead) and asks for a SHUTDOWN_RESPONSE', () => {
  const { cluster, engine, join, say } = testCluster();
  join(E1);
  join(E2);
  const out = say(E1, { shutdown: true });
  assert.deepEqual(out, { kind: 'answer', shutdownResponse: true });
  assert.equal(engine(E1)?.state, 'draining');
  assert.deepEqual(engine(E1)?.drains, ['shutdown']);
  assert.equal(cluster.service(0)?.buckets.filter((b) => b === E2).length, 256);
  say(E1);
  assert.equal(engine(E1)?.state, 'usable', 'a HERE_I_AM without SHUTDOWN brings it back');
});

test('setWeight goes through the same recomputation as an Assignment Weight change', () => {
  const { cluster, engine, join } = testCluster();
  join(E1);
  join(E2);
  assert.deepEqual(cluster.setWeight(0, E2, 0), { ok: true });
  assert.equal(engine(E2)?.weight, 0);
  assert.equal(engine(E2)?.flags.weightOverride, true);
  assert.equal(cluster.service(0)?.buckets.filter((b) => b === E1).length, 256);
  assert.equal(cluster.setWeight(0, E2, -1).ok, false);
  cluster.setWeight(0, E2, null);
  assert.equal(cluster.service(0)?.buckets.filter((b) => b === E2).length, 128);
});

test('dynamic service: defined by the first HERE_I_AM, a conflicting definition is refused and counted', () => {
  const { cluster } = testCluster({ service: { id: 90 } });
  const def = { type: 'dynamic' as const, id: 90, priority: 10, protocol: 6, flags: 0x12, ports: [8080] };
  assert.equal(cluster.service(90)?.definition, null);
  assert.equal(cluster.hereIAm(hereIAm(E1, { service: def })).kind, 'answer');
  assert.deepEqual(cluster.service(90)?.definition, def);
  const out = cluster.hereIAm(hereIAm(E2, { service: { ...def, ports: [3128] } }));
  assert.equal(out.kind, 'refused');
  assert.match(out.kind === 'refused' ? out.reason : '', /conflicting definition of service 90/);
  assert.equal(cluster.service(90)?.counters['conflicting-definition'], 1);
  assert.equal(cluster.service(90)?.engines.length, 1);
  assert.equal(cluster.hereIAm(hereIAm(E1, { service: { ...def, id: 91 } })).kind, 'refused');
  assert.equal(cluster.snapshot().counters['unknown-service'], 1);
});

test('dynamic service with configured protocol and ports: an engine describing other ones is refused with both named', () => {
  const { cluster } = testCluster({
    service: { id: 90, expect: { protocol: 6, ports: [80, 8080], portsSource: false } },
  });
  const def = { type: 'dynamic' as const, id: 90, priority: 240, protocol: 6, flags: 0x12, ports: [8080, 80] };
  const udp = cluster.hereIAm(hereIAm(E1, { service: { ...def, protocol: 17, ports: [53] } }));
  assert.equal(udp.kind, 'refused');
  assert.match(
    udp.kind === 'refused' ? udp.reason : '',
    /configured as protocol 6 ports \[80,8080\]; engine described it as dynamic 90 protocol 17 ports \[53\]/,
  );
  assert.equal(cluster.service(90)?.counters['conflicting-definition'], 1);
  assert.equal(cluster.service(90)?.definition, null, 'a refused engine defines nothing');
  // The same ports in another order, with the engine's own flags and priority: accepted, and it defines the service.
  assert.equal(cluster.hereIAm(hereIAm(E2, { service: def })).kind, 'answer');
  assert.deepEqual(cluster.service(90)?.definition, def);
});

test('dynamic service: an engine that disagrees on Ports Source or on a configured priority is refused, both named', () => {
  const { cluster } = testCluster({
    service: { id: 90, expect: { protocol: 6, ports: [80], portsSource: true, priority: 240 } },
  });
  // What Squid 5.7 sends for `wccp2_service_info 90 protocol=tcp flags=src_ip_hash,ports_source priority=240 ports=80`:
  // Source IP Hash | Ports Defined | Ports Source.
  const def = { type: 'dynamic' as const, id: 90, priority: 240, protocol: 6, flags: 0x31, ports: [80] };
  const dest = cluster.hereIAm(hereIAm(E1, { service: { ...def, flags: 0x12 } }));
  assert.equal(dest.kind, 'refused');
  assert.match(
    dest.kind === 'refused' ? dest.reason : '',
    /configured as protocol 6 source ports \[80\] priority 240; engine described it as dynamic 90 protocol 6 ports \[80\] flags 0x12/,
  );
  const prio = cluster.hereIAm(hereIAm(E1, { service: { ...def, priority: 10 } }));
  assert.equal(prio.kind, 'refused');
  assert.match(prio.kind === 'refused' ? prio.reason : '', /source ports \[80\] flags 0x31 priority 10$/);
  assert.equal(cluster.service(90)?.counters['conflicting-definition'], 2);
  assert.equal(cluster.hereIAm(hereIAm(E1, { service: def })).kind, 'answer');
  assert.deepEqual(cluster.service(90)?.definition, def);
});

test('peers appear in the Router View; the I_SEE_YOU plan carries usable engines and their buckets', () => {
  const { cluster, join } = testCluster({ service: { peers: ['192.0.2.2'] } });
  join(E1);
  cluster.hereIAm(hereIAm(E2));
  const plan = cluster.iSeeYou(0, E2);
  assert.deepEqual(plan?.routers, [ROUTER, '192.0.2.2']);
  assert.deepEqual(
    plan?.engines.map((e) => [e.address, e.buckets.length]),
    [[E1, 256]],
  );
  assert.deepEqual(plan?.assignmentKey, { address: ROUTER, changeNumber: plan?.table.changeNumber });
  assert.deepEqual(plan?.capabilities, { forwarding: 'l2', assignment: 'hash', return: 'l2' });
});

test('two routers that see the same membership changes compute the same table (no time or randomness in it)', () => {
  const a = testCluster();
  const b = testCluster();
  b.clock.advance(123_456);
  for (const addr of [E3, E1, E2]) {
    a.join(addr);
    b.clock.advance(777);
    b.join(addr);
  }
  assert.deepEqual(a.cluster.service(0)?.buckets, b.cluster.service(0)?.buckets);
});

test('restored memory: the same engines registering again get the very same buckets', () => {
  const first = testCluster();
  for (const addr of [E1, E2, E3]) first.join(addr);
  first.cluster.drain(0, E2);
  first.cluster.undrain(0, E2);
  const table = first.cluster.service(0)?.buckets;
  const memory = first.cluster.memory();
  const second = testCluster();
  for (const m of memory) second.cluster.restore(JSON.parse(JSON.stringify(m)));
  assert.equal(second.cluster.service(0)?.receiveId, first.cluster.service(0)?.receiveId);
  // The live table is empty until the engines are heard: a different table, so not the persisted change number.
  assert.ok((second.cluster.service(0)?.changeNumber ?? 0) > (first.cluster.service(0)?.changeNumber ?? 0));
  for (const addr of [E3, E2, E1]) second.join(addr);
  assert.deepEqual(second.cluster.service(0)?.buckets, table);
  assert.ok((second.cluster.service(0)?.receiveId ?? 0) > (first.cluster.service(0)?.receiveId ?? 0));
});

/** A cluster whose engines keep sending HERE_I_AMs every 10 s while the clock runs, in 1 s steps. */
function beating(service: Partial<ServiceGroupConfig> = {}, settleMs = 0) {
  const group = testCluster({ service, settleMs });
  const { live, run } = group.keptAlive();
  return {
    ...group,
    run,
    arrive: (addr: string) => {
      group.say(addr);
      live.add(addr);
    },
  };
}

/** The table of three engines that joined one at a time (so it depends on history), and its memory. */
function historyShaped() {
  const first = beating();
  for (const addr of [E1, E2, E3]) {
    first.arrive(addr);
    first.run(20_000);
  }
  const table = first.cluster.service(0)?.buckets ?? [];
  assert.equal(new Set(table).size, 3, 'three holders before the restart');
  return { table, memory: JSON.parse(JSON.stringify(first.cluster.memory())) as ReturnType<Cluster['memory']> };
}

test('restart grace: it starts when the router listens, so a slow start does not hand the engines a fresh table', () => {
  const { table, memory } = historyShaped();
  const second = beating();
  for (const m of memory) second.cluster.restore(m);
  // loading the data plane and binding took longer than the whole grace time (no timers yet)
  second.clock.advance(40_000);
  second.cluster.startRestartGrace();
  for (const addr of [E3, E2, E1]) {
    second.arrive(addr);
    second.run(2000);
  }
  second.run(10_000);
  assert.deepEqual(
    second.cluster.service(0)?.engines.map((e) => e.state),
    ['usable', 'usable', 'usable'],
  );
  assert.equal(
    second.cluster.service(0)?.buckets.filter((b, i) => b !== table[i]).length,
    0,
    'buckets that differ from before',
  );
});

test('restart grace: the last engine back just before it ends gets the persisted table although timers.settle defers the change past it', () => {
  const { table, memory } = historyShaped();
  const second = beating({}, 5000);
  for (const m of memory) second.cluster.restore(m);
  second.cluster.startRestartGrace();
  second.arrive(E3);
  second.run(9000);
  second.arrive(E2);
  second.run(19_000);
  second.arrive(E1); // at 28 s of 30: its change waits for timers.settle until 33 s
  second.run(10_000);
  assert.equal(
    second.cluster.service(0)?.buckets.filter((b, i) => b !== table[i]).length,
    0,
    'buckets that differ from before',
  );
});

test('restart grace: long enough for lenient engines to finish the handshake (lenientReceiveId 5: 6 x HERE_I_AM_T)', () => {
  const { table, memory } = historyShaped();
  const second = beating({ lenientReceiveId: 5 });
  for (const m of memory) second.cluster.restore(m);
  second.cluster.startRestartGrace();
  // Squid-like engines that never echo: usable at their fifth HERE_I_AM, 40-50 s after the router listens.
  const silent = (addr: string) => second.cluster.hereIAm(hereIAm(addr));
  for (let k = 0; k < 5; k++) {
    for (const addr of [E3, E2, E1]) {
      silent(addr);
      second.run(1000);
    }
    second.run(7000);
  }
  assert.deepEqual(
    second.cluster.service(0)?.engines.map((e) => e.state),
    ['usable', 'usable', 'usable'],
  );
  assert.equal(
    second.cluster.service(0)?.buckets.filter((b, i) => b !== table[i]).length,
    0,
    'buckets that differ from before',
  );
});
