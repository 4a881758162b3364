// authority: designated-engine — obey a valid REDIRECT_ASSIGN only from the designated engine, heal when one dies.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { designatedEngineOf } from '../../src/cluster/index.js';
import type { RedirectAssign } from '../../src/cluster/index.js';
import { ROUTER, hereIAm, testCluster } from './helpers.js';
import { iSeeYouMessage } from '../../src/control/translate.js';
import { encodeMessage } from '../../src/wire/wccp2/index.js';

// In Squid's order (raw s_addr as a little-endian integer) the last octet weighs most: .5 comes before .11,
// although 198.51.100.5 is numerically the larger address.
const LOW = '198.51.100.5';
const HIGH = '192.0.2.11';
const THIRD = '192.0.2.13';

test("the designated engine is the lowest address in Squid's sort order", () => {
  assert.equal(designatedEngineOf([HIGH, LOW]), LOW);
  assert.equal(designatedEngineOf(['192.0.2.12', '192.0.2.11']), '192.0.2.11');
  assert.equal(designatedEngineOf(['192.0.3.1', '192.0.2.1']), '192.0.2.1');
  assert.equal(designatedEngineOf([]), null);
});

/** `startChangeNumber`: the table's change number as if restored from state (all buckets unassigned). */
function setup(startChangeNumber?: number) {
  const { clock, cluster } = testCluster({ service: { authority: 'designated-engine', lenientReceiveId: 0 } });
  if (startChangeNumber !== undefined) {
    cluster.restore({
      id: 0,
      table: { changeNumber: startChangeNumber, buckets: new Array(256).fill(null) },
      receiveId: 0,
      memberChangeNumber: 0,
      engines: [],
      counters: {},
      adminDrained: [],
    });
  }
  const lastSent = new Map<string, number>();
  const join = (addr: string) => {
    cluster.hereIAm(hereIAm(addr));
    lastSent.set(addr, cluster.iSeeYou(0, addr)?.receiveId ?? 0);
    cluster.hereIAm(hereIAm(addr, { receivedId: lastSent.get(addr) }));
    lastSent.set(addr, cluster.iSeeYou(0, addr)?.receiveId ?? 0);
  };
  join(HIGH);
  join(LOW);
  join(THIRD);
  const svc = () => cluster.service(0);
  /** A valid assignment from LOW: bucket i to engine i % 3 of [LOW, HIGH, THIRD]. */
  const valid = (over: Partial<RedirectAssign> = {}): RedirectAssign => ({
    serviceId: 0,
    from: LOW,
    key: { address: LOW, changeNumber: 1 },
    routers: [{ routerId: ROUTER, receiveId: lastSent.get(LOW) ?? 0, changeNumber: svc()?.memberChangeNumber ?? 0 }],
    engines: [LOW, HIGH, THIRD],
    buckets: Array.from({ length: 256 }, (_, i) => ({ cache: i % 3, alternate: false })),
    ...over,
  });
  /** 30 s in which LOW and THIRD keep sending HERE_I_AMs (echoing our Receive IDs) and HIGH is silent: HIGH is removed.
   * */
  const silenceHigh = () => {
    for (let s = 0; s < 3; s++) {
      clock.advance(10_000);
      for (const e of [LOW, THIRD]) {
        cluster.hereIAm(hereIAm(e, { receivedId: lastSent.get(e) }));
        lastSent.set(e, cluster.iSeeYou(0, e)?.receiveId ?? 0);
      }
      cluster.tick();
    }
  };
  return { clock, cluster, svc, valid, lastSent, silenceHigh };
}

