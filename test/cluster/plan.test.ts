// `wccpctl plan` on the cluster (injected clock): for each change (join, leave, drain, weight) and each mode, the plan
// is asked first, then the change is made for real; the table after must be the plan's `after` bucket for bucket, and
// the plan's moves exactly the buckets that changed engine. Also what a plan refuses.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Plan, PlanChange, ServiceGroupConfig } from '../../src/cluster/index.js';
import { toMaskValueSets } from '../../src/buckets/mask.js';
import { HERE_I_AM_MS as T, serviceConfig, testCluster } from './helpers.js';

const E = ['192.0.2.11', '192.0.2.12', '192.0.2.13', '192.0.2.14', '198.51.100.5'] as const;
const [E1, E2, E3, E4, E5] = E;
const MASK_CAPABLE = { forwarding: 0x2, assignment: 0x2, return: 0x2 };

/** A cluster whose engines in `live` send a HERE_I_AM every HERE_I_AM_T while the clock runs in 1 s steps. */
function gateway(over: Partial<ServiceGroupConfig> = {}) {
  const config = serviceConfig({ lenientReceiveId: 0, ...over });
  const { cluster, say, keptAlive } = testCluster({ services: [config] });
  const weights = new Map<string, number>();
  const beat = (addr: string) =>
    say(addr, {
      weight: weights.get(addr) ?? 10_000,
      ...(config.assignment === 'mask' ? { capabilities: MASK_CAPABLE } : {}),
    });
  const { live, run } = keptAlive(beat);
  const arrive = (addr: string, weight?: number) => {
    if (weight !== undefined) weights.set(addr, weight);
    beat(addr);
    beat(addr);
    live.add(addr);
  };
  return {
    cluster,
    run,
    arrive,
    /** The engine falls silent and is removed after 3 x HERE_I_AM_T; the others keep talking. */
    leave: (addr: string) => {
      live.delete(addr);
      run(3 * T + 1000);
    },
    plan: (change: PlanChange): Plan => {
      const r = cluster.plan(0, change);
      assert.ok(r.ok, r.ok ? '' : r.message);
      return r.plan;
    },
  };
}

type Gateway = ReturnType<typeof gateway>;

/** Plans `change`, makes it with `make`, and holds the table after to the plan. */
function planThenMake(g: Gateway, change: PlanChange, make: () => void): Plan {
  const before = g.cluster.service(0);
  assert.ok(before);
  const plan = g.plan(change);
  assert.deepEqual(plan.before.buckets, before.buckets, 'the plan starts from the table in force');
  make();
  const after = g.cluster.service(0);
  assert.ok(after);
  const differ = after.buckets.filter((b, i) => b !== plan.after.buckets[i]).length;
  assert.equal(differ, 0, `${change.kind} ${change.engine}: ${differ} buckets differ from the plan`);
  const moved = before.buckets.flatMap((b, i) =>
    b !== after.buckets[i] ? [{ bucket: i, from: b, to: after.buckets[i] }] : [],
  );
  assert.deepEqual(plan.moves, moved);
  if (plan.mask !== null) assert.deepEqual(toMaskValueSets(plan.mask.after), after.maskSets, 'mask values as planned');
  for (const e of plan.engines)
    assert.equal(e.bucketsAfter, after.buckets.filter((b) => b === e.address).length, `${e.address}'s share after`);
  return plan;
}

/** Four engines, then E3 leaves and comes back (history), E4 gets a weight of its own: tables with a past. */
function withHistory(over: Partial<ServiceGroupConfig> = {}): Gateway {
  const g = gateway(over);
  for (const e of [E1, E2, E3, E4]) g.arrive(e);
  g.leave(E3);
  g.arrive(E3);
  g.cluster.setWeight(0, E4, 15_000);
  g.run(2000);
  return g;
}

const MODES: readonly Partial<ServiceGroupConfig>[] = [
  { mode: 'balance' },
  { mode: 'consistent' },
  { mode: 'round-robin' },
  { mode: 'primary-standby', priorities: { [E2]: 5 } },
  { mode: 'balance', assignment: 'mask' },
  { mode: 'consistent', assignment: 'mask' },
];

