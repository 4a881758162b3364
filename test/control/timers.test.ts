// The cluster timers' boundary: a tick that throws is counted and logged, and retried after a backoff instead of
// ending wccpd (an uncaught exception in a timer) or spinning on the due time that made it throw.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { ClusterTimers } from '../../src/control/timers.js';
import type { Cluster } from '../../src/cluster/index.js';
import { systemClock } from '../../src/clock.js';

function recordingLog() {
  const lines: { level: string; msg: string; obj: object }[] = [];
  const at =
    (level: string) =>
    (obj: object, msg = ''): void => {
      lines.push({ level, msg, obj });
    };
  return { lines, log: { info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug') } };
}

/** A cluster double whose due time is `due()` and whose tick runs `tick()`. */
function clusterWith(due: () => number | null, tick: () => void): Cluster {
  return {
    nextDue: due,
    tick: () => {
      tick();
      return [];
    },
  } as unknown as Cluster;
}

describe('ClusterTimers', () => {
  it('a tick that always throws is counted, logged once, and retried with a backoff, not in a loop', async () => {
    const { lines, log } = recordingLog();
    let ticks = 0;
    const cluster = clusterWith(
      () => systemClock.now(),
      () => {
        ticks++;
        throw new TypeError("Cannot read properties of undefined (reading 'state')");
      },
    );
    const timers = new ClusterTimers(cluster, systemClock, () => {}, log);
    timers.start();
    await sleep(1_500);
    timers.stop();
    // Fired at once, then after 1 s; a re-arm for the (still due) due time alone would have ticked thousands of times.
    assert.ok(ticks >= 2 && ticks <= 3, `ticks ${ticks}`);
    assert.equal(timers.tickErrors(), ticks);
    const warned = lines.filter((l) => l.level === 'warn');
    assert.equal(warned.length, 1, JSON.stringify(lines));
    assert.match(
      warned[0]!.msg,
      /cluster timers: a tick failed \(Cannot read properties of undefined.*next try in 1000 ms/,
    );
  });

  it('after a failed tick the next one that succeeds brings back the normal cadence', async () => {
    const { log } = recordingLog();
    let ticks = 0;
    let nextAt = systemClock.now();
    const cluster = clusterWith(
      () => nextAt,
      () => {
        ticks++;
        if (ticks === 1) throw new Error('once');
        nextAt = systemClock.now() + 20;
      },
    );
    const timers = new ClusterTimers(cluster, systemClock, () => {}, log);
    timers.start();
    await sleep(1_600);
    timers.stop();
    assert.equal(timers.tickErrors(), 1);
    // One failure, the retry 1 s later, then a tick every ~20 ms for the last ~0.6 s.
    assert.ok(ticks >= 10, `ticks ${ticks}`);
  });

  it('activity re-arming during the backoff does not bring the retry forward', async () => {
    const { log } = recordingLog();
    let ticks = 0;
    const cluster = clusterWith(
      () => systemClock.now(),
      () => {
        ticks++;
        throw new Error('still broken');
      },
    );
    const timers = new ClusterTimers(cluster, systemClock, () => {}, log);
    timers.start();
    const until = systemClock.now() + 600;
    while (systemClock.now() < until) {
      timers.rearm(); // what every HERE_I_AM does (router onActivity)
      await sleep(5);
    }
    timers.stop();
    assert.equal(ticks, 1);
  });
});
