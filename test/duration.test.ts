// Durations, one home (src/duration.ts): the config's syntax read and written back, and the text every other
// surface shows.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatDuration, parseDuration } from '../src/duration.js';

test('a config duration is read in ms; a bare number or an unknown unit is none', () => {
  assert.equal(parseDuration('500ms'), 500);
  assert.equal(parseDuration('1m30s'), 90_000);
  assert.equal(parseDuration(' 1.5s '), 1500);
  assert.equal(parseDuration('1h'), 3_600_000);
  for (const bad of ['', '10', '10 s', '5d', 's']) assert.equal(parseDuration(bad), null, bad);
});

test('a duration reads in the largest unit that holds it exactly, with a space, as the docs write it', () => {
  const cases: [number, string][] = [
    [0, '0 ms'],
    [50, '50 ms'],
    [999, '999 ms'],
    [1000, '1 s'],
    [1200, '1.2 s'],
    [30_000, '30 s'],
    [90_000, '90 s'],
    [60_000, '1 min'],
    [300_000, '5 min'],
    [3_600_000, '1 h'],
    [5_400_000, '90 min'],
  ];
  for (const [ms, text] of cases) assert.equal(formatDuration(ms), text, String(ms));
});

test('in config style it is what the file takes, and reads back the same', () => {
  for (const ms of [0, 50, 1000, 1500, 90_000, 300_000, 3_600_000, 86_400_000]) {
    const text = formatDuration(ms, 'config');
    assert.doesNotMatch(text, / /);
    assert.equal(parseDuration(text), ms, text);
  }
  assert.equal(formatDuration(600_000, 'config'), '10m');
});
