// Load-aware assignment in a service group (cluster/table-keeper.ts, load-aware.ts) on an injected clock: the data
// plane's cumulative per-bucket counters at each window's end become the window's load; `plan rebalance` predicts the
// window end's moves exactly; each move is one table event with its reason; the same load window after window moves
// nothing more; the hour's budget holds; a membership change keeps the moves; the state survives a restart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_LOAD_AWARE } from '../../src/cluster/index.js';
import type { ClusterEvent, LoadAwareSettings, ServiceGroupConfig, TableEvent } from '../../src/cluster/index.js';
import { HERE_I_AM_MS as T, testCluster } from './helpers.js';

const E = ['192.0.2.11', '192.0.2.12', '192.0.2.13', '192.0.2.14'];
const WINDOW = 20_000;
/** A window end well after any clock start. */
const END0 = 90_000 * WINDOW;

function gateway(load: Partial<LoadAwareSettings> = {}, over: Partial<ServiceGroupConfig> = {}) {
  const settings: LoadAwareSettings = {
    ...DEFAULT_LOAD_AWARE,
    enabled: true,
    windowMs: WINDOW,
    minConnections: 100,
    ...load,
  };
  const { cluster, events, join, keptAlive } = testCluster({
    service: { lenientReceiveId: 0, loadAware: settings, ...over },
  });
  const { live, run } = keptAlive();
  for (const e of E) {
    join(e);
    live.add(e);
  }
  run(1000);
  const counts = Array.from({ length: 256 }, () => ({ packets: 0, bytes: 0 }));
  const port = cluster.loadAware(0)!;
  return {
    cluster,
    events,
    live,
    run,
    port,
    table: () => [...cluster.service(0)!.buckets],
    /** `perWindow[b]` more connections on bucket b. */
    feed: (perWindow: readonly number[]) =>
      perWindow.forEach((n, b) => {
        counts[b]!.packets += n;
        counts[b]!.bytes += 60 * n;
      }),
    counts: () => counts.map((c) => ({ ...c })),
    /** The end of window k: the counters read, decided and made. */
    windowEnds: (k: number) => {
      const end = END0 + k * WINDOW;
      const w = port.loadRead(end, counts);
      const outcome = port.loadDecision(end, w);
      port.loadApply(outcome);
      return outcome;
    },
  };
}

/** 10 new connections per bucket a window, and 300 more on each of three buckets of the first engine. */
function skewed(table: readonly (string | null)[]): number[] {
  const hot = table.flatMap((e, b) => (e === E[0] ? [b] : [])).slice(0, 3);
  return table.map((_, b) => 10 + (hot.includes(b) ? 300 : 0));
}

const loadEvents = (events: ClusterEvent[]): TableEvent[] =>
  events.filter((e): e is TableEvent => e.type === 'table' && e.load !== undefined);

test('plan rebalance predicts the window end exactly; each move is a table event with the loads before and after', () => {
  const g = gateway();
  assert.equal(g.windowEnds(0).kind, 'baseline');
  const perWindow = skewed(g.table());
  g.feed(perWindow);
  const planned = g.cluster.planRebalance(0, END0 + 5000, g.counts());
  assert.ok(planned.ok);
  const plan = planned.plan;
  assert.ok(plan.moves.length > 0, 'moves planned');
  assert.ok(plan.load !== null && plan.load !== undefined);
  const before = g.table();
  const outcome = g.windowEnds(1);
  assert.equal(outcome.kind, 'decided');
  assert.deepEqual(g.table(), [...plan.after.buckets], 'the window end made exactly the planned table');
  assert.equal(
    g.table().filter((e, b) => e !== before[b]).length,
    plan.moves.length,
    'as many buckets moved as planned',
  );
  const [ev, ...more] = loadEvents(g.events);
  assert.equal(more.length, 0, 'one table event');
  assert.match(ev!.reason, /^load: 192\.0\.2\.11 at \d\.\d\dx its share -> \d\.\d\dx, \d+ buckets? to /);
  assert.equal(ev!.moved, plan.moves.length);
  for (const e of ev!.load!.engines) assert.ok(e.after <= 1.15, `${e.address} within tolerance after`);
  const view = g.port.loadView()!;
  assert.equal(view.spent, plan.moves.length);
  assert.equal(view.held, plan.moves.length);
});