test('REDIRECT_ASSIGN is refused unless it comes valid from the designated engine', () => {
  const { cluster, svc, valid } = setup();
  assert.equal(svc()?.designatedEngine, LOW);
  const before = svc()?.buckets;
  const refusals: [Partial<RedirectAssign>, RegExp][] = [
    [
      { from: HIGH, key: { address: HIGH, changeNumber: 1 } },
      /192.0.2.11 is not the designated engine \(198.51.100.5\)/,
    ],
    [{ key: { address: HIGH, changeNumber: 1 } }, /assignment key 192.0.2.11 is not the designated engine/],
    [{ routers: [] }, /does not list this router 192.0.2.1/],
    [
      { routers: [{ routerId: ROUTER, receiveId: 999, changeNumber: svc()?.memberChangeNumber ?? 0 }] },
      /Receive ID 999 is not one we sent/,
    ],
  ];
  for (const [over, reason] of refusals) {
    const v = cluster.redirectAssign(valid(over));
    assert.equal(v.accepted, false);
    assert.match(v.accepted ? '' : v.reason, reason);
  }
  const staleMember = valid();
  const stale = cluster.redirectAssign({ ...staleMember, routers: [{ ...staleMember.routers[0]!, changeNumber: 77 }] });
  assert.match(stale.accepted ? '' : stale.reason, /member change number 77 is not ours/);
  assert.deepEqual(svc()?.buckets, before, 'nothing refused changed the table');
  assert.equal(svc()?.counters['redirect-assign-ignored'], 5);

  assert.deepEqual(cluster.redirectAssign(valid()), { accepted: true });
  const obeyed = svc()?.buckets ?? [];
  assert.deepEqual(
    obeyed,
    Array.from({ length: 256 }, (_, i) => [LOW, HIGH, THIRD][i % 3]),
  );
  const replay = cluster.redirectAssign(valid());
  assert.match(replay.accepted ? '' : replay.reason, /stale assignment key change number 1/);
  const plan = cluster.iSeeYou(0, LOW);
  assert.deepEqual(
    plan?.assignmentKey,
    { address: LOW, changeNumber: 1 },
    'the key we obeyed is echoed in our Router View',
  );
});

/** Obeys an assignment, then HIGH goes silent and is healed away; the change numbers before and after the heal. */
function obeyThenHeal(startChangeNumber: number): { beforeHeal: number; afterHeal: number; encodes: () => Buffer } {
  const { cluster, svc, valid, silenceHigh } = setup(startChangeNumber);
  assert.deepEqual(cluster.redirectAssign(valid()), { accepted: true });
  const beforeHeal = svc()?.changeNumber ?? -1;
  silenceHigh();
  assert.equal(svc()?.buckets.includes(HIGH), false, 'HIGH was healed away');
  const plan = cluster.iSeeYou(0, LOW);
  assert.ok(plan);
  return {
    beforeHeal,
    afterHeal: svc()?.changeNumber ?? -1,
    encodes: () => encodeMessage(iSeeYouMessage(plan, { md5: false })),
  };
}

test('the change number wraps from 4294967295 to 0 when a heal changes the table, and the I_SEE_YOU still encodes', () => {
  // Where the table stands just before the heal when it starts at 0; start the real run that far below the wrap.
  const probe = obeyThenHeal(0);
  const start = (0xffffffff - probe.beforeHeal) >>> 0;
  const run = obeyThenHeal(start);
  assert.equal(run.beforeHeal, 0xffffffff);
  assert.equal(run.afterHeal, 0);
  assert.doesNotThrow(run.encodes);
});

test('appliance authority ignores REDIRECT_ASSIGN', () => {
  const { cluster } = testCluster();
  cluster.hereIAm(hereIAm(LOW));
  cluster.hereIAm(hereIAm(LOW));
  const v = cluster.redirectAssign({
    serviceId: 0,
    from: LOW,
    key: { address: LOW, changeNumber: 1 },
    routers: [],
    engines: [LOW],
    buckets: new Array(256).fill(null),
  });
  assert.match(v.accepted ? '' : v.reason, /authority: appliance/);
  assert.equal(cluster.service(0)?.buckets.filter((b) => b === LOW).length, 256);
});

test('when an engine dies, its buckets go to the survivors at once; the others stay where the assignment put them', () => {
  const { cluster, svc, valid, silenceHigh } = setup();
  assert.deepEqual(cluster.redirectAssign(valid()), { accepted: true });
  const before = svc()?.buckets ?? [];
  // LOW and THIRD keep talking, HIGH goes silent.
  silenceHigh();
  assert.equal(
    svc()?.engines.some((e) => e.address === HIGH),
    false,
  );
  const after = svc()?.buckets ?? [];
  for (let i = 0; i < 256; i++) {
    if (before[i] === HIGH) assert.ok(after[i] === LOW || after[i] === THIRD, `bucket ${i} healed`);
    else assert.equal(after[i], before[i], `bucket ${i} stayed`);
  }
  const counts = [LOW, THIRD].map((e) => after.filter((b) => b === e).length);
  assert.deepEqual(counts, [128, 128]);
});

/** Bucket i to engine (i + shift) % 3 of [LOW, HIGH, THIRD]: a different assignment per shift. */
function shifted(shift: number) {
  return Array.from({ length: 256 }, (_, i) => ({ cache: (i + shift) % 3, alternate: false }));
}

