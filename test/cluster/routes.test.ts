// Cluster.routes: what the data plane reads of a group (its table and the engines that keep a route), apart from the
// admin's snapshot. Draining and suspect engines keep their route (their connections finish there), a gone one loses
// it, and one that still holds buckets while the change waits for timers.settle keeps it until then.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { keepsRoute, ENGINE_STATES } from '../../src/cluster/index.js';
import { testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

function setup(settleMs = 0) {
  const group = testCluster({ service: { lenientReceiveId: 0 }, settleMs });
  for (const e of [E1, E2]) group.join(e);
  return group;
}

test('which states keep their route: usable, draining, suspect', () => {
  assert.deepEqual(
    ENGINE_STATES.filter((s) => keepsRoute(s)),
    ['usable', 'draining', 'suspect'],
  );
});

test('routes: the table of the snapshot; a drained engine keeps its route, a gone one loses it', () => {
  const { clock, cluster, say } = setup();
  const routes = () => cluster.routes(0);
  assert.equal(cluster.routes(7), null, 'not configured');
  assert.deepEqual(routes()?.table.buckets, cluster.service(0)?.buckets);
  assert.equal(routes()?.table.changeNumber, cluster.service(0)?.changeNumber);
  assert.deepEqual(routes()?.targets, [E1, E2]);
  assert.equal(routes()?.definition?.flags, cluster.service(0)?.definition?.flags);
  assert.equal(routes()?.maskSets, undefined, 'a hash service has no mask values');
  cluster.drain(0, E1);
  assert.equal(cluster.service(0)?.buckets.includes(E1), false);
  assert.deepEqual(routes()?.targets, [E1, E2], 'draining: no buckets, its route kept');
  for (let s = 0; s < 30; s += 10) {
    clock.advance(10_000);
    say(E2);
    cluster.tick();
  }
  assert.equal(cluster.service(0)?.engines.find((e) => e.address === E1)?.state, 'gone');
  assert.deepEqual(routes()?.targets, [E2], 'gone: its route removed');
});

test('routes: an engine that still holds buckets while the change waits for timers.settle keeps its route', () => {
  const { clock, cluster, say } = setup(5_000);
  clock.advance(5_000);
  cluster.tick();
  assert.ok(cluster.service(0)?.buckets.includes(E1));
  // Capabilities refused: E1 is joining again, and its buckets wait for the settle time to move.
  say(E1, { capabilities: { forwarding: 0x1, assignment: 0x1, return: 0x2 } });
  assert.equal(cluster.service(0)?.engines.find((e) => e.address === E1)?.state, 'joining');
  assert.ok(cluster.service(0)?.buckets.includes(E1), 'the change waits');
  assert.deepEqual(cluster.routes(0)?.targets, [E2, E1], 'E1 keeps its route while it holds buckets');
  clock.advance(5_000);
  cluster.tick();
  assert.equal(cluster.service(0)?.buckets.includes(E1), false);
  assert.deepEqual(cluster.routes(0)?.targets, [E2]);
});
