// A mask service's values across restarts of the cluster (persisted memory, injected clock): kept like the buckets
// through the restart grace, also when wccpd restarts again in the middle of it; reassigned once the grace is over
// with an engine missing; started afresh when the persisted values are for another mask.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ServiceMemory } from '../../src/cluster/index.js';
import { testCluster } from './helpers.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const E3 = '192.0.2.13';
const MASK_CAPABLE = { forwarding: 0x2, assignment: 0x2, return: 0x2 };

/** A mask service whose engines send HERE_I_AMs every 10 s while the clock runs in 1 s steps. */
function beating() {
  const { cluster, say, keptAlive } = testCluster({ service: { assignment: 'mask', lenientReceiveId: 0 } });
  const beat = (addr: string) => say(addr, { capabilities: MASK_CAPABLE });
  const { live, run } = keptAlive(beat);
  return {
    cluster,
    run,
    arrive: (addr: string) => {
      beat(addr);
      beat(addr);
      live.add(addr);
    },
    values: () => (cluster.service(0)?.maskSets[0]?.values ?? []).map((v) => v.engine),
    memory: () => JSON.parse(JSON.stringify(cluster.memory())) as ServiceMemory[],
  };
}

/** Three engines that joined one at a time, their 64 values, and the memory a restart starts from. */
function persisted() {
  const first = beating();
  for (const addr of [E1, E2, E3]) {
    first.arrive(addr);
    first.run(20_000);
  }
  const values = first.values();
  assert.equal(values.length, 64);
  assert.equal(new Set(values).size, 3, 'three holders before the restart');
  const memory = first.memory();
  assert.deepEqual(
    memory[0]?.mask?.engines,
    values,
    'memory holds the values (one per mask value, in order: all 64 are assigned)',
  );
  return { values, memory, changeNumber: first.cluster.service(0)?.changeNumber ?? 0 };
}

test('a restart in the middle of the grace (one engine back, the values healed onto it) persists the values from before', () => {
  const { values, memory, changeNumber } = persisted();
  const second = beating();
  for (const m of memory) second.cluster.restore(m);
  second.cluster.startRestartGrace();
  second.arrive(E3);
  second.run(2000);
  assert.deepEqual(new Set(second.values()), new Set([E3]), 'meanwhile every value is healed onto the one back');
  assert.ok((second.cluster.service(0)?.changeNumber ?? 0) > changeNumber, 'a new change number');
  const middle = second.memory();
  assert.deepEqual(middle[0]?.mask?.engines, values, 'what a restart now would persist: the values from before');

  const third = beating();
  for (const m of middle) third.cluster.restore(m);
  third.cluster.startRestartGrace();
  for (const addr of [E2, E3, E1]) {
    third.arrive(addr);
    third.run(2000);
  }
  assert.deepEqual(third.values(), values, 'all three back: the very same values');
});

test('the grace over with an engine missing: its values go to the others, the rest stay, the change number advances', () => {
  const { values, memory } = persisted();
  const second = beating();
  for (const m of memory) second.cluster.restore(m);
  second.cluster.startRestartGrace();
  second.arrive(E2);
  second.arrive(E3);
  second.run(2000);
  const during = second.cluster.service(0)?.changeNumber ?? 0;
  second.run(40_000);
  const after = second.values();
  assert.deepEqual(new Set(after), new Set([E2, E3]));
  assert.equal(
    after.filter((e, i) => values[i] !== E1 && e !== values[i]).length,
    0,
    "values that were not E1's stayed where they were",
  );
  assert.ok((second.cluster.service(0)?.changeNumber ?? 0) >= during);
});

test('persisted values for another mask (the service masks another field now) are not kept: values anew', () => {
  const { memory } = persisted();
  const [m] = memory;
  assert.ok(m?.mask);
  const other: ServiceMemory = {
    ...m,
    mask: { ...m.mask, mask: { ...m.mask.mask, destinationAddressMask: 0, sourceAddressMask: 0x1741 } },
  };
  const second = beating();
  second.cluster.restore(other);
  second.cluster.startRestartGrace();
  second.arrive(E1);
  second.arrive(E2);
  second.run(2000);
  const sets = second.cluster.service(0)?.maskSets ?? [];
  assert.equal(sets[0]?.mask.destinationAddressMask, 0x1741, "Squid's mask for the service's flags");
  assert.equal(sets[0]?.mask.sourceAddressMask, 0);
  assert.deepEqual(new Set(second.values()), new Set([E1, E2]));
  assert.equal(second.values().length, 64);
});
