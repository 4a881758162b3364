import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assignedHashHex, renderBuckets, renderEngines, renderWhich } from '../../src/admin/render.js';
import type { BucketsView, EngineView } from '../../src/admin/api-types.js';

const engines = ['192.0.2.11', '192.0.2.12', '192.0.2.13'];
const table: BucketsView = {
  service: 0,
  changeNumber: 7,
  inForce: { changeNumber: 7, at: '2026-12-01T20:00:00.000Z' },
  buckets: Array.from({ length: 256 }, (_, i) => (i === 255 ? null : engines[i % 3]!)),
  counters: null,
  moved: null,
  warming: null,
  mask: null,
};
const views: EngineView[] = engines.map((address) => ({
  address,
  state: 'usable',
  flags: {},
  flagsText: ['no Receive ID echo'],
  weight: 10000,
  buckets: table.buckets.filter((b) => b === address).length,
  share: 0,
  lastHereIAm: null,
  lastHereIAmAgoMs: 1200,
  reason: 'lenient: HERE_I_AMs without Receive ID echo',
  probeRttMs: null,
  drains: [],
  maintenance: null,
  packets: 12,
  bytes: 3400,
  warmup: null,
}));

test('the bucket grid shows one letter per engine and a legend whose allotments add up to 256 (100%)', () => {
  const text = renderBuckets(table, views, { colour: false, hex: false });
  const lines = text.split('\n');
  const gridRows = lines.filter((l) => /^ {2}[0-9a-f]{2} {2}/.test(l));
  assert.equal(gridRows.length, 16);
  const letters = gridRows.flatMap((l) => l.slice(6).trim().split(/\s+/));
  assert.equal(letters.length, 256);
  assert.equal(letters.filter((l) => l === 'A').length, 85);
  assert.equal(letters[255], '.');
  const legend = lines.filter((l) => / buckets /.test(l));
  const counts = legend.map((l) => Number(/(\d+) buckets/.exec(l)![1]));
  const pcts = legend.map((l) => Number(/([\d.]+)%/.exec(l)![1]));
  assert.equal(
    counts.reduce((a, b) => a + b, 0),
    256,
  );
  assert.ok(Math.abs(pcts.reduce((a, b) => a + b, 0) - 100) < 0.05);
  assert.ok(
    lines.every((l) => l.length <= 100),
    'fits 100 columns',
  );
  assert.ok(!text.includes('\x1b['), 'no colour unless asked');
  assert.ok(renderBuckets(table, views, { colour: true, hex: false }).includes('\x1b[48;5;'));
});

test('--hex prints the WCCP bucket block bitmap per engine (bucket n = byte n>>3, bit n&7)', () => {
  const all = Array.from({ length: 256 }, () => '192.0.2.11');
  assert.equal(assignedHashHex(all, '192.0.2.11'), 'F'.repeat(64));
  const first = Array.from({ length: 256 }, (_, i) => (i === 0 || i === 9 ? '192.0.2.11' : null));
  assert.equal(assignedHashHex(first, '192.0.2.11'), '0102' + '0'.repeat(60));
  const text = renderBuckets(table, views, { colour: false, hex: true });
  assert.equal(text.split('\n').filter((l) => l.includes('Assigned Hash Info:')).length, 3);
});

test('engines and which read as a person expects', () => {
  const text = renderEngines({ service: 0, engines: views });
  assert.match(text, /192\.0\.2\.11 +usable +10000 +85 \(0\.00%\)|192\.0\.2\.11 +usable/);
  assert.match(text, /no Receive ID echo/);
  assert.ok(text.split('\n').every((l) => l.length <= 100));
  assert.match(
    renderWhich({
      service: 0,
      address: '198.51.100.80',
      bucket: 0x87,
      engine: '192.0.2.12',
      family: 'ipv4',
      why: 'assigned',
    }),
    /198\.51\.100\.80 -> bucket 135 \(0x87\) -> 192\.0\.2\.12/,
  );
  assert.match(
    renderWhich({ service: 0, address: '198.51.100.80', bucket: 0x87, engine: null, family: 'ipv4', why: 'closed' }),
    /refused/,
  );
  assert.equal(
    renderWhich({ service: 0, address: '2001:db8::1', bucket: 0x95, engine: null, family: 'ipv6', why: 'family' }),
    'service 0  2001:db8::1 -> bucket 149 (0x95) -> origin (direct)\n' +
      '  why: this service does not redirect IPv6 (its families): forwarded normally',
  );
});

test("an engine row too long for 100 columns goes on under its notes column, whole (a window's time, a reason's end)", () => {
  const maintenance = {
    activeUntil: null,
    activeCron: null,
    next: '2026-12-06T02:00:00.000Z',
    nextCron: '0 2 * * *',
    nextDurationMs: 3000,
  };
  const long = 'x'.repeat(45);
  const text = renderEngines({ service: 0, engines: [{ ...views[0]!, maintenance, reason: `lenient ${long} end` }] });
  const lines = text.split('\n');
  assert.ok(
    lines.every((l) => l.length <= 100),
    `fits 100 columns:\n${text}`,
  );
  assert.ok(!text.includes('…'), 'nothing cut');
  const notes = lines.slice(2).map((l) => l.slice(70).trim());
  assert.deepEqual(notes.join(' ').split(/[ ;]+/).slice(0, 8), [
    'no',
    'Receive',
    'ID',
    'echo',
    'next',
    'maint',
    '12-06',
    '02:00:00Z',
  ]);
  assert.ok(
    notes.some((n) => n.includes('next maint 12-06 02:00:00Z 3 s')),
    'the window whole on one line',
  );
  assert.equal(notes.join('').replaceAll(' ', '').endsWith(`lenient${long}end`), true, 'the reason to its end');
  assert.ok(
    lines.slice(3).every((l) => l.startsWith(' '.repeat(70))),
    'under the notes column',
  );
});

test('the bucket grid says which change number is in force, and when the data plane is behind the decided one', () => {
  const header = (t: BucketsView) => renderBuckets(t, views, { colour: false, hex: false }).split('\n')[1];
  assert.equal(header(table), 'in force: 7 (applied 2026-12-01T20:00:00.000Z)');
  assert.equal(header({ ...table, changeNumber: 8 }), 'in force: behind (decided 8, in force 7)');
  assert.match(header({ ...table, inForce: null })!, /^in force: none \(the data plane has applied no table/);
});
