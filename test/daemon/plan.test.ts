// `wccpctl plan` against the running daemon, as an admin uses it: ask the plan, make the change for real (an engine
// registers, an engine falls silent until it is removed, a drain and a weight through wccpctl), and the table the API
// shows after must be the plan's `after` (0 buckets differ) and its moves exactly the buckets that changed engine; for
// balance, consistent, primary-standby and a mask service (its Mask/Value Sets too). And what a plan refuses.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startDaemon, TOKEN, waitFor, wccpctl, type RunningDaemon } from '../helpers/daemon.js';
import { keepTalking, TestEngine } from '../helpers/wccp-engine.js';
import type { BucketsView, EnginesView, PlanView } from '../../src/admin/api-types.js';

const [E1, E2, E3, E4] = ['127.0.0.11', '127.0.0.12', '127.0.0.13', '127.0.0.14'];
const MASK_CAPABLE = { forwarding: 0x2, assignment: 0x2, return: 0x2 };
/** Longer than timers.settle (250 ms): a change held back by it has been made. */
const SETTLED_MS = 700;

interface Lab {
  readonly daemon: RunningDaemon;
  readonly engines: Map<string, TestEngine>;
  readonly talking: Set<string>;
  arrive(address: string, weight: number): Promise<void>;
  table(): Promise<BucketsView>;
  engineView(): Promise<EnginesView>;
  ctl(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }>;
  stop(): Promise<void>;
}

async function lab(extra: readonly string[], assignment: 'hash' | 'mask' = 'hash'): Promise<Lab> {
  const daemon = await startDaemon(extra, { hereIAm: '1s', assignment });
  const engines = new Map<string, TestEngine>();
  const talking = new Set<string>();
  const heartbeat = keepTalking(engines, talking);
  const get = async <T>(path: string) => (await (await fetch(`${daemon.url}/api/v1/${path}`)).json()) as T;
  const l: Lab = {
    daemon,
    engines,
    talking,
    async arrive(address, weight) {
      const e = new TestEngine({
        address,
        weight,
        router: { address: '127.0.0.1', port: daemon.udpPort },
        ...(assignment === 'mask' ? { capabilities: MASK_CAPABLE } : {}),
      });
      await e.start();
      engines.set(address, e);
      talking.add(address);
      await waitFor(`${address} usable`, async () =>
        (await l.engineView()).engines.some((x) => x.address === address && x.state === 'usable') ? true : null,
      );
    },
    table: () => get<BucketsView>('services/0/buckets'),
    engineView: () => get<EnginesView>('services/0/engines'),
    ctl: (...args) => wccpctl(['--url', daemon.url, '--token', TOKEN, ...args]),
    async stop() {
      await heartbeat.stop();
      for (const e of engines.values()) await e.stop();
      await daemon.stop();
    },
  };
  return l;
}

/** Asks the plan through wccpctl --json, makes the change, waits for `done`, and holds the table to the plan. */
async function planThenMake(
  l: Lab,
  args: readonly string[],
  make: () => Promise<void>,
  done: (v: EnginesView) => boolean,
): Promise<PlanView> {
  const before = await l.table();
  const asked = await l.ctl('--json', 'plan', ...args);
  assert.equal(asked.code, 0, asked.stderr);
  const plan = JSON.parse(asked.stdout) as PlanView;
  const [p] = plan.services;
  assert.ok(p && plan.services.length === 1, asked.stdout);
  assert.equal(p.after.length, 256);
  assert.equal(p.changeNumber, before.changeNumber, 'the plan starts from the table in force');
  await make();
  await waitFor(`${args.join(' ')} made`, async () => (done(await l.engineView()) ? true : null), 15_000);
  await new Promise((r) => setTimeout(r, SETTLED_MS));
  const after = await l.table();
  const differ = after.buckets.filter((b, i) => b !== p.after[i]).length;
  assert.equal(differ, 0, `plan ${args.join(' ')}: ${differ} buckets differ from the plan`);
  const moved = before.buckets.flatMap((b, i) =>
    b !== after.buckets[i] ? [{ bucket: i, from: b, to: after.buckets[i] ?? null }] : [],
  );
  assert.deepEqual(p.moves, moved, 'the moves are exactly the difference');
  if (p.mask !== null) assert.deepEqual(p.mask.after, after.mask, 'the Mask/Value Sets as planned');
  const counts = (await l.engineView()).engines;
  for (const e of p.engines.filter((x) => x.state !== 'gone'))
    assert.equal(counts.find((x) => x.address === e.address)?.buckets, e.bucketsAfter, `${e.address}'s buckets`);
  return plan;
}

const state = (address: string, s: string | undefined) => (v: EnginesView) =>
  v.engines.find((e) => e.address === address)?.state === s;

/** Three engines (weights 10000, 20000, 10000), then each verb in turn, each held to its plan. */
async function everyVerb(l: Lab): Promise<PlanView[]> {
  await l.arrive(E1, 10_000);
  await l.arrive(E2, 20_000);
  await l.arrive(E3, 10_000);
  const plans: PlanView[] = [];
  plans.push(await planThenMake(l, ['join', E4, '--weight', '15000'], () => l.arrive(E4, 15_000), state(E4, 'usable')));
  plans.push(
    await planThenMake(
      l,
      ['drain', E1],
      async () => assert.equal((await l.ctl('drain', E1)).code, 0),
      state(E1, 'draining'),
    ),
  );
  plans.push(
    await planThenMake(
      l,
      ['weight', E2, '5000'],
      async () => assert.equal((await l.ctl('weight', E2, '5000')).code, 0),
      (v) => v.engines.find((e) => e.address === E2)?.weight === 5000,
    ),
  );
  plans.push(
    await planThenMake(
      l,
      ['leave', E3, '--service', '0'],
      async () => {
        l.talking.delete(E3);
      },
      state(E3, undefined),
    ),
  );
  return plans;
}

