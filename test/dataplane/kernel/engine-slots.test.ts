// Engine slots derived from the service, the engine's address and the forwarding method: the same on every gateway,
// whatever order the engines came in, and unique for engines close together; a collision is resolved by a fixed rule
// and reported.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  homeSlot,
  parseSlotKey,
  placeSlots,
  slotKeyText,
  type SlotKey,
} from '../../../src/dataplane/kernel/engine-slots.js';

const RANGE = { min: 1, max: 7935 };
const ip = (n: number): string => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
const toInt = (s: string): number => s.split('.').reduce((a, x) => a * 256 + Number(x), 0);

test('engines within any 2048 consecutive addresses (a /21) never share a home slot, with either forwarding method', () => {
  for (const base of [toInt('192.0.2.0') & ~2047, toInt('198.51.100.0') & ~2047, toInt('10.255.248.0'), 0xffff_f800]) {
    const homes = new Set<number>();
    for (let i = 0; i < 2048; i++) {
      for (const forwarding of ['l2', 'gre'] as const) {
        const h = homeSlot({ serviceId: 0, engine: ip(base + i), forwarding }, RANGE);
        assert.ok(h >= RANGE.min && h <= RANGE.max, `home ${h} in range`);
        homes.add(h);
      }
    }
    assert.equal(homes.size, 4096, `all 4096 pairs from ${ip(base)} have distinct homes`);
  }
});

test('fresh placement depends only on the set of pairs, not their order; without collisions every pair is at home', () => {
  const keyArb = fc.record({
    engine: fc
      .tuple(fc.constantFrom(0xc0000200, 0xc6336400, 0xcb007100, 0x0a000000), fc.integer({ min: 0, max: 255 }))
      .map(([net, host]) => ip(net + host)),
    forwarding: fc.constantFrom('l2' as const, 'gre' as const),
    serviceId: fc.constantFrom(0, 51, 80, 90, 255),
  });
  fc.assert(
    fc.property(fc.uniqueArray(keyArb, { selector: slotKeyText, maxLength: 64 }), fc.nat(), (keys, seed) => {
      const a = placeSlots(new Map(), keys, RANGE);
      const shuffled =
        fc.sample(fc.shuffledSubarray(keys, { minLength: keys.length, maxLength: keys.length }), {
          seed,
          numRuns: 1,
        })[0] ?? [];
      const b = placeSlots(new Map(), shuffled, RANGE);
      assert.deepEqual(new Map([...b.slots].sort()), new Map([...a.slots].sort()));
      assert.equal(new Set(a.slots.values()).size, keys.length, 'one slot per pair');
      for (const k of keys)
        if (!a.displaced.some((d) => slotKeyText(d.key) === slotKeyText(k))) {
          assert.equal(a.slots.get(slotKeyText(k)), homeSlot(k, RANGE));
        }
    }),
    { seed: 7, numRuns: 300 },
  );
});

test('a collision: held pairs keep their slot; new ones go to the next free slot by a fixed order, and are reported', () => {
  // 7933 (the prime below the range's 7935 values) addresses apart: the same home.
  const x: SlotKey = { serviceId: 0, engine: '192.0.2.10', forwarding: 'l2' };
  const y: SlotKey = { serviceId: 0, engine: ip(toInt('192.0.2.10') + 7933), forwarding: 'l2' };
  const home = homeSlot(x, RANGE);
  assert.equal(homeSlot(y, RANGE), home);
  // Both new at once: the lower address gets the home, on every gateway.
  const both = placeSlots(new Map(), [y, x], RANGE);
  assert.equal(both.slots.get(slotKeyText(x)), home);
  assert.equal(both.slots.get(slotKeyText(y)), home + 1);
  assert.deepEqual(both.displaced, [{ key: y, home, slot: home + 1 }]);
  // y first, x later: y keeps the home (its connections carry that mark), x is displaced and reported.
  const first = placeSlots(new Map(), [y], RANGE);
  const later = placeSlots(first.slots, [y, x], RANGE);
  assert.equal(later.slots.get(slotKeyText(y)), home);
  assert.deepEqual(later.displaced, [{ key: x, home, slot: home + 1 }]);
  // A slot being released in this change is not handed to another pair in the same change.
  const swap = placeSlots(first.slots, [x], RANGE);
  assert.equal(swap.slots.get(slotKeyText(x)), home + 1);
  // The top of the range wraps to the bottom.
  const small = { min: 1, max: 3 };
  const keys = ['192.0.2.1', '192.0.2.2', '192.0.2.3'].map((engine): SlotKey => ({
    serviceId: 0,
    engine,
    forwarding: 'l2',
  }));
  assert.deepEqual([...placeSlots(new Map(), keys, small).slots.values()].sort(), [1, 2, 3]);
  assert.throws(
    () => placeSlots(new Map(), [...keys, { serviceId: 0, engine: '192.0.2.4', forwarding: 'l2' }], small),
    /no free engine slot in 1..3/,
  );
});

