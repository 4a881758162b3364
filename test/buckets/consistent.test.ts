// mode consistent: the table is a function of the members and their weights alone, so two gateways that saw the same
// engines join and leave in different orders (and hold different previous tables) publish the same table.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { assignBuckets, type Member } from '../../src/buckets/assign.js';
import { assignMask, emptyMaskTable } from '../../src/buckets/mask.js';
import { emptyTable, movedBuckets, type BucketTable, type EngineAddress } from '../../src/buckets/table.js';
import { BucketsError } from '../../src/buckets/errors.js';

const consistent = { mode: 'consistent' } as const;
const POOL = Array.from({ length: 40 }, (_, i) => (i < 20 ? `192.0.2.${10 + i * 7}` : `198.51.100.${i * 3}`));
const weightArb = fc.oneof(fc.constantFrom(0, 1, 1, 1, 2, 3, 10), fc.integer({ min: 0, max: 65535 }));

// A set of members: distinct addresses from the pool, with weights.
const membersArb = fc
  .uniqueArray(fc.integer({ min: 0, max: POOL.length - 1 }), { minLength: 0, maxLength: 32 })
  .chain((picks) =>
    fc
      .tuple(...picks.map(() => weightArb))
      .map((weights) =>
        picks.map((p, i): Member => ({ address: POOL[p] as string, weight: weights[i] as number, priority: 0 })),
      ),
  );

// Whatever a gateway may carry besides address and weight: a history, a priority, when it became usable.
const extrasArb = fc.record({
  history: fc.option(fc.uniqueArray(fc.integer({ min: 0, max: 255 }), { maxLength: 64 }), { nil: undefined }),
  priority: fc.integer({ min: -5, max: 5 }),
  usableSince: fc.option(fc.nat(), { nil: undefined }),
});

const previousArb: fc.Arbitrary<BucketTable> = fc.record({
  changeNumber: fc.nat(),
  buckets: fc.array(fc.option(fc.constantFrom(...POOL), { nil: null }), { minLength: 256, maxLength: 256 }),
});

function counts(buckets: ReadonlyArray<EngineAddress | null>): Map<EngineAddress, number> {
  const m = new Map<EngineAddress, number>();
  for (const e of buckets) if (e !== null) m.set(e, (m.get(e) ?? 0) + 1);
  return m;
}

function checkShares(slots: ReadonlyArray<EngineAddress | null>, members: readonly Member[]): void {
  if (members.length === 0) {
    assert.ok(
      slots.every((e) => e === null),
      'no members: every slot unassigned',
    );
    return;
  }
  assert.ok(
    slots.every((e) => e !== null),
    'every slot assigned',
  );
  const held = counts(slots);
  const anyWeight = members.some((m) => m.weight > 0);
  const w = (m: Member): number => (anyWeight ? m.weight : 1);
  const total = members.reduce((s, m) => s + w(m), 0);
  for (const m of members) {
    const c = held.get(m.address) ?? 0;
    // |c - n w / W| < 1, in integers
    assert.ok(
      Math.abs(c * total - slots.length * w(m)) < total,
      `${m.address} holds ${c} of ${slots.length}, share ${(slots.length * w(m)) / total}`,
    );
  }
  for (const e of held.keys())
    assert.ok(
      members.some((m) => m.address === e),
      `${e} is not a member`,
    );
}

test('consistent: any permutation of the members and any history give the same table, within one bucket of the shares', () => {
  let nonEmpty = 0;
  fc.assert(
    fc.property(
      membersArb,
      fc.array(extrasArb, { minLength: 32, maxLength: 32 }),
      previousArb,
      fc.nat(),
      (members, extras, previous, seed) => {
        const reference = assignBuckets(emptyTable(), members, consistent);
        checkShares(reference.buckets, members);
        if (members.length > 0) nonEmpty++;
        // Another gateway: the members in another order, each with whatever history it carries there, and another
        // previous table.
        const order =
          fc.sample(fc.shuffledSubarray(members, { minLength: members.length, maxLength: members.length }), {
            seed,
            numRuns: 1,
          })[0] ?? [];
        const elsewhere = order.map((m, i) => ({ ...m, ...extras[i], weight: m.weight }));
        const other = assignBuckets(previous, elsewhere, { ...consistent, now: seed, failbackHoldMs: 1000 });
        assert.deepEqual(other.buckets, reference.buckets);
        // Mask values follow the same rule.
        const mask = assignMask(emptyMaskTable(), members, consistent);
        checkShares(mask.engines, members);
        assert.deepEqual(assignMask(emptyMaskTable(), elsewhere, consistent).engines, mask.engines);
      },
    ),
    { seed: 1313, numRuns: 300 },
  );
  assert.ok(nonEmpty > 250, `exercised ${nonEmpty} non-empty groups`);
});

