// A departed engine's remembered buckets (its history, kept for historyWindow so a returning engine gets them back)
// restored from a state file whose time of leaving lies in the future (a clock set back, or a hand-edited file): the
// window runs from the restart, not from that time, so the memory is still forgotten (at the next table change).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ServiceMemory } from '../../src/cluster/index.js';
import { testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const E3 = '192.0.2.13';
const HISTORY_MS = 600_000;

function group() {
  const group = testCluster({ service: { lenientReceiveId: 0, historyWindowMs: HISTORY_MS } });
  const remembered = () =>
    (group.cluster.memory()[0]?.engines ?? []).filter((e) => e.leftAt !== null).map((e) => e.address);
  return { ...group, remembered };
}

test('a departed engine that left "in the future" is forgotten historyWindow after the restart', () => {
  const first = group();
  first.say(E1);
  first.say(E1);
  const [m] = JSON.parse(JSON.stringify(first.cluster.memory())) as ServiceMemory[];
  assert.ok(m);
  const second = group();
  second.cluster.restore({
    ...m,
    engines: [
      ...m.engines,
      { address: E2, buckets: [1, 2, 3], leftAt: first.clock.now() + 100 * HISTORY_MS },
    ] as ServiceMemory['engines'],
  });
  second.say(E1);
  second.say(E1);
  assert.deepEqual(second.remembered(), [E2], 'remembered at first');
  for (let t = 0; t <= HISTORY_MS + 20_000; t += 10_000) {
    second.clock.advance(10_000);
    second.say(E1);
    second.cluster.tick();
  }
  // The next table change (an engine joins) looks at what it remembers.
  second.say(E3);
  second.say(E3);
  for (let t = 0; t < 5; t++) {
    second.clock.advance(1000);
    second.cluster.tick();
  }
  assert.equal(second.cluster.service(0)?.engines.find((e) => e.address === E3)?.state, 'usable');
  assert.deepEqual(second.remembered(), [], 'forgotten once historyWindow has passed since the restart');
});
