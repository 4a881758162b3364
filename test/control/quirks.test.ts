// The opt-in `squid-capability-stride` quirk: current Squid reads capability elements 12 bytes apart, so each real
// element is followed by a zero-length one (component length 36, as the lab found Squid accepting). Off by default.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { iSeeYouMessage } from '../../src/control/translate.js';
import { decodeMessage, encodeMessage, findComponent } from '../../src/wire/wccp2/index.js';
import type { ISeeYouPlan } from '../../src/cluster/index.js';

const plan: ISeeYouPlan = {
  service: { type: 'standard', id: 0, priority: 0, protocol: 0, flags: 0, ports: [] },
  routerAddress: '192.0.2.1',
  receiveId: 7,
  engine: '192.0.2.11',
  memberChangeNumber: 2,
  assignmentKey: { address: '192.0.2.1', changeNumber: 3 },
  routers: ['192.0.2.1'],
  engines: [{ address: '192.0.2.11', weight: 10000, buckets: Array.from({ length: 256 }, (_, i) => i) }],
  table: { changeNumber: 3, buckets: Array.from({ length: 256 }, () => '192.0.2.11') },
  capabilities: { forwarding: 'l2', assignment: 'hash', return: 'l2' },
  maskSets: [],
};

/** The Capabilities component's (type 8) length field, read from the bytes. */
function capabilitiesLength(bytes: Buffer): number {
  for (let pos = 8; pos + 4 <= bytes.length;) {
    const type = bytes.readUInt16BE(pos);
    const len = bytes.readUInt16BE(pos + 2);
    if (type === 8) return len;
    pos += 4 + len;
  }
  throw new Error('no capabilities component');
}

test('by default the three methods are three 8-byte elements (length 24), as the draft lays them out', () => {
  const bytes = encodeMessage(iSeeYouMessage(plan, { md5: false }));
  assert.equal(capabilitiesLength(bytes), 24);
});

test('with squid-capability-stride each method is followed by a zero-length element (length 36) and still decodes', () => {
  const bytes = encodeMessage(iSeeYouMessage(plan, { md5: false, quirks: ['squid-capability-stride'] }));
  assert.equal(capabilitiesLength(bytes), 36);
  const d = decodeMessage(bytes);
  assert.ok(d.ok, d.ok ? '' : d.error.detail);
  const caps = findComponent(d.value, 'capabilities');
  assert.deepEqual(
    caps?.elements.map((e) => [e.type, e.form === 'value' ? e.value : e.data]),
    [
      [1, 2],
      [0, ''],
      [2, 1],
      [0, ''],
      [3, 2],
      [0, ''],
    ],
  );
});
