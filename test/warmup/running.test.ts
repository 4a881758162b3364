// The warm-up as the daemon runs it, its once-a-second tick a boundary: a save that cannot be asked for (or a policy
// bug) is counted in `tick-internal-error` (status `warmup`, /metrics wccpd_warmup_broker_total) and logged once a
// minute, and the tick keeps running: a warm-up still ends on time. Before the boundary, the first failing tick was an
// uncaught exception: wccpd's last line (exit 70), here the test runner's failure.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_WARMUP, RunningWarmup } from '../../src/warmup/index.js';
import type { WarmupEvent } from '../../src/warmup/index.js';
import { recordingLog } from '../../src/log.js';
import { freeTcpPort, freeUdpPort, waitFor } from '../helpers/daemon.js';
import { hereIAm, testCluster } from '../cluster/helpers.js';

const A = '127.0.0.11';
const B = '127.0.0.12';
const C = '127.0.0.13';

test('a tick whose save throws is counted and logged once a minute, and the next tick still ends the warm-up', async () => {
  const { clock, cluster } = testCluster({ routerAddress: '127.0.0.1' });
  const log = recordingLog();
  let saves = 0;
  const events: WarmupEvent[] = [];
  const running = new RunningWarmup({
    settings: new Map([[0, DEFAULT_WARMUP]]),
    clock,
    log,
    onEvent: (e) => events.push(e),
    save: () => {
      saves++;
      throw new Error("EROFS: read-only file system, open '/var/lib/wccpd/state.json.tmp'");
    },
    lastSave: () => 0,
  });
  running.watch(cluster);
  const keep = (addr: string, receivedId = 0) => {
    const plan = cluster.iSeeYou(0, addr);
    cluster.hereIAm(hereIAm(addr, { receivedId: receivedId || (plan?.receiveId ?? 0) }));
  };
  const join = (addr: string) => {
    cluster.hereIAm(hereIAm(addr));
    keep(addr);
  };
  join(A);
  join(B);
  for (let left = DEFAULT_WARMUP.minSourceHoldMs; left > 0; left -= 10_000) {
    clock.advance(10_000);
    keep(A);
    keep(B);
    cluster.tick();
  }
  join(C);
  assert.equal(running.policy.warmingCount(), 1, 'C is warming: each tick asks for a save');

  await running.start({
    listen: '127.0.0.1',
    icpPort: await freeUdpPort(),
    httpPort: await freeTcpPort(),
    sourceIcpPort: 3130,
    sourceHttpPort: 3128,
  });
  try {
    await waitFor('three failing ticks', async () => (saves >= 3 ? true : null), 6_000);
    assert.ok((running.counters()['tick-internal-error'] ?? 0) >= 3, JSON.stringify(running.counters()));
    const lines = log.lines.filter((l) => l.msg?.startsWith('warm-up tick failed'));
    assert.equal(lines.length, 1, 'one line a minute, however many ticks fail');
    assert.equal(lines[0]?.level, 'warn');
    assert.match(lines[0]?.msg ?? '', /EROFS: read-only file system/);

    // Still ticking: the warm-up's time runs out and the next tick ends it.
    clock.advance(DEFAULT_WARMUP.durationMs);
    const ended = await waitFor('the warm-up ended by a tick', async () => events.find((e) => e.to !== 'warming'));
    assert.equal(ended.engine, C);
    assert.equal(running.policy.warmingCount(), 0);
  } finally {
    await running.stop();
  }
});
