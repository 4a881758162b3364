// src/daemon/load.ts's window boundary: a window whose load cannot be read (the data plane's counters turned into the
// window's load) is logged and decides nothing; windowsEnded resolves, so the window timer, which does not await it,
// never sees a rejection (an unhandled rejection ends wccpd with status 70).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LoadWindows } from '../../src/daemon/load.js';
import type { Cluster } from '../../src/cluster/index.js';
import type { ServiceConfig } from '../../src/config/index.js';
import { recordingLog } from '../../src/log.js';

test('a window whose load read throws is logged, decides nothing, and windowsEnded resolves', async () => {
  const log = recordingLog();
  let decided = 0;
  const cluster = {
    loadAware: () => ({
      loadRead: () => {
        throw new RangeError('counts has 255 buckets, not 256');
      },
      loadDecision: () => {
        decided++;
        return { kind: 'quiet' };
      },
      loadApply: () => {},
    }),
  } as unknown as Cluster;
  const service = {
    id: 0,
    assignment: 'hash',
    loadAware: { enabled: true, windowMs: 5000 },
  } as unknown as ServiceConfig;
  const windows = new LoadWindows({
    cluster,
    counters: async () => ({ buckets: new Map() }) as never,
    clock: { now: () => 0, wall: () => 1_000_000 },
    services: () => [service],
    log,
  });
  await windows.windowsEnded();
  assert.equal(decided, 0);
  const line = log.lines.find((l) => l.msg === 'load-aware: the window could not be decided');
  assert.ok(line, JSON.stringify(log.lines));
  assert.match(JSON.stringify(line.obj), /counts has 255 buckets/);
});
