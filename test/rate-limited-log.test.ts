// Bad-input logs are rate-limited per reason: 20,000 spoofed sources give a handful of lines, not 20,000.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BurstLog, RateLimitedLog } from '../src/rate-limited-log.js';
import { recordingLog } from '../src/log.js';

test('20,000 sources over 30 s with 3 reasons: at most 3 x (1 + 30 s / 10 s) lines, each summary counting what it hid', () => {
  let now = 0;
  const log = recordingLog();
  const limited = new RateLimitedLog(log, { now: () => now }, 10_000);
  const reasons = ['not-allowed', 'decode-truncated', 'auth-failure'];
  for (let i = 0; i < 20_000; i++) {
    now = Math.floor((i * 30_000) / 20_000);
    const source = `127.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
    const reason = reasons[i % 3] ?? 'not-allowed';
    limited.warn(source, reason, {}, `WCCP datagram from ${source} dropped: ${reason}`);
  }
  assert.ok(log.lines.length <= 3 * (1 + 3), `${log.lines.length} lines`);
  assert.ok(log.lines.length >= 3, 'every reason is reported');
  const summaries = log.lines.filter((l) =>
    /and \d+ more like it from \d+\+? sources? since the last report/.test(l.msg ?? ''),
  );
  assert.ok(summaries.length > 0);
  const hidden = log.lines.reduce((a, l) => a + ((l.obj as { suppressed?: number }).suppressed ?? 0), 0);
  assert.ok(hidden > 0 && hidden < 20_000);
  assert.match(summaries[0]?.msg ?? '', /from 1024\+ sources/);
});

test('one source, one reason: the first line at once, then one per interval', () => {
  let now = 0;
  const log = recordingLog();
  const limited = new RateLimitedLog(log, { now: () => now }, 10_000);
  for (let s = 0; s < 25; s++) {
    now = s * 1000;
    limited.warn('127.0.0.9', 'not-allowed', {}, 'dropped');
  }
  assert.deepEqual(
    log.lines.map((l) => l.msg),
    [
      'dropped',
      'dropped (and 9 more like it from 1 source since the last report)',
      'dropped (and 9 more like it from 1 source since the last report)',
    ],
  );
});

test('clock set back an hour: the next bad datagram is still reported, not silenced for the hour', () => {
  let now = 10 * 3_600_000;
  const log = recordingLog();
  const limited = new RateLimitedLog(log, { now: () => now }, 10_000);
  limited.warn('127.0.0.9', 'not-allowed', {}, 'dropped');
  now -= 3_600_000;
  limited.warn('127.0.0.9', 'not-allowed', {}, 'dropped');
  assert.equal(log.lines.length, 2);
  now += 1000;
  limited.warn('127.0.0.9', 'not-allowed', {}, 'dropped');
  assert.equal(log.lines.length, 2, 'then one per interval again');
});

test('BurstLog: the burst per key at once, the rest counted in one line when the window ends', () => {
  const due: { fn: () => void; cancelled: boolean }[] = [];
  const timers = {
    set: (fn: () => void) => {
      const t = { fn, cancelled: false };
      due.push(t);
      return { cancel: () => (t.cancelled = true) };
    },
  };
  const lines: string[] = [];
  const log = new BurstLog<string>({ burst: 3, windowMs: 1000, timers, write: (l, n) => lines.push(`${l}+${n}`) });
  for (let i = 0; i < 10; i++) log.offer('a', `a${i}`);
  log.offer('b', 'b0');
  assert.deepEqual(lines, ['a0+0', 'a1+0', 'a2+0', 'b0+0']);
  for (const t of due.splice(0)) if (!t.cancelled) t.fn(); // both windows end
  assert.deepEqual(lines.slice(4), ['a9+6'], "a's last line with the 6 before it held back; b held nothing");
  log.offer('a', 'a10');
  assert.equal(lines.at(-1), 'a10+0', 'a new window');
  log.stop();
  assert.ok(due.every((t) => t.cancelled));
});
