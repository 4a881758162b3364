// Bad-input logs are rate-limited per reason: 20,000 spoofed sources give a handful of lines, not 20,000.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RateLimitedLog } from '../src/rate-limited-log.js';
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
