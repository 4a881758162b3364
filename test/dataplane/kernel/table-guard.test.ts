// The kernel backends' firewall-reload guard (no root): a fake watch, timer, clock and queue. Hints become one check in
// the queue, with the rules asked for after a rule hint or a watch start; our own changes' deletions are no check;
// restores in a row and failed checks back off; stop() ends the watch and every check.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TableGuard } from '../../../src/dataplane/kernel/table-guard.js';
import type { DeletionHint, TableGuardOptions } from '../../../src/dataplane/kernel/table-guard.js';
import type { DeletedObject, TableWatchOptions } from '../../../src/dataplane/kernel/table-watch.js';
import { recordingLog } from '../../../src/log.js';

function rig(overrides: Partial<TableGuardOptions> = {}) {
  const log = recordingLog();
  let now = 1000;
  const timers: { fn: () => void; ms: number; cancelled: boolean }[] = [];
  const checks: boolean[] = [];
  let watch: TableWatchOptions | null = null;
  let watchStopped = 0;
  let fail: Error | null = null;
  const guard = new TableGuard({
    subject: 'test data plane',
    checking: 'our table',
    log,
    family: 'inet',
    tables: ['ours'],
    watch: (o) => {
      watch = o;
      return {
        pid: () => 42,
        stop: () => {
          watchStopped += 1;
          return Promise.resolve();
        },
      };
    },
    backoff: { free: 2, windowMs: 60_000, firstMs: 1000, maxMs: 4000 },
    now: () => now,
    setTimer: (fn, ms) => {
      const t = { fn, ms, cancelled: false };
      timers.push(t);
      return { cancel: () => (t.cancelled = true) };
    },
    onDeleted: (d: DeletedObject): DeletionHint =>
      d.kind === 'rule' ? (d.chain === 'base' ? 'rules' : null) : 'chains',
    serial: (job) => job(),
    check: (rules) => {
      checks.push(rules);
      return fail !== null ? Promise.reject(fail) : Promise.resolve();
    },
    ...overrides,
  });
  const w = (): TableWatchOptions => {
    assert.ok(watch !== null, 'the watch runs');
    return watch;
  };
  /** Fires the timers due and lets the checks settle. */
  const fire = async (): Promise<void> => {
    for (const t of timers.splice(0)) if (!t.cancelled) t.fn();
    await new Promise((r) => setImmediate(r));
  };
  return {
    guard,
    log,
    timers,
    checks,
    w,
    fire,
    advance: (ms: number) => (now += ms),
    failWith: (e: Error | null) => (fail = e),
    watchStopped: () => watchStopped,
  };
}

test('TableGuard: hints are one check in the queue; rules after a rule hint or a watch start; our own deletions none', async () => {
  const r = rig();
  r.guard.start();
  assert.equal(r.guard.pid(), 42);
  r.w().onStarted(false);
  await r.fire();
  assert.deepEqual(r.checks, [true]);
  // A deletion the backend calls its own: no check at all.
  r.w().onDeleted({ table: 'ours', kind: 'rule', chain: 'slot_3' });
  assert.equal(r.timers.length, 0);
  // Several hints before the check: one check, asking for the rules when any asked.
  r.w().onDeleted({ table: 'ours', kind: 'chain', chain: 'svc_0' });
  r.w().onDeleted({ table: 'ours', kind: 'rule', chain: 'base' });
  r.w().onDeleted({ table: 'ours', kind: 'table' });
  assert.equal(r.timers.length, 1);
  assert.equal(r.timers[0]?.ms, 0);
  await r.fire();
  assert.deepEqual(r.checks, [true, true]);
  r.w().onDeleted({ table: 'ours', kind: 'chain', chain: 'svc_0' });
  await r.fire();
  assert.deepEqual(r.checks, [true, true, false]);
  // A watch started again says so.
  r.w().onStarted(true);
  await r.fire();
  assert.deepEqual(r.checks, [true, true, false, true]);
  assert.ok(r.log.lines.some((l) => l.msg === 'test data plane: the table watch runs again; checking our table'));
  r.w().onEnded('exit code 1', 2000);
  assert.ok(r.log.lines.some((l) => l.level === 'warn' && l.msg?.includes('ended (exit code 1)')));
  assert.equal(r.guard.restores(), 0);
});

test('TableGuard: restores in a row and failed checks back off, counted; old ones leave the window', async () => {
  const r = rig();
  r.guard.start();
  assert.equal(r.guard.restored(), 1);
  assert.equal(r.guard.restored(), 2);
  r.guard.hint();
  assert.equal(r.timers[0]?.ms, 1000);
  assert.ok(r.log.lines.some((l) => l.msg?.includes('our table was deleted again (2 restores in the last 60 s)')));
  // A failed check is logged, counts as a restore for the backoff, and is tried again more slowly.
  r.failWith(new Error('no nft'));
  await r.fire();
  assert.equal(r.guard.failedChecks(), 1);
  assert.ok(
    r.log.lines.some((l) => l.level === 'error' && l.msg?.endsWith('redirection stays off until it works): no nft')),
  );
  assert.equal(r.timers[0]?.ms, 2000);
  r.failWith(null);
  await r.fire();
  assert.equal(r.timers.length, 0);
  assert.equal(r.guard.failedChecks(), 1);
  assert.equal(r.guard.restores(), 2);
  r.advance(60_000);
  r.guard.hint();
  assert.equal(r.timers[0]?.ms, 0);
});

test('TableGuard: stop() ends the watch and every check; start() watches again; no watch, no check', async () => {
  const r = rig();
  r.guard.start();
  r.guard.hint();
  const stopped = r.guard.stop();
  assert.equal(r.timers[0]?.cancelled, true);
  await stopped;
  assert.equal(r.watchStopped(), 1);
  assert.equal(r.guard.pid(), undefined);
  r.guard.hint();
  await r.fire();
  assert.deepEqual(r.checks, []);
  r.guard.start();
  r.guard.hint();
  await r.fire();
  assert.deepEqual(r.checks, [false]);

  const off = rig({ watch: false });
  off.guard.start();
  off.guard.hint();
  assert.equal(off.timers.length, 0);
  assert.equal(off.guard.pid(), undefined);
});

test("TableGuard: the userland backend's wording: what is guarded, what a failed restore leaves, its fields", async () => {
  const r = rig({
    subject: 'userland data plane',
    table: 'the guard table',
    failedMeans: "the kernel forwards the services' new connections too until it works",
    fields: { dataplane: 'userland' },
  });
  r.guard.start();
  r.guard.restored();
  r.guard.restored();
  r.guard.hint();
  r.failWith(new Error('no nft'));
  await r.fire();
  r.w().onEnded('exit code 1', 2000);
  const lines = r.log.lines.map((l) => [l.level, l.msg, (l.obj as { dataplane?: string }).dataplane]);
  assert.deepEqual(lines, [
    [
      'warn',
      'userland data plane: the guard table was deleted again (2 restores in the last 60 s): something keeps ' +
        'deleting it; backing off, next check in 1000 ms',
      'userland',
    ],
    [
      'error',
      "userland data plane: putting the guard table back failed (the kernel forwards the services' new connections " +
        'too until it works): no nft',
      'userland',
    ],
    [
      'warn',
      'userland data plane: the guard table was deleted again (3 restores in the last 60 s): something keeps ' +
        'deleting it; backing off, next check in 2000 ms',
      'userland',
    ],
    [
      'warn',
      'userland data plane: the table watch (nft monitor) ended (exit code 1); a deletion of the guard table by a ' +
        'firewall reload is not noticed until it runs again in 2000 ms',
      'userland',
    ],
  ]);
});
