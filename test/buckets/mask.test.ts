import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  SQUID_MASK,
  assignMask,
  emptyMaskTable,
  matchMask,
  maskValue,
  maskValueCount,
  squidMaskFor,
  toMaskValueSets,
  type MaskValueSet,
} from '../../src/buckets/mask.js';
import type { Member } from '../../src/buckets/assign.js';
import type { Flow } from '../../src/buckets/hash.js';

const engines = (n: number): Member[] =>
  Array.from({ length: n }, (_, i) => ({ address: `192.0.2.${i + 1}`, weight: 1, priority: 0 }));
const flowTo = (destinationIp: number): Flow => ({
  sourceIp: 0xc6336401,
  destinationIp,
  sourcePort: 40000,
  destinationPort: 80,
});

test("Squid's mask 0x1741 selects 64 distinct values, all inside the mask", () => {
  assert.equal(maskValueCount(SQUID_MASK), 64);
  const seen = new Set<number>();
  for (let i = 0; i < 64; i++) {
    const [src, dst, sport, dport] = maskValue(SQUID_MASK, i);
    assert.deepEqual([src, sport, dport], [0, 0, 0]);
    assert.equal(dst & ~0x1741, 0);
    seen.add(dst);
  }
  assert.equal(seen.size, 64);
});

test('mask values: weighted split and minimal movement, 4 -> 5 engines moves 12 of 64 (round-robin moves 48)', () => {
  const four = assignMask(emptyMaskTable(), engines(4), { mode: 'balance' });
  assert.ok(four.engines.every((e) => e !== null));
  const five = assignMask(four, engines(5), { mode: 'balance' });
  const moved = five.engines.filter((e, i) => e !== four.engines[i]).length;
  assert.equal(moved, 12); // 64/5 = 12.8: the newcomer takes 12 (floor), the ceilings stay with engines that hold them
  const counts = new Map<string, number>();
  for (const e of five.engines) if (e !== null) counts.set(e, (counts.get(e) ?? 0) + 1);
  assert.deepEqual([...counts.values()].sort(), [12, 13, 13, 13, 13]);
  const rr4 = assignMask(emptyMaskTable(), engines(4), { mode: 'round-robin' });
  const rr5 = assignMask(rr4, engines(5), { mode: 'round-robin' });
  // i % 4 === i % 5 only for i % 20 < 4: 16 of 64 stay
  assert.equal(rr5.engines.filter((e, i) => e !== rr4.engines[i]).length, 48);
  assert.equal(five.changeNumber, 2);
  assert.equal(assignMask(five, engines(5), { mode: 'balance' }), five);
});

test('matchMask sends each destination to the engine of its masked value; no match forwards normally', () => {
  const t = assignMask(emptyMaskTable(), engines(3), { mode: 'balance' });
  const sets = toMaskValueSets(t);
  let state = 12345;
  for (let n = 0; n < 2000; n++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    const dst = state;
    const index = t.engines.findIndex((_, i) => maskValue(SQUID_MASK, i)[1] === (dst & 0x1741) >>> 0);
    assert.equal(matchMask(sets, flowTo(dst)), t.engines[index]);
  }
  assert.equal(matchMask(toMaskValueSets(emptyMaskTable()), flowTo(0xcb007105)), null);
  assert.equal(matchMask([], flowTo(0xcb007105)), null);
});

test('matchMask: first matching value and first matching set win', () => {
  const mask = { sourceAddressMask: 0, destinationAddressMask: 0xff, sourcePortMask: 0, destinationPortMask: 0 };
  const v = (dst: number, engine: string) => ({
    sourceAddress: 0,
    destinationAddress: dst,
    sourcePort: 0,
    destinationPort: 0,
    engine,
  });
  const sets: MaskValueSet[] = [
    { mask, values: [v(5, '192.0.2.1'), v(5, '192.0.2.2')] },
    { mask: { ...mask, destinationAddressMask: 0 }, values: [v(0, '192.0.2.3')] },
  ];
  assert.equal(matchMask(sets, flowTo(0xcb007105)), '192.0.2.1');
  assert.equal(matchMask(sets, flowTo(0xcb007106)), '192.0.2.3');
  assert.equal(matchMask(sets.slice(0, 1), flowTo(0xcb007106)), null);
});

test("squidMaskFor: 0x1741 on the field Squid masks for the service's hash flags", () => {
  const only = (field: string) => ({
    sourceAddressMask: 0,
    destinationAddressMask: 0,
    sourcePortMask: 0,
    destinationPortMask: 0,
    [field]: 0x1741,
  });
  assert.deepEqual(squidMaskFor(0x0002 | 0x0010), only('destinationAddressMask'));
  assert.deepEqual(squidMaskFor(0x0001), only('sourceAddressMask'));
  assert.deepEqual(squidMaskFor(0x0100 | 0x0020), only('sourceAddressMask'));
  assert.deepEqual(squidMaskFor(0x0003), only('sourceAddressMask')); // Squid tests the source first
  assert.deepEqual(squidMaskFor(0x0004), only('sourcePortMask'));
  assert.deepEqual(squidMaskFor(0x0800), only('destinationPortMask'));
  assert.deepEqual(squidMaskFor(0), SQUID_MASK);
});
