// Nothing of wccpd stays in the kernel when it stops: after SIGTERM the daemon removes its nft table, ip rules and
// routes itself; after SIGKILL they stay until systemd/wccpd-cleanup (the unit's ExecStopPost) runs. Either way
// client traffic then flows directly to the origin. While wccpd runs, client traffic goes to the engine namespace,
// where no Squid listens, so a redirected connection is refused: that makes "direct again" observable.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { CLIENT_ADDRESS, createLab, originAddressForBucket, type Lab } from '../lab/lab.js';
import {
  CLEANUP,
  getBuckets,
  ourKernelState,
  shares,
  skipE2e,
  startDaemon,
  startTestEngine,
  waitUntil,
  writeConfig,
  type Daemon,
} from './harness.js';

describe('e2e: no rule or route of ours is left after wccpd stops', { skip: skipE2e }, () => {
  let lab: Lab;
  before(async () => {
    lab = await createLab({ engines: 1, name: 'clean' });
    await lab.startOrigin();
    startTestEngine(lab, 1, 1000);
  });
  after(async () => {
    await lab?.destroy();
  });

  const url = (tag: string): string => `http://${originAddressForBucket(42)}/cleanup/${process.pid}/${tag}`;

  async function runAndRedirect(tag: string): Promise<Daemon> {
    const daemon = await startDaemon(
      lab,
      writeConfig(lab, tag, { hereIAm: '1s', probes: false, stateName: `state-${tag}` }),
    );
    await waitUntil(
      () => getBuckets(lab),
      // In force, not only decided: the kernel is read next.
      (v) => shares(v.buckets).get(lab.engineAddress(1)) === 256 && v.inForce?.changeNumber === v.changeNumber,
      { timeoutMs: 10_000, intervalMs: 100, what: 'engine 1 holding all buckets, in force' },
    );
    const state = await ourKernelState(lab);
    assert.ok(
      state.tables.length > 0 && state.rules.length > 0 && state.routes.length > 0,
      `wccpd's nft table, ip rule and route while it runs: ${JSON.stringify(state)}`,
    );
    const r = await lab.curl(url(`${tag}-redirected`), { timeoutMs: 3000 });
    assert.equal(
      r.fromOrigin,
      false,
      'while wccpd runs, the connection goes to the engine (no Squid there), not the origin',
    );
    return daemon;
  }

  async function assertDirect(tag: string): Promise<void> {
    const state = await ourKernelState(lab);
    assert.deepEqual(state, { tables: [], rules: [], routes: [] }, 'nothing of wccpd left in the gateway');
    const r = await lab.curl(url(tag), { timeoutMs: 3000 });
    assert.equal(r.status, 200, r.error);
    assert.equal(r.fromOrigin, true);
    assert.equal((r.json as { remote?: string }).remote, CLIENT_ADDRESS);
  }

  it('SIGTERM: wccpd removes its table, rules and routes itself and exits 0', async () => {
    const daemon = await runAndRedirect('term');
    const code = await daemon.terminate();
    assert.equal(code, 0, `wccpd exit code after SIGTERM; output:\n${daemon.proc.output().slice(-1500)}`);
    await assertDirect('after-term');
  });

  it('SIGKILL: the rules stay; systemd/wccpd-cleanup removes them and exits 0', async () => {
    const daemon = await runAndRedirect('kill');
    await daemon.kill();
    const left = await ourKernelState(lab);
    assert.ok(
      left.tables.length > 0,
      'a killed wccpd cannot clean up: its table is still there (so the script is what removes it)',
    );
    // As the unit runs it, with the record in the daemon's stateDir.
    const stateDir = ['--state-dir', join(lab.dir, 'state-kill')];
    const r = await lab.exec(lab.ns.gw, CLEANUP, stateDir, { allowFail: true });
    assert.equal(r.code, 0, `wccpd-cleanup: ${r.stderr}`);
    await assertDirect('after-cleanup');
    const again = await lab.exec(lab.ns.gw, CLEANUP, stateDir, { allowFail: true });
    assert.equal(again.code, 0, `wccpd-cleanup with nothing to do: ${again.stderr}`);
  });
});
