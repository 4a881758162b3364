// Load-aware assignment through the real wccpd (in process, the memory data plane fed new connections by the test):
// four engines on loopback, `loadAware` with a 5 s window; a skewed window of connections; `GET /api/v1/plan?change=
// rebalance` predicts the window end's table exactly, the move is an event with its reason (`load: ...`) and counted in
// /metrics (wccpd_load_moves_total, wccpd_engine_load_ratio); `wccpctl plan rebalance` shows the load column.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { explain } from '../../src/dataplane/explain.js';
import { recordingLog } from '../../src/log.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import { DESTINATIONS, pastNextWindowEnd } from './load-windows.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { waitFor, wccpctl, writeLoopbackConfig } from '../helpers/daemon.js';
import type { BucketsView, EventView, PlanView } from '../../src/admin/api-types.js';

const ENGINES = ['127.0.0.51', '127.0.0.52', '127.0.0.53', '127.0.0.54'];

test('a skewed window moves buckets as plan rebalance said, with an event and metrics', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-load-${process.pid}-`));
  const config = await writeLoopbackConfig(dir, {
    lenientReceiveId: 0,
    settle: '0ms',
    service: ['loadAware:', '  window: 5s', '  minConnections: 500'],
  });
  const url = `http://127.0.0.1:${config.httpPort}`;
  const redirector = new MemoryRedirector();
  const daemon = new Daemon({
    config: await loadConfig(config.path),
    log: recordingLog(),
    redirector,
    checkBridgeNetfilter: async () => ({ loaded: false, callIptables: false, bridges: [], active: false }),
  });
  const engines = ENGINES.map(
    (address) => new TestEngine({ address, router: { address: '127.0.0.1', port: config.udpPort } }),
  );
  const get = async <T>(path: string): Promise<T> => (await (await fetch(`${url}${path}`)).json()) as T;
  try {
    await daemon.start();
    for (const e of engines) await e.start();
    for (let round = 0; round < 2; round++) for (const e of engines) await e.hereIAm();
    const ready = await waitFor('the four-engine table in force', async () => {
      const t = await get<BucketsView>('/api/v1/services/0/buckets');
      return ENGINES.every((a) => t.buckets.includes(a)) && t.inForce?.changeNumber === t.changeNumber ? t : null;
    });
    const keepAlive = setInterval(() => void Promise.all(engines.map((e) => e.hereIAm())), 2000);
    try {
      // The first window's end reads the counters' baseline; the next window is the skewed one.
      await pastNextWindowEnd(400);
      const service = redirector.service(0)!;
      const hot = DESTINATIONS.filter((d) => explain(service, d).engine === ENGINES[0]).slice(0, 3);
      // 4 connections to every address, and 150 more to each of three the first engine serves: it carries ~1.4x.
      for (const d of DESTINATIONS) for (let i = 0; i < 4; i++) redirector.classify(0, d);
      for (const d of hot) for (let i = 0; i < 150; i++) redirector.classify(0, d);

      const r = await fetch(`${url}/api/v1/plan?change=rebalance`);
      assert.equal(r.status, 200);
      const plan = (await r.json()) as PlanView;
      const planned = plan.services[0]!;
      assert.ok(planned.moves.length > 0, `moves planned: ${JSON.stringify(planned.notes)}`);
      assert.ok(
        planned.moves.every((m) => m.from === ENGINES[0]),
        JSON.stringify(planned.moves),
      );
      assert.ok(planned.moves.length <= 3);
      const hotBefore = planned.engines.find((e) => e.address === ENGINES[0])!;
      assert.ok(hotBefore.loadBefore! > 1.15 && hotBefore.loadAfter! <= 1.15, JSON.stringify(planned.engines));

      await pastNextWindowEnd(600);
      const after = await get<BucketsView>('/api/v1/services/0/buckets');
      assert.deepEqual(after.buckets, planned.after, 'the window end made exactly the planned table');
      assert.notDeepEqual(after.buckets, ready.buckets);

      const { events } = await get<{ events: EventView[] }>('/api/v1/events');
      const load = events.filter((e) => e.type === 'table' && String(e.reason).startsWith('load: '));
      assert.equal(load.length, 1);
      assert.match(
        String(load[0]!.reason),
        /^load: 127\.0\.0\.51 at \d\.\d\dx its share -> \d\.\d\dx, \d+ buckets? to /,
      );
      const metrics = await (await fetch(`${url}/metrics`)).text();
      assert.match(metrics, new RegExp(`wccpd_load_moves_total\\{service="0"\\} ${planned.moves.length}\\b`));
      assert.match(metrics, /wccpd_engine_load_ratio\{service="0",engine="127\.0\.0\.51"\} [01]\.\d+/);

      const status = await wccpctl(['--url', url, 'status']);
      assert.equal(status.code, 0, status.stderr);
      assert.match(
        status.stdout,
        new RegExp(
          `Load-aware:\\s+window ending \\d\\d:\\d\\d:\\d\\d: 127\\.0\\.0\\.51 \\d\\.\\d\\dx, .*; ${planned.moves.length} bucket\\(s\\) moved by load, ${planned.moves.length} in the last hour, ${planned.moves.length} held`,
        ),
      );
      const ctl = await wccpctl(['--url', url, 'plan', 'rebalance']);
      assert.equal(ctl.code, 0, ctl.stderr);
      assert.match(ctl.stdout, /service 0 .*rebalance moves \d+ of 256 buckets/);
    } finally {
      clearInterval(keepAlive);
    }
  } finally {
    for (const e of engines) await e.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