test('the same load window after window moves nothing more; a membership change keeps the moves', () => {
  const g = gateway();
  g.windowEnds(0);
  const perWindow = skewed(g.table());
  for (let k = 1; k <= 30; k++) {
    g.feed(perWindow);
    g.windowEnds(k);
  }
  const moves = loadEvents(g.events);
  assert.equal(moves.length, 1, 'one load change in 30 windows of the same load');
  const afterLoad = g.table();
  // An engine that neither gave nor took by load leaves: balance gives its buckets out, the load moves stay.
  const moved = afterLoad.flatMap((e, b) => (e !== null && e !== E[0] ? [b] : [])).filter((b) => perWindow[b]! > 10);
  assert.ok(moved.length > 0);
  const untouched = E.slice(1).find((a) => !moved.some((b) => afterLoad[b] === a))!;
  g.live.delete(untouched);
  g.run(3 * T + 2000);
  const now = g.table();
  assert.ok(!now.includes(untouched));
  for (const b of moved) assert.equal(now[b], afterLoad[b], `bucket ${b} stays where the load put it`);
  // And the next windows, with the same load, still move nothing back.
  const n = loadEvents(g.events).length;
  for (let k = 31; k <= 35; k++) {
    g.feed(perWindow);
    g.windowEnds(k);
  }
  assert.ok(loadEvents(g.events).length - n <= 1);
  for (const b of moved) if (now[b] !== untouched) assert.equal(g.table()[b], now[b]);
});

test('the budget: at most maxMovesPerHour moves in any hour; held buckets are not moved', () => {
  const g = gateway({ maxMovesPerHour: 2, holdMs: 3_600_000 });
  g.windowEnds(0);
  const hot = g
    .table()
    .flatMap((e, b) => (e === E[0] ? [b] : []))
    .slice(0, 6);
  const perWindow = g.table().map((_, b) => 10 + (hot.includes(b) ? 200 : 0));
  const perHour = 3_600_000 / WINDOW;
  for (let k = 1; k <= perHour; k++) {
    g.feed(perWindow);
    g.windowEnds(k);
  }
  const moved = loadEvents(g.events).reduce((s, e) => s + e.moved, 0);
  assert.equal(moved, 2, 'two moves in the first hour');
  g.feed(perWindow);
  g.windowEnds(perHour + 1);
  const total = loadEvents(g.events).reduce((s, e) => s + e.moved, 0);
  assert.ok(total > 2 && total <= 4, `the next hour's budget: ${total}`);
});

test('a quiet window (below minConnections) decides nothing; a missed window is a new baseline', () => {
  const g = gateway({ minConnections: 10_000 });
  g.windowEnds(0);
  g.feed(skewed(g.table()));
  assert.equal(g.windowEnds(1).kind, 'quiet');
  g.feed(skewed(g.table()));
  assert.equal(g.windowEnds(3).kind, 'baseline', 'window 2 was not read: window 3 is two windows long');
  assert.equal(loadEvents(g.events).length, 0);
});

test('holds, budget and the moves survive a restart (the memory)', () => {
  const g = gateway();
  g.windowEnds(0);
  g.feed(skewed(g.table()));
  g.windowEnds(1);
  const memory = g.cluster.memory()[0]!;
  assert.ok(memory.load !== undefined);
  assert.ok(memory.load.holds.length > 0);
  assert.equal(memory.load.spent[0]![0], END0 + WINDOW);
  assert.ok(memory.load.offsets.length >= 2);
  const restarted = testCluster({
    service: { loadAware: { ...DEFAULT_LOAD_AWARE, enabled: true, windowMs: WINDOW } },
  }).cluster;
  restarted.restore(memory);
  assert.deepEqual(restarted.memory()[0]!.load, memory.load);
});

test('plan rebalance on a service without loadAware is refused', () => {
  const g = gateway({ enabled: false });
  const r = g.cluster.planRebalance(0, END0, g.counts());
  assert.ok(!r.ok);
  assert.equal(r.ok ? '' : r.error, 'not-load-aware');
});