test("the designated engine's Squid restarts: its new assignments (key change numbers from 1 again) are obeyed", () => {
  const { cluster, svc, valid, lastSent } = setup();
  // Its first life: five assignments, each after a HERE_I_AM of its own.
  const old: RedirectAssign[] = [];
  for (let n = 1; n <= 5; n++) {
    const ra = valid({ key: { address: LOW, changeNumber: n }, buckets: shifted(n % 3) });
    assert.deepEqual(cluster.redirectAssign(ra), { accepted: true }, `assignment ${n}`);
    old.push(ra);
    cluster.hereIAm(hereIAm(LOW, { receivedId: lastSent.get(LOW) }));
    lastSent.set(LOW, cluster.iSeeYou(0, LOW)?.receiveId ?? 0);
  }
  // Restarted within HERE_I_AM_T: no Receive ID (stale, answered), then it echoes that answer and counts again.
  const restarted = cluster.hereIAm(hereIAm(LOW));
  assert.equal(restarted.kind, 'stale');
  lastSent.set(LOW, cluster.iSeeYou(0, LOW, 'stale')?.receiveId ?? 0);
  assert.equal(cluster.hereIAm(hereIAm(LOW, { receivedId: lastSent.get(LOW) })).kind, 'answer');
  lastSent.set(LOW, cluster.iSeeYou(0, LOW)?.receiveId ?? 0);
  assert.equal(svc()?.engines.find((e) => e.address === LOW)?.state, 'usable');

  const fresh = valid({ key: { address: LOW, changeNumber: 1 }, buckets: shifted(1) });
  assert.deepEqual(cluster.redirectAssign(fresh), { accepted: true }, 'its first assignment after the restart');
  const obeyed = Array.from({ length: 256 }, (_, i) => [LOW, HIGH, THIRD][(i + 1) % 3]);
  assert.deepEqual(svc()?.buckets, obeyed);
  assert.deepEqual(cluster.iSeeYou(0, LOW)?.assignmentKey, { address: LOW, changeNumber: 1 });

  // Replays are still refused: the one just obeyed, and the first life's (Receive IDs out of the window).
  const replay = cluster.redirectAssign(fresh);
  assert.equal(replay.accepted, false);
  for (const ra of old) assert.match((cluster.redirectAssign(ra) as { reason: string }).reason, /Receive ID/);
  assert.deepEqual(svc()?.buckets, obeyed);
});

test("the designated engine's key change number wraps from 4294967295 to 0: the assignment after the wrap is obeyed", () => {
  const { cluster, svc, valid } = setup();
  const last = valid({ key: { address: LOW, changeNumber: 0xffffffff }, buckets: shifted(0) });
  assert.deepEqual(cluster.redirectAssign(last), { accepted: true });
  const wrapped = valid({ key: { address: LOW, changeNumber: 0 }, buckets: shifted(2) });
  assert.deepEqual(cluster.redirectAssign(wrapped), { accepted: true });
  assert.deepEqual(
    svc()?.buckets,
    Array.from({ length: 256 }, (_, i) => [LOW, HIGH, THIRD][(i + 2) % 3]),
  );
  const replay = cluster.redirectAssign(last);
  assert.match(replay.accepted ? '' : replay.reason, /stale assignment key change number 4294967295/);
});

test('wccpctl plan under an obeyed assignment: a leave and a drain are planned as the heal they cause, exactly', () => {
  const { cluster, svc, valid, silenceHigh } = setup();
  assert.deepEqual(cluster.redirectAssign(valid()), { accepted: true });
  const drain = cluster.plan(0, { kind: 'drain', engine: THIRD });
  const leave = cluster.plan(0, { kind: 'leave', engine: HIGH });
  assert.ok(drain.ok && leave.ok);
  assert.ok(leave.plan.notes.some((n) => n.includes("designated engine's next REDIRECT_ASSIGN")));
  // The plan changed nothing: the obeyed table stands, and the heal that follows is the one planned.
  assert.deepEqual(
    svc()?.buckets,
    Array.from({ length: 256 }, (_, i) => [LOW, HIGH, THIRD][i % 3]),
  );
  silenceHigh();
  assert.deepEqual(svc()?.buckets, [...leave.plan.after.buckets]);
  assert.ok(leave.plan.moves.length === 85 && leave.plan.moves.every((m) => m.from === HIGH));
  // THIRD's drain, planned now from the healed table: only its buckets move, onto LOW.
  const next = cluster.plan(0, { kind: 'drain', engine: THIRD });
  assert.ok(next.ok);
  assert.ok(cluster.drain(0, THIRD).ok);
  assert.deepEqual(svc()?.buckets, [...next.plan.after.buckets]);
  assert.ok(next.plan.moves.every((m) => m.from === THIRD && m.to === LOW));
});
