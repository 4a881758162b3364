import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  bucketSetOf,
  bucketsInSet,
  countsByEngine,
  emptyTable,
  enginesInBucketOrder,
  fromAssignmentBuckets,
  movedBuckets,
  nextTable,
  toAssignmentBuckets,
  type EngineAddress,
} from '../../src/buckets/table.js';
import { BucketsError } from '../../src/buckets/errors.js';

const table = (f: (i: number) => EngineAddress | null) => ({
  changeNumber: 3,
  buckets: Array.from({ length: 256 }, (_, i) => f(i)),
});

test('counts, moved buckets and engine order', () => {
  const a = table((i) => (i < 100 ? '192.0.2.2' : i < 250 ? '192.0.2.1' : null));
  const b = table((i) => (i < 90 ? '192.0.2.2' : '192.0.2.1'));
  assert.deepEqual(Object.fromEntries(countsByEngine(a)), { '192.0.2.2': 100, '192.0.2.1': 150 });
  assert.deepEqual(movedBuckets(a, b), [90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 250, 251, 252, 253, 254, 255]);
  assert.deepEqual(enginesInBucketOrder(a), ['192.0.2.2', '192.0.2.1']);
  assert.deepEqual(movedBuckets(emptyTable(), emptyTable(9)), []);
});

test('nextTable: the previous table when no bucket moved, else the same buckets under the next change number (wrapping)', () => {
  const a = table((i) => (i < 128 ? '192.0.2.1' : '192.0.2.2'));
  const same = [...a.buckets];
  assert.equal(nextTable(a, same), a, 'an unchanged assignment keeps its change number');
  const b = nextTable(
    a,
    same.map((e, i) => (i === 0 ? '192.0.2.2' : e)),
  );
  assert.equal(b.changeNumber, 4);
  assert.deepEqual(movedBuckets(a, b), [0]);
  const last = { ...a, changeNumber: 0xffff_ffff };
  assert.equal(
    nextTable(last, emptyTable().buckets).changeNumber,
    0,
    'after 4,294,967,295 the change number wraps to 0',
  );
});

test('Bucket Block: bucket n is byte n>>3, bit 1<<(n&7), and decodes back', () => {
  const t = table((i) => (i === 0 || i === 9 || i === 255 ? '192.0.2.1' : '192.0.2.2'));
  const bits = bucketSetOf(t, '192.0.2.1');
  assert.equal(bits.length, 32);
  assert.equal(bits[0], 0x01);
  assert.equal(bits[1], 0x02);
  assert.equal(bits[31], 0x80);
  assert.equal(
    bits.reduce((s, b) => s + b, 0),
    0x83,
  );
  assert.deepEqual(bucketsInSet(bits), [0, 9, 255]);
  assert.throws(() => bucketsInSet(new Uint8Array(31)), BucketsError);
});

test('Assignment Info buckets: cache index, A flag, null = unassigned; round trip', () => {
  const t = table((i) => (i % 3 === 0 ? '192.0.2.7' : i % 3 === 1 ? '192.0.2.5' : null));
  const alternate = Array.from({ length: 256 }, (_, i) => i === 3);
  const info = toAssignmentBuckets(t, alternate);
  assert.deepEqual(info.engines, ['192.0.2.7', '192.0.2.5']);
  assert.deepEqual(info.buckets.slice(0, 6), [
    { cache: 0, alternate: false },
    { cache: 1, alternate: false },
    null,
    { cache: 0, alternate: true },
    { cache: 1, alternate: false },
    null,
  ]);
  const back = fromAssignmentBuckets(info, 3);
  assert.ok(back.ok);
  assert.deepEqual(back.table, t);
  assert.deepEqual(back.alternate, alternate);
  // An explicit engine list may name engines without buckets.
  assert.deepEqual(toAssignmentBuckets(t, undefined, ['192.0.2.9', '192.0.2.5', '192.0.2.7']).buckets[0], {
    cache: 2,
    alternate: false,
  });
});

test('bad Assignment Info is reported with the bucket, never guessed; >32 engines refused', () => {
  const buckets = new Array<{ cache: number; alternate: boolean } | null>(256).fill(null);
  buckets[17] = { cache: 2, alternate: true };
  const r = fromAssignmentBuckets({ engines: ['192.0.2.1', '192.0.2.2'], buckets }, 1);
  assert.equal(r.ok, false);
  if (!r.ok) {
    assert.equal(r.bucket, 17);
    assert.match(r.detail, /cache index 2/);
  }
  const many = table((i) => `192.0.2.${i % 33}`);
  assert.throws(
    () => toAssignmentBuckets(many),
    (e: unknown) => e instanceof BucketsError && e.reason === 'too-many-engines',
  );
});
