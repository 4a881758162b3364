// What the router actually sends (control/translate.ts, the code path of every reply) as Debian's tshark reads it:
// I_SEE_YOU for hash and mask services, with and without MD5, with a SHUTDOWN_RESPONSE, and REMOVAL_QUERY.
// No malformed packet and no expert warning or error at all: no allowance here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { iSeeYouMessage, removalQueryMessage } from '../../src/control/translate.js';
import { encodeMessage } from '../../src/wire/wccp2/index.js';
import { assignMask, emptyMaskTable, toMaskValueSets } from '../../src/buckets/mask.js';
import type { ISeeYouPlan, RemovalQueryPlan } from '../../src/cluster/index.js';
import { udpFrame } from '../helpers/pcap-file.js';
import { complaints, field, haveTshark, tsharkFrames } from '../helpers/tshark.js';
import { need } from '../helpers/require.js';

const skip = need(haveTshark, 'tshark (Debian package tshark)');
const ROUTER = '192.0.2.1';
const ENGINES = ['192.0.2.11', '192.0.2.12'];
const standard = { type: 'standard' as const, id: 0, priority: 0, protocol: 0, flags: 0, ports: [] };
const dynamic = { type: 'dynamic' as const, id: 90, priority: 240, protocol: 6, flags: 0x12, ports: [80, 8080] };

const hashPlan: ISeeYouPlan = {
  service: standard,
  routerAddress: ROUTER,
  receiveId: 9,
  engine: ENGINES[0]!,
  memberChangeNumber: 3,
  assignmentKey: { address: ROUTER, changeNumber: 5 },
  routers: [ROUTER, '192.0.2.2'],
  engines: ENGINES.map((address, i) => ({
    address,
    weight: 10000,
    buckets: Array.from({ length: 128 }, (_, b) => b + 128 * i),
  })),
  table: { changeNumber: 5, buckets: Array.from({ length: 256 }, (_, b) => ENGINES[b < 128 ? 0 : 1]!) },
  capabilities: { forwarding: 'l2', assignment: 'hash', return: 'l2' },
  maskSets: [],
};
const mask = assignMask(
  emptyMaskTable(),
  ENGINES.map((address) => ({ address, weight: 1, priority: 0 })),
  { mode: 'balance' },
);
const maskPlan: ISeeYouPlan = {
  ...hashPlan,
  service: dynamic,
  capabilities: { forwarding: 'l2', assignment: 'mask', return: 'l2' },
  maskSets: toMaskValueSets(mask),
};
const removal: RemovalQueryPlan = { service: standard, routerAddress: ROUTER, receiveId: 10, engine: ENGINES[1]! };

const cases = [
  { name: 'I_SEE_YOU, hash service', bytes: encodeMessage(iSeeYouMessage(hashPlan, { md5: false })), type: '11' },
  {
    name: 'I_SEE_YOU, hash service, MD5',
    bytes: encodeMessage(iSeeYouMessage(hashPlan, { md5: true }), { password: 'wccpsec1' }),
    type: '11',
  },
  {
    name: 'I_SEE_YOU with SHUTDOWN_RESPONSE',
    bytes: encodeMessage(iSeeYouMessage(hashPlan, { md5: false, shutdownResponse: true })),
    type: '11',
  },
  {
    name: 'I_SEE_YOU, mask service (Assignment Map)',
    bytes: encodeMessage(iSeeYouMessage(maskPlan, { md5: false })),
    type: '11',
  },
  { name: 'REMOVAL_QUERY', bytes: encodeMessage(removalQueryMessage(removal, { md5: false })), type: '13' },
  {
    name: 'REMOVAL_QUERY, MD5',
    bytes: encodeMessage(removalQueryMessage(removal, { md5: true }), { password: 'wccpsec1' }),
    type: '13',
  },
];

test(
  'every kind of datagram the router sends passes tshark with no malformed packet and no expert info',
  { skip },
  () => {
    const packets = tsharkFrames(cases.map((c) => udpFrame({ payload: c.bytes, src: ROUTER, dst: ENGINES[0]! })));
    assert.equal(packets.length, cases.length);
    packets.forEach((p, i) => {
      const c = cases[i]!;
      assert.equal(p.malformed, false, `${c.name}: ${complaints(p)}`);
      assert.deepEqual(p.experts, [], `${c.name}: ${complaints(p)}`);
      assert.equal(field(p, 'wccp.message'), c.type, c.name);
    });
  },
);
