// The maintenance scheduler: finding a window already running (a restart inside it) by matching the cron text
// backwards, and the start/end/next it reports to the cluster, with a fake cron task and node:test's mocked timers.
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import { createTask } from 'node-cron';
import { MaintenanceScheduler, cronStepMs, runningSince } from '../../src/control/index.js';
import type { CronTask } from '../../src/control/index.js';
import type { MaintenanceWindowState } from '../../src/cluster/index.js';
import { recordingLog } from '../../src/log.js';
import { fakeClock } from '../cluster/helpers.js';

const MIN = 60_000;
const HOUR = 60 * MIN;

test("runningSince: the latest match within one duration before now, by node-cron's own matcher; bounded", () => {
  const task = createTask('0 2 * * sun', () => {}, { timezone: 'UTC' });
  try {
    const match = (d: Date) => task.match(d);
    const sunday2 = Date.UTC(2026, 10, 29, 2, 0, 0); // Sunday 29 November 2026, 02:00 UTC
    assert.equal(
      runningSince(match, sunday2 + 30 * MIN, HOUR, cronStepMs('0 2 * * sun')),
      sunday2,
      'inside the window',
    );
    assert.equal(runningSince(match, sunday2 + HOUR, HOUR, 60_000), null, 'the window is over at its end');
    assert.equal(runningSince(match, sunday2 - MIN, HOUR, 60_000), null, 'not yet');
    let calls = 0;
    assert.equal(
      runningSince(
        (d) => {
          calls++;
          return match(d);
        },
        sunday2 + 3 * 24 * HOUR,
        7 * 24 * HOUR,
        60_000,
      ),
      sunday2,
    );
    assert.ok(calls <= 7 * 24 * 60, `${calls} checks for a week of minutes`);
  } finally {
    void task.destroy();
  }
  assert.equal(cronStepMs('*/5 * * * * *'), 1000);
});

/** A cron task that matches the given times and fires when told. */
function fakeCron(
  starts: number[],
  now: () => number,
): { factory: (c: string, fire: () => void) => CronTask; fire(): void } {
  let onFire = () => {};
  return {
    factory: (_c, fire) => {
      onFire = fire;
      return {
        match: (d) => starts.includes(d.getTime()),
        getNextRun: () => {
          const n = starts.find((s) => s > now());
          return n === undefined ? null : new Date(n);
        },
        start: () => {},
        destroy: () => {},
      };
    },
    fire: () => onFire(),
  };
}

test('scheduler: a window running at start is honoured until its end; a cron fire starts the next; each end is timed', () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    let now = Date.UTC(2026, 11, 1, 2, 30, 0);
    const first = Date.UTC(2026, 11, 1, 2, 0, 0);
    const second = first + 24 * HOUR;
    const cron = fakeCron([first, second], () => now);
    const seen: MaintenanceWindowState[] = [];
    const s = new MaintenanceScheduler({
      cluster: { setMaintenance: (st) => seen.push({ ...st }) },
      clock: { now: () => now, wall: () => now },
      log: recordingLog(),
      cron: cron.factory,
      windows: [{ key: '0/0', service: 0, engine: '192.0.2.12', cron: '0 2 * * *', durationMs: HOUR, timezone: null }],
    });
    s.start();
    assert.deepEqual(
      seen.map((x) => [x.activeUntil, x.next]),
      [[first + HOUR, second]],
      'restarted at 02:30 inside a 02:00 + 1h window',
    );
    now += 30 * MIN;
    mock.timers.tick(30 * MIN);
    assert.deepEqual(seen.at(-1) && [seen.at(-1)?.activeUntil, seen.at(-1)?.next], [null, second], 'over at 03:00');
    now = second;
    cron.fire();
    assert.deepEqual(seen.at(-1) && [seen.at(-1)?.activeUntil, seen.at(-1)?.next], [second + HOUR, null]);
    now += HOUR;
    mock.timers.tick(24 * HOUR);
    assert.equal(seen.at(-1)?.activeUntil, null);
    s.stop();
  } finally {
    mock.timers.reset();
  }
});

test('scheduler: the wall clock stepped inside a window neither stretches nor shortens it; the views show its end by the clock', () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    // A monotonic clock far from the wall clock, as in a real process.
    const clock = fakeClock(5_000, Date.UTC(2026, 11, 1, 2, 30, 0));
    const first = Date.UTC(2026, 11, 1, 2, 0, 0);
    const second = first + 24 * HOUR;
    const cron = fakeCron([first, second], () => clock.wall());
    const seen: MaintenanceWindowState[] = [];
    const s = new MaintenanceScheduler({
      cluster: { setMaintenance: (st) => seen.push({ ...st }) },
      clock,
      log: recordingLog(),
      cron: cron.factory,
      windows: [{ key: '0/0', service: 0, engine: null, cron: '0 2 * * *', durationMs: HOUR, timezone: null }],
    });
    s.start();
    assert.deepEqual(seen.at(-1) && [seen.at(-1)?.activeUntil, seen.at(-1)?.next], [first + HOUR, second]);
    clock.stepWall(2 * HOUR);
    clock.advance(29 * MIN);
    mock.timers.tick(29 * MIN);
    assert.equal(seen.length, 1, 'set 2 h forward: still running, 1 min to go');
    clock.advance(MIN);
    mock.timers.tick(MIN);
    assert.equal(seen.at(-1)?.activeUntil, null, 'over after its hour');
    clock.stepWall(second - clock.wall());
    cron.fire();
    assert.equal(seen.at(-1)?.activeUntil, second + HOUR);
    clock.stepWall(-3 * HOUR);
    clock.advance(30 * MIN);
    mock.timers.tick(30 * MIN);
    assert.notEqual(seen.at(-1)?.activeUntil, null, 'set 3 h back: still running, not for 3 h more');
    clock.advance(30 * MIN);
    mock.timers.tick(30 * MIN);
    assert.equal(seen.at(-1)?.activeUntil, null, 'over after its hour');
    s.stop();
  } finally {
    mock.timers.reset();
  }
});