test('consistent: two gateways applying the same changes in different orders publish the same table at every point they agree on members', () => {
  fc.assert(
    fc.property(fc.array(fc.tuple(membersArb, fc.nat()), { minLength: 2, maxLength: 8 }), (goals) => {
      // Each gateway walks from one membership to the next through its own intermediate states (one engine at a
      // time, in its own order); their tables must meet whenever the memberships meet.
      let a: BucketTable = emptyTable();
      let b: BucketTable = emptyTable();
      let current: Member[] = [];
      for (const [goal, seed] of goals) {
        const steps = [
          ...goal.filter((m) => !current.some((c) => c.address === m.address)),
          ...current.filter((c) => !goal.some((m) => m.address === c.address)),
        ];
        const shuffled =
          fc.sample(fc.shuffledSubarray(steps, { minLength: steps.length, maxLength: steps.length }), {
            seed,
            numRuns: 1,
          })[0] ?? [];
        let forA = current;
        for (const m of steps) {
          forA = forA.some((c) => c.address === m.address) ? forA.filter((c) => c.address !== m.address) : [...forA, m];
          a = assignBuckets(a, forA, consistent);
        }
        let forB = current;
        for (const m of shuffled) {
          forB = forB.some((c) => c.address === m.address) ? forB.filter((c) => c.address !== m.address) : [...forB, m];
          b = assignBuckets(b, forB, consistent);
        }
        // Weights as the goal says (a weight change is the last step on both).
        a = assignBuckets(a, goal, consistent);
        b = assignBuckets(b, [...goal].reverse(), consistent);
        assert.deepEqual(a.buckets, b.buckets);
        current = goal;
      }
    }),
    { seed: 99, numRuns: 100 },
  );
});

test('consistent: the change number advances only when a bucket moves, and a removal frees only what it must plus a bounded few', () => {
  const engines = (n: number): Member[] => POOL.slice(0, n).map((address) => ({ address, weight: 1, priority: 0 }));
  const four = assignBuckets(emptyTable(7), engines(4), consistent);
  assert.equal(four.changeNumber, 8);
  assert.equal(
    assignBuckets(four, [...engines(4)].reverse(), consistent),
    four,
    'same members: the same table, same change number',
  );
  // Removing one of 4: its 64 buckets must move; the others keep all but a few of theirs.
  const three = assignBuckets(
    four,
    engines(4).filter((_, i) => i !== 1),
    consistent,
  );
  const moved = movedBuckets(four, three);
  const gone = POOL[1] as string;
  assert.ok(
    four.buckets.every((e, i) => e !== gone || moved.includes(i)),
    'every bucket of the removed engine moved',
  );
  assert.ok(moved.length >= 64 && moved.length < 64 + 32, `moved ${moved.length} (64 must move)`);
  // And it comes back: exactly the table it had, whatever happened in between.
  const between = assignBuckets(three, engines(6), consistent);
  assert.deepEqual(assignBuckets(between, engines(4), consistent).buckets, four.buckets);
});

test('consistent: weight 0 engines are standbys; bad members are refused as in every mode', () => {
  const t = assignBuckets(
    emptyTable(),
    [
      { address: '192.0.2.10', weight: 3, priority: 0 },
      { address: '192.0.2.11', weight: 1, priority: 0 },
      { address: '192.0.2.12', weight: 0, priority: 0 },
    ],
    consistent,
  );
  const c = counts(t.buckets);
  assert.deepEqual([c.get('192.0.2.10'), c.get('192.0.2.11'), c.get('192.0.2.12')], [192, 64, undefined]);
  assert.throws(
    () =>
      assignBuckets(
        emptyTable(),
        [
          { address: '192.0.2.10', weight: 1, priority: 0 },
          { address: '192.0.2.10', weight: 2, priority: 0 },
        ],
        consistent,
      ),
    (e: unknown) => e instanceof BucketsError && e.reason === 'duplicate-engine',
  );
});

// The scores are a contract between gateways (and between wccpd versions on two gateways of one pair): the same
// members must give the same table in another process, and this known table catches an accidental change of the
// scoring (docs/buckets.md says such a change is a breaking one).
test('consistent: another Node process computes the same table, and the scoring has not changed', () => {
  const members: Member[] = ['192.0.2.30', '198.51.100.7', '192.0.2.4'].map((address, i) => ({
    address,
    weight: i + 1,
    priority: 0,
  }));
  const here = assignBuckets(emptyTable(), members, consistent).buckets;
  const script = `
    import { assignBuckets } from './src/buckets/assign.js';
    import { emptyTable } from './src/buckets/table.js';
    const members = ${JSON.stringify([...members].reverse())};
    process.stdout.write(JSON.stringify(assignBuckets(emptyTable(), members, { mode: 'consistent' }).buckets));`;
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 60_000,
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
  });
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout) as unknown, here);
  const letter = (e: EngineAddress | null): string =>
    e === null ? '-' : String(members.findIndex((m) => m.address === e));
  assert.equal(here.slice(0, 32).map(letter).join(''), GOLDEN_FIRST_32);
});

const GOLDEN_FIRST_32 = '11221011201021122021022222221112';
