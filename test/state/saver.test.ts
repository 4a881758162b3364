// The state saver's boundary: gathering the state runs in a timer's callback, so a throw there must be counted and
// logged, never end wccpd; a save that cannot write is counted too.
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { StateSaver } from '../../src/state/persist.js';
import { loadState } from '../../src/state/index.js';
import { systemClock } from '../../src/clock.js';
import type { ServiceMemory } from '../../src/cluster/index.js';

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

function recordingLog() {
  const errors: string[] = [];
  const none = (): void => {};
  return { errors, log: { info: none, warn: none, debug: none, error: (_o: object, msg = '') => errors.push(msg) } };
}

const oneService: ServiceMemory = {
  id: 0,
  table: { changeNumber: 3, buckets: Array.from({ length: 256 }, () => null) },
  receiveId: 7,
  memberChangeNumber: 0,
  counters: {},
  adminDrained: [],
  adminWeights: [],
  engines: [],
} as unknown as ServiceMemory;

describe('StateSaver', () => {
  it('a throw while gathering the state is counted and logged, in save() and in a scheduled save', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'wccpd-saver-'));
    dirs.push(dir);
    const { errors, log } = recordingLog();
    let broken = true;
    const saver = new StateSaver({
      dir,
      clock: systemClock,
      log,
      memory: () => {
        if (broken) throw new RangeError('Invalid array length');
        return [oneService];
      },
    });
    await saver.save();
    assert.equal(saver.failures(), 1);
    saver.schedule();
    await sleep(400); // the debounce (250 ms) has fired; without the boundary it threw in its timer
    assert.equal(saver.failures(), 2);
    assert.deepEqual(errors, ['cannot save state: gathering it failed', 'cannot save state: gathering it failed']);
    // The next save after the fault writes the state.
    broken = false;
    await saver.save();
    assert.equal(saver.failures(), 2);
    const loaded = await loadState(dir);
    assert.equal(loaded.state.services[0]?.receiveId, 7);
  });

  it('a state directory that cannot be written is counted, and save() does not reject', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'wccpd-saver-'));
    dirs.push(dir);
    const file = join(dir, 'not-a-dir');
    await writeFile(file, 'x');
    const { errors, log } = recordingLog();
    const saver = new StateSaver({ dir: file, clock: systemClock, log, memory: () => [oneService] });
    await saver.save();
    assert.equal(saver.failures(), 1);
    assert.deepEqual(errors, ['cannot save state']);
  });
});
