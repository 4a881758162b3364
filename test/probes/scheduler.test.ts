// The probe scheduler under node:test's mocked timers (no sleeps): every enabled kind once per interval for every
// present engine, spread over the interval; no second probe while one is in flight; nothing after stop().
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import { ProbeScheduler } from '../../src/control/probes/index.js';
import type { Prober } from '../../src/control/probes/index.js';
import type { HealthSettings, ProbeOutcome, ProbeSettings } from '../../src/cluster/index.js';
import { detectionTimes } from '../../src/cluster/index.js';
import { recordingLog } from '../../src/log.js';

const OFF: ProbeSettings = { enabled: false, intervalMs: 300, timeoutMs: 100, rise: 2, fall: 3, hardFall: 2 };
const ON: ProbeSettings = { ...OFF, enabled: true };

function setup(
  settings: HealthSettings,
  engines: string[],
  probers: (calls: string[], now: () => number) => Record<string, Prober>,
) {
  let now = 0;
  const calls: string[] = [];
  const results: [string, ProbeOutcome][] = [];
  const log = recordingLog();
  const scheduler = new ProbeScheduler({
    settings,
    log,
    probers: probers(calls, () => now),
    cluster: {
      probeTargets: () => [...engines],
      probe: (e, o) => {
        results.push([e, o]);
      },
      detection: detectionTimes(settings, 10_000),
    },
  });
  const advance = async (ms: number) => {
    const flush = () => new Promise<void>((r) => queueMicrotask(r));
    mock.timers.tick(0);
    await flush();
    for (let i = 0; i < ms; i += 10) {
      now += 10;
      mock.timers.tick(10);
      await flush();
    }
  };
  return { scheduler, calls, results, log, advance };
}

const passing: Prober = async (_e, _t) => ({ kind: 'tcp', ok: true, rttMs: 1 });

test('each enabled kind probes every engine once per interval, spread evenly; disabled or prober-less kinds do not run', async () => {
  mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  try {
    const { scheduler, calls, results, log, advance } = setup(
      { http: OFF, icp: OFF, tcp: ON, icmp: ON },
      ['192.0.2.11', '192.0.2.12', '192.0.2.13'],
      (c, now) => ({
        tcp: (e, t) => {
          c.push(`${now()} ${e} ${t}`);
          return passing(e, t);
        },
      }),
    );
    scheduler.start();
    assert.deepEqual(scheduler.running(), ['tcp'], 'icmp is enabled but has no prober (no raw socket)');
    await advance(550);
    scheduler.stop();
    assert.deepEqual(
      calls,
      [
        '0 192.0.2.11 100',
        '100 192.0.2.12 100',
        '200 192.0.2.13 100',
        '300 192.0.2.11 100',
        '400 192.0.2.12 100',
        '500 192.0.2.13 100',
      ],
      'at ms, engine, with the timeout: one probe every interval / 3',
    );
    assert.equal(results.length, 6);
    const start = log.lines.filter((l) => l.msg?.startsWith('worst-case detection'));
    assert.deepEqual(
      start.map((l) => l.msg),
      ['worst-case detection: HERE_I_AM 30 s (3 x HERE_I_AM_T); tcp 1 s (300 ms x 3 + 100 ms), hard evidence 650 ms'],
    );
  } finally {
    mock.timers.reset();
  }
});

test('no second probe of an engine while one is in flight; results after stop() are not applied', async () => {
  mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  try {
    const pending: ((o: ProbeOutcome) => void)[] = [];
    const { scheduler, calls, results, advance } = setup(
      { http: OFF, icp: ON, tcp: OFF, icmp: OFF },
      ['192.0.2.11'],
      (c) => ({
        icp: (e) => {
          c.push(e);
          return new Promise<ProbeOutcome>((r) => pending.push(r));
        },
      }),
    );
    scheduler.start();
    await advance(1000);
    assert.equal(calls.length, 1, 'the first probe never answered: no pile-up');
    scheduler.stop();
    pending[0]?.({ kind: 'icp', ok: true, rttMs: 2, icpOpcode: 'MISS' });
    await advance(1000);
    assert.deepEqual(results, []);
    assert.equal(calls.length, 1);
  } finally {
    mock.timers.reset();
  }
});

test('with a timeout longer than the interval, probes of one engine overlap, at most ceil(timeout / interval) + 1 at once', async () => {
  mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  try {
    const pending: ((o: ProbeOutcome) => void)[] = [];
    const overlap = { ...ON, intervalMs: 100, timeoutMs: 400 };
    const { scheduler, calls, results, advance } = setup(
      { http: overlap, icp: OFF, tcp: OFF, icmp: OFF },
      ['192.0.2.11'],
      (c, now) => ({
        http: () => {
          c.push(String(now()));
          return new Promise<ProbeOutcome>((r) => pending.push(r));
        },
      }),
    );
    scheduler.start();
    await advance(1000);
    assert.deepEqual(calls, ['0', '100', '200', '300', '400'], 'one every interval until five are in flight');
    pending.shift()?.({ kind: 'http', ok: false, detail: 'no HTTP answer in 400ms' });
    await advance(100);
    assert.equal(calls.length, 6, 'one finished, the next round starts one more');
    assert.equal(results.length, 1);
    scheduler.stop();
  } finally {
    mock.timers.reset();
  }
});