test('remembered slots (the last run): a free one is given back first, whatever the order; a held one is not', () => {
  const x: SlotKey = { serviceId: 0, engine: '192.0.2.10', forwarding: 'l2' };
  const y: SlotKey = { serviceId: 0, engine: ip(toInt('192.0.2.10') + 7933), forwarding: 'l2' };
  const home = homeSlot(x, RANGE);
  // The last run had y at the home and x displaced (y came first): placed together, each gets its slot back.
  const remembered = new Map([
    [slotKeyText(y), home],
    [slotKeyText(x), home + 1],
  ]);
  for (const wanted of [
    [x, y],
    [y, x],
  ]) {
    const p = placeSlots(new Map(), wanted, RANGE, remembered);
    assert.equal(p.slots.get(slotKeyText(y)), home);
    assert.equal(p.slots.get(slotKeyText(x)), home + 1);
    assert.deepEqual(p.displaced, [{ key: x, home, slot: home + 1 }]);
  }
  // A key holding the remembered slot now keeps it; the remembered key goes by the fixed order.
  const held = placeSlots(new Map([[slotKeyText(x), home]]), [x, y], RANGE, remembered);
  assert.equal(held.slots.get(slotKeyText(x)), home);
  assert.equal(held.slots.get(slotKeyText(y)), home + 1);
  // A remembered slot outside the range is ignored.
  const out = placeSlots(new Map(), [x], RANGE, new Map([[slotKeyText(x), RANGE.max + 1]]));
  assert.equal(out.slots.get(slotKeyText(x)), home);
});

test('engines of one /24 never share a home across services whose ids lie within 10 of each other, either forwarding', () => {
  for (const ids of [
    [0, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60],
    [80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90],
    [0, 80, 90],
    [245, 255],
  ]) {
    for (const net of [toInt('192.0.2.0'), toInt('10.1.2.0'), 0xffffff00]) {
      const homes = new Set<number>();
      let n = 0;
      for (const serviceId of ids)
        for (const forwarding of ['l2', 'gre'] as const)
          for (let h = 0; h < 256; h++) {
            homes.add(homeSlot({ serviceId, engine: ip(net + h), forwarding }, RANGE));
            n++;
          }
      assert.equal(homes.size, n, `services ${ids.join(',')} on ${ip(net)}/24: ${n - homes.size} shared homes`);
    }
  }
});

test('the home depends on the service: one engine in two services gets two values (a mark names its service too)', () => {
  const e = '192.0.2.11';
  const homes = [0, 51, 80, 90].map((serviceId) => homeSlot({ serviceId, engine: e, forwarding: 'l2' }, RANGE));
  assert.equal(new Set(homes).size, 4);
  assert.deepEqual(parseSlotKey(slotKeyText({ serviceId: 90, engine: e, forwarding: 'gre' })), {
    serviceId: 90,
    engine: e,
    forwarding: 'gre',
  });
});
