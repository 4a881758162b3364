// What a claimed address may cost the broker (src/warmup/budget.ts), on a fake clock: DENIED replies per source and
// in all; a member's queries per second, and which of their outcomes count towards its warm-up.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ByteRate, MemberBudget, ReplyBudget } from '../../src/warmup/budget.js';
import { fakeClock } from '../cluster/helpers.js';

describe('warm-up broker budgets', () => {
  it('ReplyBudget: a burst per source and in all, refilled with time', () => {
    const clock = fakeClock(0);
    const b = new ReplyBudget(clock, 5, 8);
    const sent = (source: string, n: number) => Array.from({ length: n }, () => b.take(source)).filter(Boolean).length;
    assert.equal(sent('a', 10), 5, 'five to one source');
    assert.equal(sent('b', 10), 3, 'eight in all');
    clock.advance(200);
    assert.equal(sent('c', 10), 1, '8/s in all: one more after 200 ms');
    clock.advance(1000);
    assert.equal(sent('a', 10), 5);
  });

  /** One query from E at each given ms, each settled at once with its own number; what got recorded, in order. */
  function run(perSecond: number, plan: [at: number, queries: number][], until: number): number[] {
    const clock = fakeClock(0);
    const budget = new MemberBudget(clock, perSecond);
    const recorded: number[] = [];
    let n = 0;
    for (const [at, queries] of plan) {
      clock.advance(at - clock.now());
      for (let i = 0; i < queries; i++) {
        const id = n++;
        const t = budget.query('E');
        if (t.within) t.settle(() => recorded.push(id));
      }
      budget.sweep(() => true);
    }
    for (let at = clock.now(); at <= until; at += 250) {
      clock.advance(at - clock.now());
      budget.sweep(() => true);
    }
    return recorded;
  }

  it('MemberBudget: within the budget every outcome counts, once the second after it has closed', () => {
    const clock = fakeClock(0);
    const budget = new MemberBudget(clock, 10);
    const recorded: string[] = [];
    budget.query('E').settle(() => recorded.push('q'));
    budget.sweep(() => true);
    assert.deepEqual(recorded, [], 'held while its second runs');
    clock.advance(1000);
    budget.sweep(() => true);
    assert.deepEqual(recorded, [], 'and while the next one runs');
    clock.advance(1000);
    budget.sweep(() => true);
    assert.deepEqual(recorded, ['q']);
    assert.deepEqual(
      run(
        10,
        [
          [100, 10],
          [1100, 10],
          [2100, 10],
        ],
        5000,
      ).length,
      30,
    );
  });

  it('MemberBudget: a flood voids its seconds and the ones on either side; the budget answers the rest at once', () => {
    // 5 queries at 0.9 s (within), 50 at 1.0 s (over: 10 answered, 40 MISS at once), 5 at 2.5 s (the tail), 5 at 3.5 s.
    const recorded = run(
      10,
      [
        [900, 5],
        [1000, 50],
        [2500, 5],
        [3500, 5],
      ],
      7000,
    );
    assert.deepEqual(recorded, [60, 61, 62, 63, 64], 'only the queries a clean second after the flood count');
  });

  it('MemberBudget: forgets engines that left', () => {
    const clock = fakeClock(0);
    const budget = new MemberBudget(clock, 1);
    const recorded: string[] = [];
    budget.query('E').settle(() => recorded.push('q'));
    budget.sweep(() => false);
    clock.advance(3000);
    budget.sweep(() => true);
    assert.deepEqual(recorded, []);
  });

  it("ByteRate.readSize: a low rate reads a little at a time (its last read's debt is not waited for), no rate reads whole buffers", () => {
    const clock = fakeClock(0);
    const max = 256 * 1024;
    assert.equal(new ByteRate(clock, 0).readSize(max), max);
    assert.equal(new ByteRate(clock, 100_000_000).readSize(max), max);
    // 25 ms of 1 MB/s: a 2 MB relay ends at most 25 ms early, not a whole buffer's 260 ms.
    assert.equal(new ByteRate(clock, 1_000_000).readSize(max), 25_000);
    assert.equal(new ByteRate(clock, 10_000).readSize(max), 16 * 1024);
  });
});
