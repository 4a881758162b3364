// A weight set by an admin, as an admin sees it, on the real daemon: it is saved at once (also when it moves no
// bucket), it stays while the engine is gone and when it comes back, and across a daemon restart: the next table
// change after the restart is computed with it, not with the engine's announced weight.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startDaemon, TOKEN, waitFor, wccpctl, type RunningDaemon } from '../helpers/daemon.js';
import { keepTalking, TestEngine } from '../helpers/wccp-engine.js';
import { loadState } from '../../src/state/index.js';
import type { EnginesView } from '../../src/admin/api-types.js';

const E1 = '127.0.0.11';
const E2 = '127.0.0.12';

test('an admin weight survives the engine going gone and coming back, and a daemon restart', async () => {
  let daemon: RunningDaemon = await startDaemon([], { hereIAm: '1s' });
  const router = () => ({ address: '127.0.0.1', port: daemon.udpPort });
  const engines = new Map<string, TestEngine>();
  const talking = new Set([E1, E2]);
  // Each engine announces itself (Assignment Weight 10000) every 300 ms while it is `talking`.
  let heartbeat = keepTalking(engines, talking);
  const view = async () => (await (await fetch(`${daemon.url}/api/v1/services/0/engines`)).json()) as EnginesView;
  const of = async (a: string) => (await view()).engines.find((e) => e.address === a);
  const weight = async (a: string, w: number) => {
    const r = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'weight', a, String(w)]);
    assert.equal(r.code, 0, r.stderr);
  };
  try {
    for (const address of [E1, E2]) {
      const e = new TestEngine({ address, router: router() });
      await e.start();
      engines.set(address, e);
    }
    await waitFor('both engines usable', async () =>
      (await view()).engines.filter((e) => e.state === 'usable').length === 2 ? true : null,
    );

    await weight(E1, 30_000);
    await waitFor('E1 at three times E2', async () => ((await of(E1))?.buckets === 192 ? true : null));
    const line = (await wccpctl(['--url', daemon.url, 'engines'])).stdout.split('\n').find((l) => l.includes(E1));
    assert.match(line ?? '', /30000.*weight set by admin/);

    // A weight that moves no bucket (E2 drained) is saved too, without waiting for another change.
    const drained = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'drain', E2]);
    assert.equal(drained.code, 0, drained.stderr);
    await waitFor('E2 draining', async () => ((await of(E2))?.state === 'draining' ? true : null));
    await weight(E2, 5000);
    const saved = await waitFor('the weights in the state file', async () => {
      const s = (await loadState(join(daemon.dir, 'state'))).state.services[0];
      return s?.adminWeights?.length === 2 ? s.adminWeights : null;
    });
    assert.deepEqual(
      saved.map((w) => [w.address, w.weight, w.leftAt]),
      [
        [E1, 30_000, null],
        [E2, 5000, null],
      ],
    );

    // E1 reboots: silent for longer than 3 x HERE_I_AM_T, then back with its weight.
    talking.delete(E1);
    await waitFor('E1 gone', async () => ((await of(E1)) === undefined ? true : null), 10_000);
    talking.add(E1);
    await waitFor('E1 back', async () => ((await of(E1))?.state === 'usable' ? true : null), 10_000);
    assert.deepEqual([(await of(E1))?.weight, (await of(E1))?.flags.weightOverride], [30_000, true]);

    // The daemon restarts; the engines keep talking to it.
    await heartbeat.stop();
    assert.equal(await daemon.terminate(), 0);
    daemon = await daemon.restart();
    heartbeat = keepTalking(engines, talking);
    await waitFor(
      'both back after the restart',
      async () => ((await of(E1))?.state === 'usable' && (await of(E2))?.state === 'draining' ? true : null),
      10_000,
    );
    assert.deepEqual(
      [(await of(E1))?.weight, (await of(E1))?.flags.weightOverride, (await of(E2))?.weight],
      [30_000, true, 5000],
    );
    // The next change is computed with both weights: E2 undrained takes 30000:5000 of the table, not half of it.
    const undrained = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'undrain', E2]);
    assert.equal(undrained.code, 0, undrained.stderr);
    await waitFor('E2 with its weighted share', async () => ((await of(E2))?.state === 'usable' ? true : null));
    // 256 x 5000 / 35000 = 36.6: the floor or the ceiling of that share (half the table without the weights).
    const [b1, b2] = [(await of(E1))?.buckets ?? 0, (await of(E2))?.buckets ?? 0];
    assert.ok(b1 + b2 === 256 && (b2 === 36 || b2 === 37), `E1 ${b1}, E2 ${b2} buckets`);

    // The admin hands E1 its own weight back: announced 10000 against E2's 5000, and gone from the state file.
    const cleared = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'weight', E1, 'clear']);
    assert.equal(cleared.code, 0, cleared.stderr);
    assert.match(cleared.stdout, /admin weight cleared/);
    await waitFor('E1 at its own weight', async () => ((await of(E1))?.flags.weightOverride === false ? true : null));
    assert.deepEqual([(await of(E1))?.weight, (await of(E2))?.weight], [10_000, 5000]);
    // 256 x 5000 / 15000 = 85.3: E2's share grows to a third.
    await waitFor('E2 with a third of the table', async () => {
      const n = (await of(E2))?.buckets ?? 0;
      return n === 85 || n === 86 ? true : null;
    });
    const left = await waitFor('only E2 weighted in the state file', async () => {
      const w = (await loadState(join(daemon.dir, 'state'))).state.services[0]?.adminWeights ?? [];
      return w.length === 1 ? w : null;
    });
    assert.deepEqual(
      left.map((w) => [w.address, w.weight]),
      [[E2, 5000]],
    );
    const bad = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'weight', E1, 'none']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /expected a weight 0-65535 or "clear", got none/);
  } finally {
    await heartbeat.stop();
    for (const e of engines.values()) await e.stop();
    await daemon.stop();
  }
});