test('balance: join, drain, weight and leave each make exactly the planned table', async () => {
  const l = await lab([]);
  try {
    const [join, drain] = await everyVerb(l);
    // Balance moves only what it must: the newcomer takes, the drained engine gives.
    assert.ok(join?.services[0]?.moves.every((m) => m.to === E4));
    assert.ok(drain?.services[0]?.moves.every((m) => m.from === E1));
    // The human output names the pairs and the shares.
    const human = await l.ctl('plan', 'drain', E2);
    assert.equal(human.code, 0, human.stderr);
    assert.match(
      human.stdout,
      /^service 0 \(balance, appliance\), table \d+: drain 127\.0\.0\.12 moves \d+ of 256 buckets/,
    );
    assert.match(human.stdout, /127\.0\.0\.12 -> 127\.0\.0\.1[14] +\d+ +buckets \d/);
    assert.match(human.stdout, /127\.0\.0\.12 +draining +5000 +\d+ -> 0 +0\.00%/);
  } finally {
    await l.stop();
  }
});

test('consistent: join, drain, weight and leave each make exactly the planned table', async () => {
  const l = await lab(['mode: consistent']);
  try {
    await everyVerb(l);
  } finally {
    await l.stop();
  }
});

test('primary-standby: join, drain, weight and leave each make exactly the planned table', async () => {
  const l = await lab(['mode: primary-standby']);
  try {
    const [join, drain] = await everyVerb(l);
    // E1 serves; E4 joins as a standby; draining E1 hands everything to the next in rank (E2).
    assert.equal(join?.services[0]?.moves.length, 0);
    assert.ok(drain?.services[0]?.moves.length === 256 && drain.services[0].moves.every((m) => m.to === E2));
  } finally {
    await l.stop();
  }
});

test('mask assignment: the planned Mask/Value Sets are the ones made, for every verb', async () => {
  const l = await lab([], 'mask');
  try {
    const [join] = await everyVerb(l);
    assert.ok((join?.services[0]?.mask?.moves.length ?? 0) > 0, 'the join moves mask values');
  } finally {
    await l.stop();
  }
});

test('what plan refuses, with its reason and exit 1; 4xx from the API; rebalance says what it needs', async () => {
  const l = await lab([]);
  try {
    await l.arrive(E1, 10_000);
    const refused = async (args: string[], message: RegExp) => {
      const r = await l.ctl('plan', ...args);
      assert.equal(r.code, 1, `plan ${args.join(' ')}: ${r.stdout}`);
      assert.match(r.stderr, message);
    };
    await refused(['leave', E2], /engine 127\.0\.0\.12 is in no service group/);
    await refused(['leave', E2, '--service', '0'], /HTTP 404: engine 127\.0\.0\.12 is not in service group 0/);
    await refused(['drain', E2, '--service', '7'], /HTTP 404: service 7 is not configured/);
    await refused(['weight', E1, '70000'], /weight: expected a weight 0-65535, got 70000/);
    await refused(['weight', E1], /weight: expected IP and a weight 0-65535/);
    await refused(['join', E2, '--weight', 'x'], /join: expected a weight 0-65535, got x/);
    await refused(['join', '300.1.2.3'], /join: expected an engine IPv4 address, got 300\.1\.2\.3/);
    await refused(['join', E1], /HTTP 409: engine 127\.0\.0\.11 is already in every service group/);
    await refused(
      ['move', E1],
      /expected join IP \[--weight W\], leave IP, drain IP, weight IP W or rebalance, got move/,
    );
    await refused(['rebalance'], /HTTP 409: no service uses load-aware assignment \(services\[\]\.loadAware\)/);
    await refused(['rebalance', '--service', '0'], /HTTP 409: service 0 does not use load-aware assignment/);
    await refused(['rebalance', E1], /rebalance takes no engine, got 127\.0\.0\.11/);
    const api = async (query: string) => {
      const r = await fetch(`${l.daemon.url}/api/v1/plan?${query}`);
      return { status: r.status, body: (await r.json()) as { error: string; message: string } };
    };
    assert.deepEqual(await api(`change=weight&engine=${E1}&weight=65536`), {
      status: 400,
      body: { error: 'bad-request', message: 'weight must be an integer 0-65535, got "65536"' },
    });
    assert.equal((await api(`change=leave&engine=${E1}&service=256`)).status, 400);
    assert.equal((await api(`change=join&engine=01.2.3.4`)).status, 400);
    assert.equal((await api(`change=leave&engine=${E2}&service=0`)).status, 404);
    assert.equal((await api(`change=swap&engine=${E1}`)).status, 400);
    // A plan changes nothing: the table is the one before.
    const before = await l.table();
    assert.equal((await api(`change=leave&engine=${E1}`)).status, 200);
    assert.deepEqual((await l.table()).buckets, before.buckets);
  } finally {
    await l.stop();
  }
});
