// After a restart the engines of the persisted table that have not been heard yet are "awaited" while the restart
// grace lasts: the data plane keeps their routes (redirectOf), so connections redirected to them before the restart
// still reach them (test/dataplane/nft/upgrade-restart.kernel.test.ts shows it in the kernel). The grace over
// without one: an engine-state event (new -> gone) tells the data plane, even when the table does not change.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ClusterEvent, ServiceMemory } from '../../src/cluster/index.js';
import { redirectOf } from '../../src/dataplane/apply.js';
import { HERE_I_AM_MS, testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

/** A cluster that ran with E1 and E2 holding the table, and one restarted from its memory. */
function restarted() {
  const make = () => testCluster({ service: { lenientReceiveId: 0 } });
  const first = make();
  for (const e of [E1, E2]) {
    first.say(e);
    first.say(e);
  }
  assert.ok([E1, E2].every((e) => first.cluster.service(0)?.buckets.includes(e)));
  const memory = JSON.parse(JSON.stringify(first.cluster.memory())) as ServiceMemory[];
  const second = make();
  for (const m of memory) second.cluster.restore(m);
  second.cluster.startRestartGrace();
  // The events once the grace has started (second.events also holds any the restore sent).
  const events: ClusterEvent[] = [];
  second.cluster.onEvent((e) => events.push(e));
  const redirected = () => {
    const routes = second.cluster.routes(0);
    assert.ok(routes);
    return redirectOf(
      {
        id: 0,
        protocol: 'tcp',
        ports: [80],
        portsSource: false,
        priority: null,
        forwarding: 'l2',
        failMode: 'open',
        clientInterfaces: ['c0'],
      },
      routes,
    ).engines;
  };
  return { ...second, events, redirected, awaited: () => second.cluster.service(0)?.awaited };
}

test('engines of the persisted table keep their routes until heard again; one never back loses them at the end of the grace', () => {
  const r = restarted();
  assert.deepEqual(r.awaited(), [E1, E2], 'none heard yet');
  assert.deepEqual(r.cluster.service(0)?.buckets.filter((b) => b !== null).length, 0, 'the live table is empty');
  assert.deepEqual([...r.redirected()].sort(), [E1, E2], 'both keep their routes');

  r.say(E1);
  r.say(E1);
  assert.deepEqual(r.awaited(), [E2]);
  assert.deepEqual(new Set(r.cluster.service(0)?.buckets), new Set([E1]), 'the table healed onto E1 meanwhile');
  assert.deepEqual([...r.redirected()].sort(), [E1, E2], 'E2 keeps its route though it holds no bucket now');
  assert.equal(r.events.filter((e) => e.type === 'engine-state' && e.to === 'gone').length, 0);

  // The grace (3 x HERE_I_AM_T) ends without E2; E1 keeps saying HERE_I_AM.
  for (let t = 0; t < 4 * HERE_I_AM_MS; t += 1000) {
    r.clock.advance(1000);
    if (t % HERE_I_AM_MS === 0) r.say(E1);
    r.cluster.tick();
  }
  assert.deepEqual(r.awaited(), []);
  assert.deepEqual(r.redirected(), [E1], "E2's route goes");
  const gone = r.events.filter((e) => e.type === 'engine-state' && e.to === 'gone');
  assert.deepEqual(
    gone.map((e) => e.type === 'engine-state' && [e.engine, e.from, e.reason]),
    [[E2, 'new', 'held buckets when wccpd stopped and not heard within the restart grace time']],
  );
});

test('every engine back within the grace: none awaited, no gone event, the persisted table stands', () => {
  const r = restarted();
  for (const e of [E2, E1]) {
    r.say(e);
    r.say(e);
  }
  assert.deepEqual(r.awaited(), []);
  assert.deepEqual([...r.redirected()].sort(), [E1, E2]);
  for (let t = 0; t < 4 * HERE_I_AM_MS; t += 1000) {
    r.clock.advance(1000);
    if (t % HERE_I_AM_MS === 0) for (const e of [E1, E2]) r.say(e);
    r.cluster.tick();
  }
  assert.equal(r.events.filter((e) => e.type === 'engine-state' && e.to === 'gone').length, 0);
});
