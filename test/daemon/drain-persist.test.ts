// An admin drain, as an admin sees it, on the real daemon: it stays while the engine is gone (wccpctl engines and the
// API list it as gone and drained), when the engine comes back, and across a daemon restart, until `undrain`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startDaemon, TOKEN, waitFor, wccpctl, type RunningDaemon } from '../helpers/daemon.js';
import { keepTalking, TestEngine } from '../helpers/wccp-engine.js';
import type { EnginesView } from '../../src/admin/api-types.js';

const E1 = '127.0.0.11';
const E2 = '127.0.0.12';

test('an admin drain survives the engine going gone and coming back, and a daemon restart, until undrain', async () => {
  let daemon: RunningDaemon = await startDaemon([], { hereIAm: '1s' });
  const router = () => ({ address: '127.0.0.1', port: daemon.udpPort });
  const engines = new Map<string, TestEngine>();
  const talking = new Set([E1, E2]);
  const start = async (address: string) => {
    const e = new TestEngine({ address, router: router() });
    await e.start();
    engines.set(address, e);
  };
  // Each engine announces itself every 300 ms while it is `talking`, as a real engine does every HERE_I_AM_T.
  let heartbeat = keepTalking(engines, talking);
  const view = async () => (await (await fetch(`${daemon.url}/api/v1/services/0/engines`)).json()) as EnginesView;
  const e1 = async () => (await view()).engines.find((e) => e.address === E1);
  const bucketsOf = async (a: string) => (await view()).engines.find((e) => e.address === a)?.buckets ?? 0;
  try {
    await start(E1);
    await start(E2);
    await waitFor('both engines usable', async () =>
      (await view()).engines.filter((e) => e.state === 'usable').length === 2 ? true : null,
    );

    const drained = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'drain', E1]);
    assert.equal(drained.code, 0, drained.stderr);
    await waitFor('the drain', async () => ((await e1())?.state === 'draining' ? true : null));
    assert.deepEqual((await e1())?.drains, ['admin']);
    const listed = await wccpctl(['--url', daemon.url, 'engines']);
    assert.match(listed.stdout.split('\n').find((l) => l.includes(E1)) ?? '', /draining.*admin drain/);

    // It reboots: silent for longer than 3 x HERE_I_AM_T.
    talking.delete(E1);
    const gone = await waitFor(
      'the drained engine to be gone, and still listed',
      async () => {
        const e = await e1();
        return e?.state === 'gone' ? e : null;
      },
      10_000,
    );
    assert.equal(gone.flags.adminDrain, true);
    assert.deepEqual(gone.drains, ['admin']);
    assert.match(
      (await wccpctl(['--url', daemon.url, 'engines'])).stdout.split('\n').find((l) => l.includes(E1)) ?? '',
      /gone.*admin drain/,
    );
    assert.equal(await bucketsOf(E2), 256);

    // It comes back: drained, no buckets.
    talking.add(E1);
    await waitFor(
      'the returning engine to be drained again',
      async () => ((await e1())?.state === 'draining' ? true : null),
      10_000,
    );
    assert.equal(await bucketsOf(E1), 0);
    const events = await wccpctl(['--url', daemon.url, 'events']);
    assert.match(events.stdout, /engine 127\.0\.0\.11: joining -> draining +\(admin drain \(kept until undrain\)\)/);

    // The daemon restarts; the engines keep talking to it.
    await heartbeat.stop();
    assert.equal(await daemon.terminate(), 0);
    daemon = await daemon.restart();
    heartbeat = keepTalking(engines, talking);
    await waitFor(
      'the drain after the restart',
      async () => ((await e1())?.state === 'draining' && (await bucketsOf(E2)) === 256 ? true : null),
      10_000,
    );
    assert.deepEqual((await e1())?.drains, ['admin']);
    const undrained = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'undrain', E1]);
    assert.equal(undrained.code, 0, undrained.stderr);
    await waitFor('the undrained engine back in the table', async () => ((await bucketsOf(E1)) === 128 ? true : null));
    assert.deepEqual((await e1())?.drains, []);
  } finally {
    await heartbeat.stop();
    for (const e of engines.values()) await e.stop();
    await daemon.stop();
  }
});
