// A mask assignment service across a restart of wccpd, as an admin and the engines see it: the Mask/Value Sets in the
// API and in the I_SEE_YOU's Assignment Map are the same before and after, although the engines come back in another
// order (a fresh assignment would hand the values out by that order and move traffic), and the change number is never
// reused. A state file written before the values were persisted still loads. The clock is injected.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { recordingLog } from '../../src/log.js';
import { loadState, saveState, STATE_VERSION } from '../../src/state/index.js';
import { findComponent } from '../../src/wire/wccp2/index.js';
import type { BucketsView } from '../../src/admin/api-types.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { writeLoopbackConfig } from '../helpers/daemon.js';

const ENGINES = ['127.0.0.11', '127.0.0.12', '127.0.0.13'];
const MASK_CAPABLE = { forwarding: 0x2, assignment: 0x2, return: 0x2 };

async function setUp(): Promise<{ dir: string; udp: number; admin: number; configPath: string }> {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-mask-${process.pid}-`));
  const {
    path: configPath,
    udpPort: udp,
    httpPort: admin,
  } = await writeLoopbackConfig(dir, {
    hereIAm: '1s',
    settle: '0ms',
    service: ['assignment: mask'],
    lenientReceiveId: 0,
  });
  return { dir, udp, admin, configPath };
}

/** Which engine each masked value names, as a list of "value engine" (the Assignment Map or the API's sets). */
function valuesOf(sets: readonly { values: readonly { engine?: string; webCache?: string }[] }[]): string[] {
  return sets.flatMap((s) => s.values.map((v, i) => `${i} ${v.engine ?? v.webCache ?? '?'}`));
}

test('a mask service keeps its Mask/Value Sets across a restart, whatever order the engines come back in', async () => {
  const { dir, udp, admin, configPath } = await setUp();
  let now = 1_000_000;
  const clock = { now: () => now, wall: () => now };
  const api = async () =>
    (await (await fetch(`http://127.0.0.1:${admin}/api/v1/services/0/buckets`)).json()) as BucketsView;
  const engines = new Map<string, TestEngine>();
  /** One engine's full handshake (HERE_I_AM, I_SEE_YOU, HERE_I_AM echoing it): what it was told last. */
  const handshake = async (address: string) => {
    const e = engines.get(address) as TestEngine;
    assert.ok(await e.hereIAm({ timeoutMs: 2000 }), `I_SEE_YOU to ${address}`);
    const seen = await e.hereIAm({ timeoutMs: 2000 });
    assert.ok(seen, `second I_SEE_YOU to ${address}`);
    now += 200;
    return seen.message;
  };
  let daemon = new Daemon({ config: await loadConfig(configPath), log: recordingLog(), clock });
  try {
    for (const address of ENGINES) {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udp }, capabilities: MASK_CAPABLE });
      await e.start();
      engines.set(address, e);
    }
    await daemon.start();
    for (const address of ENGINES) await handshake(address);
    const before = await api();
    assert.ok(before.mask !== null && before.mask !== undefined);
    const valuesBefore = valuesOf(before.mask);
    assert.equal(valuesBefore.length, 64);
    assert.deepEqual(new Set(valuesBefore.map((v) => v.split(' ')[1])), new Set(ENGINES), 'all three hold values');
    await daemon.stop();
    const saved = (await loadState(join(dir, 'state'))).state.services[0];
    assert.equal(saved?.mask?.engines.filter((e) => e !== null).length, 64, 'the state file holds the values');

    now += 5000;
    daemon = new Daemon({ config: await loadConfig(configPath), log: recordingLog(), clock });
    await daemon.start();
    // They come back in reverse order; what the last one is told once all three are back:
    let told = null;
    for (const address of [...ENGINES].reverse()) told = await handshake(address);
    const map = told === null ? undefined : findComponent(told, 'assignment-map');
    const view = told === null ? undefined : findComponent(told, 'router-view');
    assert.ok(map && view);
    assert.deepEqual(valuesOf(map.sets), valuesBefore, 'the Assignment Map the engines are sent');
    const after = await api();
    assert.deepEqual(valuesOf(after.mask ?? []), valuesBefore, 'the Mask/Value Sets in the API');
    assert.deepEqual(after.buckets, before.buckets, 'and the bucket table');
    assert.ok(
      view.assignmentKey.changeNumber > before.changeNumber,
      `change number ${view.assignmentKey.changeNumber} after the restart, ${before.changeNumber} before: never reused`,
    );
  } finally {
    for (const e of engines.values()) await e.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a state file written before mask values were persisted still loads: the buckets come back, values anew', async () => {
  const { dir, udp, admin, configPath } = await setUp();
  const persisted = Array.from({ length: 256 }, (_, b) => ENGINES[b % 2] ?? null);
  await saveState(join(dir, 'state'), {
    version: STATE_VERSION,
    savedAt: 1,
    services: [
      {
        id: 0,
        table: { changeNumber: 9, buckets: persisted },
        counters: {},
        receiveId: 7,
        engines: ENGINES.slice(0, 2).map((address) => ({
          address,
          weight: 0,
          lastState: 'usable',
          leftAt: null,
          historicalBuckets: [],
        })),
      },
    ],
  });
  const log = recordingLog();
  const daemon = new Daemon({
    config: await loadConfig(configPath),
    log,
    clock: { now: () => 1_000_000, wall: () => 1_000_000 },
  });
  const engines: TestEngine[] = [];
  try {
    await daemon.start();
    // The config's own warnings (backend none) are check-config's; this asks about the state file.
    const configWarning = (obj: object) => 'key' in obj;
    assert.deepEqual(
      log.lines.filter((l) => l.level !== 'info' && !configWarning(l.obj)).map((l) => l.msg),
      [],
      'no complaint about the state file',
    );
    for (const address of ENGINES.slice(0, 2)) {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udp }, capabilities: MASK_CAPABLE });
      await e.start();
      engines.push(e);
      assert.ok(await e.hereIAm({ timeoutMs: 2000 }));
      assert.ok(await e.hereIAm({ timeoutMs: 2000 }));
    }
    const view = (await (await fetch(`http://127.0.0.1:${admin}/api/v1/services/0/buckets`)).json()) as BucketsView;
    assert.deepEqual(view.buckets, persisted);
    assert.ok(view.changeNumber > 9);
    assert.deepEqual(
      new Set(valuesOf(view.mask ?? []).map((v) => v.split(' ')[1])),
      new Set(ENGINES.slice(0, 2)),
      'both engines hold mask values',
    );
    assert.equal(valuesOf(view.mask ?? []).length, 64);
  } finally {
    for (const e of engines) await e.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
