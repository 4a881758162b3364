// No engine left: with failMode open the client's traffic goes straight to the origin (which sees the client's own
// address); with failMode closed a client connection is refused at once (no timeout). The engines are strict test
// engines with HERE_I_AM_T = 1 s so losing the last one takes ~3 s, not 30 s.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CLIENT_ADDRESS, createLab, originAddressForBucket, type Lab } from '../lab/lab.js';
import {
  getBuckets,
  getStatus,
  shares,
  skipE2e,
  startDaemon,
  startTestEngine,
  waitUntil,
  writeConfig,
  type Daemon,
} from './harness.js';

describe('e2e: fail modes with no engine left', { skip: skipE2e }, () => {
  let lab: Lab;
  let daemon: Daemon | undefined;
  before(async () => {
    lab = await createLab({ engines: 1, name: 'bypass' });
    await lab.startOrigin();
  });
  after(async () => {
    await lab?.destroy();
  });

  /** Starts the daemon with failMode, registers engine 1, stops it, waits until the service has no engine. */
  async function loseTheLastEngine(failMode: 'open' | 'closed'): Promise<void> {
    if (daemon) await daemon.terminate();
    daemon = await startDaemon(
      lab,
      writeConfig(lab, failMode, { hereIAm: '1s', probes: false, failMode, stateName: `state-${failMode}` }),
    );
    const engine = startTestEngine(lab, 1, 1000);
    await waitUntil(
      () => getBuckets(lab),
      (v) => shares(v.buckets).get(lab.engineAddress(1)) === 256,
      { timeoutMs: 10_000, intervalMs: 100, what: 'engine 1 holding all buckets' },
    );
    await engine.stop(1000);
    const gone = await waitUntil(
      () => getBuckets(lab),
      (v) => v.buckets.every((b) => b === null),
      { timeoutMs: 8000, intervalMs: 100, what: 'no bucket assigned after the last engine stopped' },
    );
    assert.equal(gone.value.buckets.length, 256);
  }

  /** /status says what the service does now (ServiceStatusView.state in src/admin/api-types.ts). */
  async function assertServiceState(state: 'bypass' | 'closed'): Promise<void> {
    const svc = (await getStatus(lab)).services.find((s) => s.id === 0);
    assert.equal(svc?.state, state, `service 0 in /status: ${JSON.stringify(svc)}`);
  }

  it('failMode open: traffic goes direct and the origin sees the client address', async () => {
    await loseTheLastEngine('open');
    for (const b of [0, 77, 255]) {
      const addr = originAddressForBucket(b);
      const r = await lab.curl(`http://${addr}/bypass/${process.pid}/${b}`, { timeoutMs: 3000 });
      assert.equal(r.status, 200, `bucket ${b} (${addr}): ${r.error ?? ''}`);
      assert.equal(r.fromOrigin, true);
      assert.equal(r.engine, undefined, 'no engine in the path');
      assert.equal((r.json as { remote?: string }).remote, CLIENT_ADDRESS, 'the origin sees the client itself');
    }
    await assertServiceState('bypass');
    // The kernel counted them as Cisco's "Total Packets Unassigned" (new connections forwarded normally).
    await waitUntil(
      () => getStatus(lab),
      (s) => (s.services.find((x) => x.id === 0)?.counters.packetsUnassigned ?? 0) >= 3,
      { timeoutMs: 3000, what: 'packetsUnassigned >= 3 in /status' },
    );
  });

  it('failMode closed: a client connection is refused at once', async () => {
    await loseTheLastEngine('closed');
    for (const b of [0, 77, 255]) {
      const addr = originAddressForBucket(b);
      const t0 = performance.now();
      const r = await lab.curl(`http://${addr}/closed/${process.pid}/${b}`, { timeoutMs: 5000 });
      const ms = performance.now() - t0;
      console.log(`closed: ${addr} -> curl exit ${r.curlExit} in ${ms.toFixed(0)} ms (${r.error ?? 'no error'})`);
      assert.equal(
        r.curlExit,
        7,
        `expected curl exit 7 (connection refused), got ${r.curlExit}: ${r.error ?? `HTTP ${r.status}`}`,
      );
      // Exit 7 is the refusal itself; the time only shows it was not a drop (curl gives up at 5 s), whatever the load.
      assert.ok(ms < 4000, `refusal took ${ms.toFixed(0)} ms (a drop would have timed out at 5 s)`);
    }
    await assertServiceState('closed');
    // ... and the refusals as "Total Packets Denied Redirect".
    await waitUntil(
      () => getStatus(lab),
      (s) => (s.services.find((x) => x.id === 0)?.counters.packetsDenied ?? 0) >= 3,
      { timeoutMs: 3000, what: 'packetsDenied >= 3 in /status' },
    );
  });
});
