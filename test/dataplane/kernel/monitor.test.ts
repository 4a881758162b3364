// The monitor process the link and table watches share (src/dataplane/kernel/monitor.ts), with fake children (no root):
// lines split across reads, an overlong line cut, restarts with a growing delay reported with the child's last
// stderr line, the delay back to the first after a good run, stop() ending the process (SIGKILL if it lingers).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  MAX_LINE,
  startMonitor,
  type MonitorChild,
  type MonitorOptions,
} from '../../../src/dataplane/kernel/monitor.js';

class FakeChild extends EventEmitter {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly killed: string[] = [];
  constructor(
    readonly pid: number,
    private readonly exitsOn: NodeJS.Signals | null = 'SIGTERM',
  ) {
    super();
  }
  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    this.killed.push(signal);
    if (signal === this.exitsOn || signal === 'SIGKILL') setImmediate(() => this.emit('exit', null, signal));
    return true;
  }
  exit(code: number): void {
    this.emit('exit', code, null);
  }
}

function setup(over: Partial<MonitorOptions> = {}, exitsOn: NodeJS.Signals | null = 'SIGTERM') {
  const children: FakeChild[] = [];
  const lines: string[] = [];
  const exits: { why: string; ms: number }[] = [];
  const starts: boolean[] = [];
  let reads = 0;
  const m = startMonitor({
    spawnChild: () => {
      const c = new FakeChild(100 + children.length, exitsOn);
      children.push(c);
      return c as unknown as MonitorChild;
    },
    what: 'fake monitor',
    onLine: (l) => lines.push(l),
    onLines: () => (reads += 1),
    onStart: (restarted) => starts.push(restarted),
    onExit: (why, ms) => exits.push({ why, ms }),
    retryMs: 20,
    maxRetryMs: 70,
    ...over,
  });
  const last = (): FakeChild => children[children.length - 1]!;
  return { m, children, lines, exits, starts, last, reads: () => reads };
}

/** Waits (bounded) until the n-th child was started. */
async function restarted(t: ReturnType<typeof setup>, n: number): Promise<void> {
  for (let w = 0; w < 400 && t.children.length < n; w++) await sleep(5);
  assert.equal(t.children.length, n);
}

test('lines split across reads come whole, in order; an overlong line is cut and the next one is intact', async () => {
  const t = setup();
  t.last().stdout.write('one\ntw');
  t.last().stdout.write('o\n');
  await sleep(5);
  assert.deepEqual(t.lines, ['one', 'two']);
  assert.equal(t.reads(), 2);
  t.last().stdout.write('x'.repeat(MAX_LINE * 3));
  t.last().stdout.write(`${'y'.repeat(MAX_LINE * 3)}\nthree\n`);
  await sleep(5);
  assert.deepEqual(t.lines.slice(2), ['x'.repeat(MAX_LINE), 'three']);
  await t.m.stop();
});

test('a monitor that ends is started again after 1, 2, 4... times the first delay up to the largest, with its stderr', async () => {
  const t = setup();
  assert.deepEqual(t.starts, [false]);
  for (let i = 0; i < 4; i++) {
    const n = t.children.length;
    if (i === 0) t.last().stderr.write('Error: Operation not permitted\n');
    await sleep(5);
    t.last().exit(1);
    for (let w = 0; w < 100 && t.children.length === n; w++) await sleep(5);
    assert.equal(t.children.length, n + 1, `restart ${i + 1}`);
  }
  assert.deepEqual(
    t.exits.map((e) => e.ms),
    [20, 40, 70, 70],
  );
  assert.equal(t.exits[0]?.why, 'exit 1: Error: Operation not permitted');
  assert.equal(t.exits[1]?.why, 'exit 1');
  assert.deepEqual(t.starts, [false, true, true, true, true]);
  assert.equal(t.m.pid(), t.last().pid);
  await t.m.stop();
});

test('the delay goes back to the first after a line (lineIsGoodRun) or a good run (goodRunMs)', async () => {
  const byLine = setup({ lineIsGoodRun: true });
  byLine.last().exit(1);
  await restarted(byLine, 2);
  byLine.last().stdout.write('event\n');
  await sleep(5);
  byLine.last().exit(1);
  assert.deepEqual(
    byLine.exits.map((e) => e.ms),
    [20, 20],
  );
  await byLine.m.stop();
  const byTime = setup({ goodRunMs: 150 });
  byTime.last().exit(1);
  await restarted(byTime, 2);
  byTime.last().exit(1); // ended as soon as it started: not a good run
  await restarted(byTime, 3);
  await sleep(200);
  byTime.last().exit(1); // ran longer than goodRunMs
  assert.deepEqual(
    byTime.exits.map((e) => e.ms),
    [20, 40, 20],
  );
  await byTime.m.stop();
});

test('stop() ends the process and waits for it; one that ignores SIGTERM gets SIGKILL; nothing restarts', async () => {
  const t = setup();
  const c = t.last();
  await t.m.stop();
  assert.deepEqual(c.killed, ['SIGTERM']);
  assert.equal(t.m.pid(), undefined);
  const stubborn = setup({}, null);
  const s = stubborn.last();
  await stubborn.m.stop();
  assert.deepEqual(s.killed, ['SIGTERM', 'SIGKILL']);
  await sleep(50);
  assert.equal(stubborn.children.length, 1, 'no restart after stop()');
  assert.deepEqual(stubborn.exits, [], 'an exit after stop() is not reported');
});

test('a command that cannot be run is reported as such and tried again', async () => {
  const t = setup();
  t.last().emit('error', new Error('spawn nft ENOENT'));
  assert.equal(t.exits[0]?.why, 'cannot run fake monitor: spawn nft ENOENT');
  for (let w = 0; w < 100 && t.children.length < 2; w++) await sleep(5);
  assert.equal(t.children.length, 2);
  await t.m.stop();
});
