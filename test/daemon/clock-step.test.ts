// The wall clock stepped while wccpd runs (NTP correcting a gateway booted with a wrong RTC, an admin's `date -s`, a
// VM resumed): the daemon's own clock (no clock injected) measures HERE_I_AM silence on the monotonic clock, so engines
// that keep talking keep their buckets, a silent one is still removed 3 x HERE_I_AM_T after its last HERE_I_AM, and
// the admin views date things by the stepped wall clock. The step is Date.now() moved in this process; the engines
// are real UDP clients on loopback.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { restoredTime } from '../../src/state/persist.js';
import { loadConfig } from '../../src/config/index.js';
import type { ClusterEvent } from '../../src/cluster/index.js';
import { recordingLog } from '../../src/log.js';
import { loadState, saveState, STATE_VERSION } from '../../src/state/index.js';
import type { EnginesView, EventView } from '../../src/admin/api-types.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { writeLoopbackConfig } from '../helpers/daemon.js';
import { fakeClock } from '../cluster/helpers.js';

const E1 = '127.0.0.11';
const E2 = '127.0.0.12';
const HOUR = 3_600_000;
const HERE_I_AM_MS = 1000;

const realNow = Date.now.bind(Date);
let wallOffset = 0;
/** Sets the process's wall clock (Date.now) `ms` forward (or back); monotonic time does not move. */
function stepWall(ms: number): void {
  wallOffset += ms;
  Date.now = () => realNow() + wallOffset;
}
function resetWall(): void {
  wallOffset = 0;
  Date.now = realNow;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls on the monotonic clock (waitFor uses Date.now, which these tests step). */
async function until<T>(what: string, probe: () => T | null | undefined | false, timeoutMs = 20_000): Promise<T> {
  const end = performance.now() + timeoutMs;
  while (performance.now() < end) {
    const v = probe();
    if (v !== null && v !== undefined && v !== false) return v;
    await sleep(50);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

async function setup() {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-clock-${process.pid}-`));
  const { path, udpPort } = await writeLoopbackConfig(dir, { hereIAm: `${HERE_I_AM_MS}ms`, settle: '0s' });
  const daemon = new Daemon({ config: await loadConfig(path), log: recordingLog() });
  const events: (ClusterEvent & { seenAt: number })[] = [];
  daemon.cluster.onEvent((e) => events.push({ ...e, seenAt: performance.now() }));
  await daemon.start();
  const api = `http://127.0.0.1:${daemon.adminPort()}/api/v1`;
  const engines = new Map<string, TestEngine>();
  /** Per engine, the monotonic time just before its last HERE_I_AM was sent. */
  const lastSent = new Map<string, number>();
  const talking = new Set<string>();
  let stopped = false;
  for (const address of [E1, E2]) {
    const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udpPort } });
    await e.start();
    engines.set(address, e);
    talking.add(address);
  }
  // Each talking engine sends a HERE_I_AM every 300 ms (HERE_I_AM_T is 1 s: removal after 3 s of silence).
  const loop = (async () => {
    while (!stopped) {
      for (const a of [...talking]) {
        lastSent.set(a, performance.now());
        await engines.get(a)?.hereIAm({ timeoutMs: 300 });
      }
      await sleep(300);
    }
  })();
  const snap = () => daemon.cluster.service(0);
  const owned = (a: string) => snap()?.buckets.filter((b) => b === a).length ?? 0;
  await until('both engines usable with 128 buckets each', () => owned(E1) === 128 && owned(E2) === 128);
  return {
    daemon,
    api,
    events,
    talking,
    lastSent,
    snap,
    owned,
    async close() {
      stopped = true;
      await loop;
      for (const e of engines.values()) await e.stop();
      await daemon.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test('the wall clock stepped an hour forward, then two back, while engines talk: no engine removed, no bucket moved, the views show the stepped time', async () => {
  const s = await setup();
  try {
    const before = s.snap();
    const eventsBefore = s.events.length;
    stepWall(HOUR);
    await sleep(3.5 * HERE_I_AM_MS);
    let view = (await (await fetch(`${s.api}/services/0/engines`)).json()) as EnginesView;
    assert.deepEqual(
      view.engines.map((e) => [e.address, e.state, e.buckets]),
      [
        [E1, 'usable', 128],
        [E2, 'usable', 128],
      ],
    );
    for (const e of view.engines) {
      const shown = Date.parse(e.lastHereIAm ?? '');
      assert.ok(
        Math.abs(shown - Date.now()) < 10_000,
        `${e.address} last HERE_I_AM ${e.lastHereIAm}: dated an hour on`,
      );
      assert.ok((e.lastHereIAmAgoMs ?? Infinity) < 3 * HERE_I_AM_MS, 'and its age is what it is');
    }
    stepWall(-2 * HOUR);
    await sleep(3.5 * HERE_I_AM_MS);
    view = (await (await fetch(`${s.api}/services/0/engines`)).json()) as EnginesView;
    assert.deepEqual(
      view.engines.map((e) => [e.address, e.state, e.buckets]),
      [
        [E1, 'usable', 128],
        [E2, 'usable', 128],
      ],
    );
    const shown = Date.parse(view.engines[0]?.lastHereIAm ?? '');
    assert.ok(Math.abs(shown - Date.now()) < 10_000, 'dated an hour back now');
    assert.deepEqual(
      s.events.slice(eventsBefore).map((e) => (e.type === 'engine-state' ? `${e.engine} -> ${e.to}` : e.type)),
      [],
      'no engine-state or table event',
    );
    assert.equal(s.snap()?.changeNumber, before?.changeNumber);
    assert.deepEqual(s.snap()?.buckets, before?.buckets);
  } finally {
    resetWall();
    await s.close();
  }
});

test('an engine silent across a step forward (then back) is removed 3 x HERE_I_AM_T after its last HERE_I_AM, on the monotonic clock', async () => {
  const s = await setup();
  try {
    s.talking.delete(E2);
    await sleep(50);
    const lastE2 = s.lastSent.get(E2) ?? 0;
    stepWall(HOUR);
    await sleep(HERE_I_AM_MS);
    assert.equal(s.snap()?.engines.find((e) => e.address === E2)?.state, 'usable', 'not removed by the step');
    stepWall(-2 * HOUR);
    const gone = await until('E2 removed', () =>
      s.events.find((e) => e.type === 'engine-state' && e.engine === E2 && e.to === 'gone'),
    );
    assert.ok(
      gone.seenAt - lastE2 >= 3 * HERE_I_AM_MS,
      `removed ${Math.round(gone.seenAt - lastE2)} ms after its last HERE_I_AM, not before 3 x HERE_I_AM_T`,
    );
    await until('E2 buckets moved to E1', () => s.owned(E1) === 256);
    assert.deepEqual(
      s.events
        .filter((e) => e.type === 'engine-state' && e.to === 'gone')
        .map((e) => e.type === 'engine-state' && e.engine),
      [E2],
      'E1 kept talking and stayed',
    );
    const events = (await (await fetch(`${s.api}/events?limit=500`)).json()) as { events: EventView[] };
    const shown = events.events.find((e) => e.type === 'engine-state' && e['engine'] === E2 && e['to'] === 'gone');
    assert.ok(shown !== undefined);
    assert.ok(Math.abs(shown.time - Date.now()) < 30_000, 'the event is dated by the wall clock set back');
    assert.ok(Math.abs(Number(shown['at']) - shown.time) < 1000);
  } finally {
    resetWall();
    await s.close();
  }
});

test('the state file dates a departed engine by the wall clock, stepped or not, never by the monotonic clock', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-clock-${process.pid}-`));
  try {
    const { path, udpPort, stateDir } = await writeLoopbackConfig(dir, { hereIAm: '200ms', settle: '0s' });
    // Real time passes (the daemon's timers are real); the wall clock is a day off the monotonic one and steps.
    let step = 0;
    const clock = {
      now: () => performance.now(),
      wall: () => Date.UTC(2026, 11, 2, 1, 0, 0) + performance.now() + step,
    };
    const daemon = new Daemon({ config: await loadConfig(path), log: recordingLog(), clock });
    let goneWall = 0;
    daemon.cluster.onEvent((e) => {
      if (e.type === 'engine-state' && e.to === 'gone') goneWall = clock.wall();
    });
    await daemon.start();
    const e1 = new TestEngine({ address: E1, router: { address: '127.0.0.1', port: udpPort } });
    try {
      await e1.start();
      await e1.hereIAm({ timeoutMs: 2000 });
      await e1.hereIAm({ timeoutMs: 2000 });
      step = HOUR;
      // E1 falls silent: removed 3 x HERE_I_AM_T (600 ms) later.
      await until('E1 gone', () => goneWall !== 0);
      step = HOUR + 1000;
    } finally {
      await e1.stop();
      await daemon.stop();
    }
    const saved = (await loadState(stateDir)).state;
    assert.ok(Math.abs(saved.savedAt - clock.wall()) < 5000, 'savedAt: the wall clock');
    const departed = saved.services[0]?.engines.find((x) => x.address === E1);
    assert.ok(
      Math.abs((departed?.leftAt ?? 0) - (goneWall + 1000)) <= 1,
      `leftAt ${departed?.leftAt}: the wall clock when E1 left, as the clock reads at the save (${goneWall + 1000})`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a restart after the wall clock was set back (or forward) while wccpd was down: a departed engine keeps its age', async () => {
  const SAVED = Date.UTC(2026, 11, 2, 1, 0, 0);
  const clock = fakeClock(5_000, SAVED - 24 * HOUR);
  assert.equal(restoredTime(clock, SAVED - 60_000, SAVED), 5_000 - 60_000, 'set back a day: a minute old, not new');
  clock.stepWall(24 * HOUR + 30_000);
  assert.equal(restoredTime(clock, SAVED - 60_000, SAVED), 5_000 - 90_000, 'down 30 s: 90 s old');
  assert.equal(restoredTime(clock, SAVED + HOUR, SAVED), 5_000 - 30_000, 'dated after the save: counts from the save');

  const dir = mkdtempSync(join(tmpdir(), `wccpd-clock-${process.pid}-`));
  try {
    const { path, stateDir } = await writeLoopbackConfig(dir, { hereIAm: '10s' });
    const buckets = Array.from({ length: 256 }, (_, i) => (i % 2 === 0 ? E1 : null));
    await saveState(stateDir, {
      version: STATE_VERSION,
      savedAt: SAVED,
      services: [
        {
          id: 0,
          table: { changeNumber: 3, buckets },
          counters: {},
          receiveId: 7,
          engines: [
            {
              address: E2,
              weight: 0,
              lastState: 'gone',
              leftAt: SAVED - 60_000,
              historicalBuckets: [1, 3, 5],
            },
          ],
        },
      ],
    });
    const down = fakeClock(7_000, SAVED - 24 * HOUR);
    const daemon = new Daemon({ config: await loadConfig(path), log: recordingLog(), clock: down });
    await daemon.start();
    try {
      const departed = daemon.cluster.memory()[0]?.engines.find((x) => x.address === E2);
      assert.equal(departed?.leftAt, 7_000 - 60_000, 'a minute old on the new monotonic clock');
    } finally {
      await daemon.stop();
    }
    const saved = (await loadState(stateDir)).state;
    assert.equal(
      saved.services[0]?.engines.find((x) => x.address === E2)?.leftAt,
      down.wall() - 60_000,
      'saved again by the wall clock of now',
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
