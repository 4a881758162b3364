// timers.settle on the injected clock: at most one table change per service per settle interval whatever arrives
// (alternating weights or capabilities, joins, leaves), the first change after a quiet spell at once, the rest of a
// burst as one trailing change, every request that waited counted `table-changes-coalesced`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TableEvent } from '../../src/cluster/index.js';
import { hereIAm, testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const SETTLE = 250;

function setup(settleMs = SETTLE) {
  const group = testCluster({ settleMs });
  const { clock, cluster } = group;
  const tables: (TableEvent & { at: number })[] = [];
  cluster.onEvent((e) => {
    if (e.type === 'table') tables.push({ ...e, at: clock.now() });
  });
  /** Runs the cluster's timers as control/timers.ts does, up to `until`. */
  const runTimers = (until: number) => {
    for (let due = cluster.nextDue(); due !== null && due <= until; due = cluster.nextDue()) {
      clock.advance(Math.max(0, due - clock.now()));
      cluster.tick();
    }
    clock.advance(Math.max(0, until - clock.now()));
  };
  const gaps = () => tables.slice(1).map((t, i) => t.at - (tables[i]?.at ?? 0));
  return { ...group, tables, runTimers, gaps };
}

test('10,000 HERE_I_AMs alternating the weight, 1 ms apart: at most one table change per settle interval, the rest counted', () => {
  const { clock, cluster, tables, say, owned, runTimers, gaps } = setup();
  say(E1);
  say(E1);
  say(E2);
  say(E2);
  clock.advance(10_000);
  tables.length = 0;
  const start = clock.now();
  for (let i = 0; i < 10_000; i++) {
    say(E2, { weight: i % 2 === 0 ? 30_000 : 10_000 });
    runTimers(clock.now() + 1);
  }
  runTimers(clock.now() + SETTLE);
  const span = clock.now() - start;
  assert.ok(
    gaps().every((g) => g >= SETTLE),
    `table changes ${SETTLE} ms apart at least: ${gaps()
      .filter((g) => g < SETTLE)
      .join(',')}`,
  );
  assert.ok(tables.length <= Math.ceil(span / SETTLE) + 1, `${tables.length} table changes in ${span} ms`);
  assert.ok(tables.length >= 10, 'the table still follows the engine');
  const coalesced = cluster.service(0)?.counters['table-changes-coalesced'] ?? 0;
  assert.ok(coalesced >= 10_000 - tables.length, `coalesced ${coalesced}`);
  assert.match(tables[1]?.reason ?? '', /and \d+ more change\(s\) within timers\.settle/);
  // It settles on the last weight it sent (10,000, like E1's).
  assert.equal(owned(E2), 128);
  const settled = tables.length;
  runTimers(clock.now() + 4 * SETTLE);
  assert.equal(tables.length, settled, 'nothing is left waiting');
});

test('alternating forwarding capability: state follows each HERE_I_AM, the table changes at most once per settle interval', () => {
  const { clock, cluster, tables, say, owned, runTimers, gaps } = setup();
  say(E1);
  say(E1);
  say(E2);
  say(E2);
  clock.advance(10_000);
  tables.length = 0;
  for (let i = 0; i < 2_000; i++) {
    say(E2, i % 2 === 0 ? { capabilities: { forwarding: 0x1, assignment: 0x1, return: 0x2 } } : {});
    runTimers(clock.now() + 1);
  }
  runTimers(clock.now() + SETTLE);
  assert.ok(gaps().every((g) => g >= SETTLE));
  assert.ok(tables.length <= Math.ceil(2_000 / SETTLE) + 2, `${tables.length} table changes`);
  assert.equal(cluster.service(0)?.engines.find((e) => e.address === E2)?.state, 'usable');
  assert.equal(owned(E2), 128, 'it ends with its own buckets back');
});

test('leading edge: after a quiet spell a failure heals at once; a second one within settle waits for its end', () => {
  const { clock, cluster, tables, owned, say, runTimers } = setup();
  const E3 = '192.0.2.13';
  for (const e of [E1, E2, E3]) {
    say(e);
    say(e);
  }
  runTimers(clock.now() + 10_000);
  for (const e of [E1, E2, E3]) say(e);
  tables.length = 0;
  const coalesced = () => cluster.service(0)?.counters['table-changes-coalesced'] ?? 0;
  const before = coalesced();
  let wakes = 0;
  cluster.onWake(() => {
    wakes++;
  });
  const t0 = clock.now();
  cluster.drain(0, E2);
  assert.equal(tables.length, 1, 'the first change is immediate');
  assert.equal(owned(E2), 0);
  clock.advance(100);
  cluster.drain(0, E3);
  assert.equal(owned(E3) > 0, true, 'the second waits');
  assert.equal(coalesced() - before, 1);
  assert.equal(wakes, 1, 'the timers are told the due time moved');
  assert.equal(cluster.nextDue(), t0 + SETTLE);
  clock.advance(SETTLE - 101);
  cluster.tick();
  assert.equal(owned(E3) > 0, true, 'not before the settle time');
  clock.advance(1);
  cluster.tick();
  assert.equal(owned(E1), 256);
  assert.deepEqual(
    tables.map((t) => t.at - t0),
    [0, SETTLE],
  );
});

test('a burst of joins and a leave become one trailing change; with settle 0 every change is immediate', () => {
  const { clock, cluster, tables, runTimers } = setup();
  const engines = Array.from({ length: 8 }, (_, i) => `192.0.2.${20 + i}`);
  for (const e of engines) {
    cluster.hereIAm(hereIAm(e));
    cluster.hereIAm(hereIAm(e));
  }
  assert.equal(tables.length, 1, 'the first join at once');
  runTimers(clock.now() + SETTLE);
  assert.equal(tables.length, 2, 'the other seven in one change');
  const owners = new Set(cluster.service(0)?.buckets);
  assert.deepEqual([...owners].sort(), [...engines].sort());
  const counts = engines.map((e) => cluster.service(0)?.buckets.filter((b) => b === e).length ?? 0);
  assert.ok(
    counts.every((n) => n === 32),
    `even shares: ${counts.join(',')}`,
  );

  const immediate = setup(0);
  for (const e of engines) {
    immediate.cluster.hereIAm(hereIAm(e));
    immediate.cluster.hereIAm(hereIAm(e));
  }
  assert.equal(immediate.tables.length, 8);
  assert.equal(immediate.cluster.service(0)?.counters['table-changes-coalesced'], undefined);
});
