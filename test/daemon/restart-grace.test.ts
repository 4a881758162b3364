// A restart whose data plane is slow to load must not eat the restart grace time: the persisted table is the one
// engines come back to even when they return in another order after the data plane took longer than the grace time
// (3 x HERE_I_AM_T) to start. The clock is injected; the "slow" data plane advances it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import { recordingLog } from '../../src/log.js';
import { saveState, STATE_VERSION } from '../../src/state/index.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { writeLoopbackConfig } from '../helpers/daemon.js';

const ENGINES = ['127.0.0.11', '127.0.0.12', '127.0.0.13'];

test('engines returning in another order after a data plane start longer than the grace time get the persisted table', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-grace-${process.pid}-`));
  const {
    path: configPath,
    udpPort: udp,
    stateDir,
  } = await writeLoopbackConfig(dir, { hereIAm: '1s', lenientReceiveId: 0 });
  // A history-shaped table (not what any fresh assignment of three engines gives): runs of 86/85/85, engine 3 first.
  const persisted = Array.from(
    { length: 256 },
    (_, b) => (b < 86 ? ENGINES[2] : b < 171 ? ENGINES[0] : ENGINES[1]) ?? null,
  );
  await saveState(stateDir, {
    version: STATE_VERSION,
    savedAt: 1,
    services: [
      {
        id: 0,
        table: { changeNumber: 3, buckets: persisted },
        counters: {},
        receiveId: 7,
        engines: ENGINES.map((address) => ({
          address,
          weight: 0,
          lastState: 'usable',
          leftAt: null,
          historicalBuckets: [],
        })),
      },
    ],
  });
  let now = 1_000_000;
  const memory = new MemoryRedirector();
  // The data plane takes 5 s (more than 3 x 1 s) to start, as the nft maps once did.
  const slow = Object.assign(Object.create(memory) as MemoryRedirector, {
    start: async () => {
      now += 5000;
      await memory.start();
    },
  });
  const daemon = new Daemon({
    config: await loadConfig(configPath),
    log: recordingLog(),
    clock: { now: () => now, wall: () => now },
    redirector: slow,
  });
  const engines: TestEngine[] = [];
  try {
    await daemon.start();
    // They come back in reverse order, each fully (HERE_I_AM, I_SEE_YOU, HERE_I_AM echoing the Receive ID).
    for (const address of [...ENGINES].reverse()) {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udp } });
      await e.start();
      engines.push(e);
      assert.ok(await e.hereIAm({ timeoutMs: 2000 }), `I_SEE_YOU to ${address}`);
      assert.ok(await e.hereIAm({ timeoutMs: 2000 }), `second I_SEE_YOU to ${address}`);
      now += 200;
    }
    const snap = daemon.cluster.service(0);
    assert.deepEqual(
      snap?.engines.map((e) => e.state),
      ['usable', 'usable', 'usable'],
    );
    const moved = (snap?.buckets ?? []).filter((b, i) => b !== persisted[i]).length;
    assert.equal(moved, 0, `${moved} buckets differ from the persisted table`);
  } finally {
    for (const e of engines) await e.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