for (const over of MODES) {
  const name = `${over.mode}${over.assignment === 'mask' ? ', mask assignment' : ''}`;

  test(`${name}: a join moves exactly the buckets the plan said`, () => {
    const g = withHistory(over);
    const plan = planThenMake(g, { kind: 'join', engine: E5, weight: 10_000 }, () => g.arrive(E5, 10_000));
    if (over.mode === 'balance' && over.assignment === undefined) assert.ok(plan.moves.every((m) => m.to === E5));
  });

  test(`${name}: a returning engine gets what the plan said (its history)`, () => {
    const g = withHistory(over);
    g.leave(E2);
    const plan = planThenMake(g, { kind: 'join', engine: E2 }, () => g.arrive(E2));
    if (over.mode === 'balance' && over.assignment === undefined)
      assert.ok(plan.moves.every((m) => m.to === E2) && plan.moves.length > 0);
  });

  test(`${name}: a leave moves exactly the buckets the plan said`, () => {
    const g = withHistory(over);
    const plan = planThenMake(g, { kind: 'leave', engine: E2 }, () => g.leave(E2));
    assert.equal(plan.engines.find((e) => e.address === E2)?.state, 'gone');
  });

  test(`${name}: a drain moves exactly the buckets the plan said`, () => {
    const g = withHistory(over);
    const plan = planThenMake(g, { kind: 'drain', engine: E1 }, () => assert.ok(g.cluster.drain(0, E1).ok));
    assert.equal(plan.engines.find((e) => e.address === E1)?.bucketsAfter, 0);
  });

  test(`${name}: a weight moves exactly the buckets the plan said`, () => {
    const g = withHistory(over);
    planThenMake(g, { kind: 'weight', engine: E1, weight: 30_000 }, () =>
      assert.ok(g.cluster.setWeight(0, E1, 30_000).ok),
    );
    planThenMake(g, { kind: 'weight', engine: E4, weight: 0 }, () => assert.ok(g.cluster.setWeight(0, E4, 0).ok));
  });
}

test('the plan changes nothing: the table, the history and the next real change are as without it', () => {
  const a = withHistory();
  const b = withHistory();
  for (const change of [
    { kind: 'join', engine: E5 },
    { kind: 'leave', engine: E1 },
    { kind: 'drain', engine: E2 },
    { kind: 'weight', engine: E3, weight: 1 },
  ] as const)
    a.plan(change);
  assert.deepEqual(a.cluster.service(0)?.buckets, b.cluster.service(0)?.buckets);
  a.leave(E2);
  b.leave(E2);
  a.arrive(E2);
  b.arrive(E2);
  assert.deepEqual(a.cluster.service(0)?.buckets, b.cluster.service(0)?.buckets);
  assert.deepEqual(a.cluster.memory(), b.cluster.memory());
});

test('primary-standby: a better-ranked engine joining takes over only after failbackHold, and the plan says so', () => {
  const g = gateway({ mode: 'primary-standby', priorities: { [E5]: 9 }, failbackHoldMs: 30_000 });
  for (const e of [E1, E2]) g.arrive(e);
  const plan = planThenMake(g, { kind: 'join', engine: E5 }, () => g.arrive(E5));
  assert.equal(plan.moves.length, 0);
  assert.ok(plan.notes.some((n) => n.includes('failbackHold')));
});

test('a join of an engine an admin drained plans no move, and says why', () => {
  const g = withHistory();
  g.leave(E2);
  assert.ok(g.cluster.drain(0, E2).ok);
  const plan = planThenMake(g, { kind: 'join', engine: E2 }, () => g.arrive(E2));
  assert.equal(plan.moves.length, 0);
  assert.ok(plan.notes.some((n) => n.includes('admin drain awaits it')));
});

test('restart grace: the plan is the persisted table healed, as the real change', () => {
  const g = withHistory();
  const memory = g.cluster.memory();
  const h = gateway();
  for (const m of memory) h.cluster.restore(m);
  for (const e of [E1, E2]) h.arrive(e);
  const plan = planThenMake(h, { kind: 'join', engine: E3 }, () => h.arrive(E3));
  assert.ok(plan.notes.some((n) => n.startsWith('restart grace')));
  planThenMake(h, { kind: 'join', engine: E4, weight: 15_000 }, () => h.arrive(E4));
});

test('what a plan refuses: an unknown engine, a bad weight, a member joining again, an unknown service', () => {
  const g = withHistory();
  const refused = (change: PlanChange, error: string, message: RegExp) => {
    const r = g.cluster.plan(0, change);
    assert.ok(!r.ok);
    assert.equal(r.error, error);
    assert.match(r.message, message);
  };
  refused({ kind: 'leave', engine: E5 }, 'unknown-engine', /engine 198\.51\.100\.5 is not in service group 0/);
  refused({ kind: 'weight', engine: E5, weight: 1 }, 'unknown-engine', /not in service group 0/);
  refused({ kind: 'drain', engine: E5 }, 'unknown-engine', /not in service group 0/);
  refused({ kind: 'weight', engine: E1, weight: 65_536 }, 'bad-weight', /weight must be an integer 0-65535, got 65536/);
  refused({ kind: 'weight', engine: E1, weight: 1.5 }, 'bad-weight', /got 1.5/);
  refused({ kind: 'join', engine: E5, weight: -1 }, 'bad-weight', /got -1/);
  refused({ kind: 'join', engine: E1 }, 'already-member', /192\.0\.2\.11 is already in service group 0 \(usable\)/);
  const r = g.cluster.plan(7, { kind: 'leave', engine: E1 });
  assert.deepEqual(r, { ok: false, error: 'unknown-service', message: 'service 7 is not configured' });
});
