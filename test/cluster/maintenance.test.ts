// Maintenance windows in the cluster, on a fake clock: a window drains the engines it covers and gives them back their
// very buckets when it ends, however long it lasted; it is a drain of its own, apart from an admin drain.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { MaintenanceWindowState } from '../../src/cluster/index.js';
import { testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const E3 = '192.0.2.13';
const HOUR = 3_600_000;

function setup() {
  const group = testCluster({ service: { lenientReceiveId: 0 } });
  const { clock, cluster, say } = group;
  const window = (over: Partial<MaintenanceWindowState> = {}): MaintenanceWindowState => ({
    key: '0/0',
    service: 0,
    engine: E2,
    cron: '0 2 * * sun',
    durationMs: 2 * HOUR,
    activeUntil: null,
    next: clock.now() + HOUR,
    ...over,
  });
  /** Time passes with every engine announcing itself every 10 s. */
  const pass = (ms: number, engines: string[]) => {
    for (let t = 0; t < ms; t += 10_000) {
      clock.advance(10_000);
      for (const e of engines) say(e);
      cluster.tick();
    }
  };
  return { ...group, window, pass };
}

test('a window drains its engine at the start and gives back its very buckets at the end, even after the history window', () => {
  const { clock, cluster, join, engine, buckets, window, pass } = setup();
  join(E1);
  join(E2);
  join(E3);
  const before = buckets();
  cluster.setMaintenance(window());
  assert.equal(engine(E2)?.state, 'usable', 'a next window alone changes nothing');
  assert.deepEqual(engine(E2)?.maintenance, {
    activeUntil: null,
    activeCron: null,
    next: clock.now() + HOUR,
    nextCron: '0 2 * * sun',
    nextDurationMs: 2 * HOUR,
  });

  cluster.setMaintenance(window({ activeUntil: clock.now() + 2 * HOUR, next: clock.now() + 7 * 24 * HOUR }));
  assert.equal(engine(E2)?.state, 'draining');
  assert.match(engine(E2)?.reason ?? '', /^maintenance window "0 2 \* \* sun" starts/);
  const during = buckets();
  for (let b = 0; b < 256; b++) {
    if (before[b] === E2) assert.ok(during[b] === E1 || during[b] === E3, `bucket ${b} went to a survivor`);
    else assert.equal(during[b], before[b], `bucket ${b} stayed`);
  }
  // Two hours: longer than the 10-minute history window; the engine keeps announcing itself.
  pass(2 * HOUR, [E1, E2, E3]);
  assert.equal(engine(E2)?.state, 'draining');
  cluster.setMaintenance(window({ activeUntil: null, next: clock.now() + 7 * 24 * HOUR }));
  assert.equal(engine(E2)?.state, 'usable');
  assert.match(engine(E2)?.reason ?? '', /^maintenance window "0 2 \* \* sun" over/);
  assert.deepEqual(buckets(), before, 'sticky return: the same buckets as before the window');
});

test('maintenance and admin drains are separate: neither end undoes the other', () => {
  const { clock, cluster, join, engine, window } = setup();
  join(E1);
  join(E2);
  cluster.drain(0, E2);
  cluster.setMaintenance(window({ activeUntil: clock.now() + HOUR }));
  cluster.setMaintenance(window({ activeUntil: null }));
  assert.equal(engine(E2)?.state, 'draining', 'the window ended; the admin drain stays');
  cluster.setMaintenance(window({ activeUntil: clock.now() + HOUR }));
  cluster.undrain(0, E2);
  assert.equal(engine(E2)?.state, 'draining', 'undrain during a window: the window still holds it');
  cluster.setMaintenance(window({ activeUntil: null }));
  assert.equal(engine(E2)?.state, 'usable');
});

test('a service-wide window drains every engine, including one that joins during it; bypass while it runs', () => {
  const { clock, cluster, join, engine, buckets, window } = setup();
  join(E1);
  cluster.setMaintenance(window({ engine: null, activeUntil: clock.now() + HOUR }));
  join(E2);
  assert.deepEqual([engine(E1)?.state, engine(E2)?.state], ['draining', 'draining']);
  assert.ok(
    buckets().every((b) => b === null),
    'no usable engine: every bucket unassigned (fail mode decides)',
  );
  cluster.setMaintenance(window({ engine: null, activeUntil: null }));
  assert.deepEqual([engine(E1)?.state, engine(E2)?.state], ['usable', 'usable']);
  assert.equal(engine(E3), undefined);
});
