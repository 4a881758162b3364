// healTable: a gone engine's buckets go to the survivors, fewest first; nothing else moves.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { healTable } from '../../src/buckets/heal.js';
import {
  bucketsOf,
  countsByEngine,
  movedBuckets,
  nextChangeNumber,
  type BucketTable,
} from '../../src/buckets/table.js';

const A = '192.0.2.11';
const B = '192.0.2.12';
const C = '192.0.2.13';

const table = (changeNumber: number, owner: (i: number) => string | null): BucketTable => ({
  changeNumber,
  buckets: Array.from({ length: 256 }, (_, i) => owner(i)),
});

test('nextChangeNumber counts up and wraps at 2^32 (a 32-bit field on the wire)', () => {
  assert.equal(nextChangeNumber(0), 1);
  assert.equal(nextChangeNumber(41), 42);
  assert.equal(nextChangeNumber(0xfffffffe), 0xffffffff);
  assert.equal(nextChangeNumber(0xffffffff), 0);
});

test("a gone engine's buckets go to the survivors, fewest first; the others stay", () => {
  // A holds 0-127, B 128-191, C 192-255: C goes; B has fewer, so it is filled up to A before they alternate.
  const before = table(7, (i) => (i < 128 ? A : i < 192 ? B : C));
  const after = healTable(before, [A, B]);
  assert.deepEqual(movedBuckets(before, after), bucketsOf(before, C));
  assert.deepEqual(Object.fromEntries(countsByEngine(after)), { [A]: 128, [B]: 128 });
  assert.equal(after.changeNumber, 8);
  // Nothing to heal: the same table and change number.
  assert.deepEqual(healTable(after, [A, B]), after);
  // No survivor: every bucket unassigned.
  assert.deepEqual(healTable(before, []).buckets, new Array(256).fill(null));
});

test('a heal at change number 4294967295 gives 0, not 2^32', () => {
  const before = table(0xffffffff, (i) => (i % 2 === 0 ? A : B));
  assert.equal(healTable(before, [A]).changeNumber, 0);
});
