// The daemon end to end: spawn `wccpd --config` (dataplane none), register two test engines over UDP, read the
// bucket table from the HTTP API; restart with the same engines and get the identical table back from state.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TestEngine } from '../helpers/wccp-engine.js';
import { logLines, startDaemon, TOKEN, waitFor, type RunningDaemon } from '../helpers/daemon.js';
import type { BucketsView, EnginesView } from '../../src/admin/api-types.js';

test('wccpd: two engines register, the API shows 128 buckets each; a restart with the same engines gives the identical table', async (t) => {
  let daemon: RunningDaemon | null = await startDaemon();
  const api = `${daemon.url}/api/v1`;
  const buckets = async () => (await (await fetch(`${api}/services/0/buckets`)).json()) as BucketsView;
  const engines: TestEngine[] = [];
  try {
    const register = async (order: string[], behaviour: 'strict' | 'squid-5.7', port: number) => {
      for (const address of order) {
        const e = new TestEngine({ address, router: { address: '127.0.0.1', port }, behaviour });
        await e.start();
        engines.push(e);
        await e.hereIAm({ timeoutMs: 2000 });
      }
      for (const e of engines.slice(-order.length)) assert.ok(await e.hereIAm({ timeoutMs: 2000 }), 'I_SEE_YOU');
    };
    const bothHalf = async () => {
      const b = await buckets();
      return b.buckets.filter((x) => x === '127.0.0.11').length === 128 &&
        b.buckets.filter((x) => x === '127.0.0.12').length === 128
        ? b
        : null;
    };

    await register(['127.0.0.11', '127.0.0.12'], 'strict', daemon.udpPort);
    const first = await waitFor('two engines in the table', bothHalf);
    assert.equal(first.service, 0);
    assert.equal(first.buckets.length, 256);

    const engineList = (await (await fetch(`${api}/services/0/engines`)).json()) as EnginesView;
    assert.deepEqual(
      engineList.engines.map((e) => [e.address, e.state, e.buckets]),
      [
        ['127.0.0.11', 'usable', 128],
        ['127.0.0.12', 'usable', 128],
      ],
    );
    const denied = await fetch(`${api}/services/0/engines/127.0.0.12/drain`, { method: 'POST' });
    assert.equal(denied.status, 401);
    const wrong = await fetch(`${api}/services/0/engines/127.0.0.12/drain`, {
      method: 'POST',
      headers: { authorization: 'Bearer nope' },
    });
    assert.equal(wrong.status, 401);
    assert.deepEqual((await buckets()).buckets, first.buckets, 'a refused drain changed nothing');

    assert.equal(await daemon.terminate(), 0, 'SIGTERM exits 0');
    assert.ok(
      logLines(daemon).some((l) => l.event === 'engine-state' && /127\.0\.0\.11 joining -> usable/.test(l.msg ?? '')),
      'state change logged as one JSON line',
    );
    for (const e of engines.splice(0)) await e.stop();

    // Restart: the same engines, in the other order, Squid-5.7-like this time (never echo).
    daemon = await daemon.restart();
    await register(['127.0.0.12', '127.0.0.11'], 'squid-5.7', daemon.udpPort);
    const second = await waitFor('both engines back', bothHalf);
    assert.deepEqual(second.buckets, first.buckets, 'identical table after restart');
    const flagged = (await (await fetch(`${api}/services/0/engines`)).json()) as EnginesView;
    assert.ok(
      flagged.engines.every((e) => e.flags.noReceiveIdEcho === true && e.flagsText.includes('no Receive ID echo')),
    );

    const drained = await fetch(`${api}/services/0/engines/127.0.0.12/drain`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(drained.status, 200);
    // Within timers.settle (250 ms) of the last table change, the drain's change waits for the settle time.
    const afterDrain = await waitFor(
      'the drain in the table',
      async () => {
        const b = await buckets();
        return b.buckets.filter((x) => x === '127.0.0.11').length === 256 ? b : null;
      },
      2000,
    );
    t.diagnostic(
      `change numbers: first ${first.changeNumber}, after restart ${second.changeNumber}, after drain ${afterDrain.changeNumber}`,
    );
  } finally {
    for (const e of engines) await e.stop();
    await daemon?.stop();
  }
});

test('wccpd check-config: ok for the example, exit 2 for an unknown argument', async () => {
  const { spawnSync } = await import('node:child_process');
  const ok = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'src/cli/wccpd.ts', 'check-config', 'examples/wccpd.yaml'],
    { encoding: 'utf8' },
  );
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /^ok: examples\/wccpd\.yaml/);
  const bad = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/wccpd.ts', '--bogus'], { encoding: 'utf8' });
  assert.equal(bad.status, 2);
});
