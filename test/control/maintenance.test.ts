// The maintenance scheduler: finding a window already running (a restart inside it) by matching the cron text
// backwards, and the start/end/next it reports to the cluster, with a fake cron task and node:test's mocked timers.
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import { createTask } from 'node-cron';
import { MaintenanceScheduler, cronStepMs, runningSince } from '../../src/control/index.js';
import type { CronTask } from '../../src/control/index.js';
import type { MaintenanceWindowState } from '../../src/cluster/index.js';
import { recordingLog } from '../../src/log.js';

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
      clock: { now: () => now },
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
