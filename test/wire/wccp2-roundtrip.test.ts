// Property: for every message and every component within the protocol's bounds, decode(encode(x)) equals x.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { decodeMessage, encodeMessage, type Component, type Wccp2Message } from '../../src/wire/wccp2/index.js';
import { components, message, plain } from '../fixtures/wccp2-arbitraries.js';
import { NO_SECURITY, WEB_CACHE_SERVICE } from '../helpers/wccp2.js';

function roundTrip(msg: Wccp2Message): void {
  const bytes = encodeMessage(msg);
  const r = decodeMessage(bytes);
  assert.ok(r.ok, r.ok ? '' : JSON.stringify(r.error));
  assert.deepEqual(r.value, msg);
  assert.deepEqual(encodeMessage(r.value), bytes);
}

test('every message round-trips through encode and decode', () => {
  fc.assert(fc.property(message, roundTrip), { numRuns: 400, seed: 20480 });
});

for (const kind of Object.keys(components) as Component['kind'][]) {
  test(`component ${kind} round-trips inside an otherwise minimal message`, () => {
    const base: Component[] = [
      NO_SECURITY,
      {
        kind: 'service',
        serviceType: 'standard',
        serviceId: 0,
        priority: 0,
        protocol: 6,
        flags: 2,
        ports: [80, 0, 0, 0, 0, 0, 0, 0],
      },
      { kind: 'router-query', routerId: '192.0.2.1', receiveId: 7, sentTo: '192.0.2.1', target: '192.0.2.11' },
    ];
    // A required kind replaces the base's own; any other kind is added after them.
    const withComponent = (c: Component): Component[] =>
      base.some((b) => b.kind === c.kind) ? base.map((b) => (b.kind === c.kind ? c : b)) : [...base, c];
    fc.assert(
      fc.property(components[kind], (c) =>
        roundTrip({ type: 'REMOVAL_QUERY', version: 0x0200, components: withComponent(plain(c)) }),
      ),
      { numRuns: 150, seed: kind.length },
    );
  });
}

test('buckets in a Web-Cache Identity Element: bucket n is byte n>>3, bit 1<<(n&7)', () => {
  const bytes = encodeMessage({
    type: 'HERE_I_AM',
    version: 0x0200,
    components: [
      NO_SECURITY,
      WEB_CACHE_SERVICE,
      {
        kind: 'web-cache-identity',
        element: {
          address: '192.0.2.11',
          hashRevision: 0,
          flags: 1,
          assignment: { type: 'hash', buckets: [0, 9, 255] },
          weight: 1,
          status: 0,
        },
      },
      { kind: 'web-cache-view', changeNumber: 1, routers: [], caches: [] },
    ],
  });
  const block = bytes.subarray(44 + 4 + 8, 44 + 4 + 8 + 32);
  assert.equal(bytes.readUInt16BE(44 + 4 + 6), 0x0001); // U flag, assignment type 0 (hash)
  assert.equal(block[0], 0x01);
  assert.equal(block[1], 0x02);
  assert.equal(block[31], 0x80);
  assert.equal(
    block.reduce((s, b) => s + (b === 0 ? 0 : 1), 0),
    3,
  );
});
