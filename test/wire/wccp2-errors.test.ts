// Malformed datagrams give specific DecodeErrors: reason, component and offset.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeMessage, encodeMessage, type Wccp2Message } from '../../src/wire/wccp2/index.js';
import { fixtureBytes } from '../helpers/fixtures.js';
import { NO_SECURITY, WEB_CACHE_SERVICE } from '../helpers/wccp2.js';

const hereIAm = fixtureBytes('squid-5.7/here-i-am-hash-192.0.2.11.hex');

function error(bytes: Uint8Array): { reason: string; offset: number; component: string; message: string } {
  const r = decodeMessage(bytes);
  assert.equal(r.ok, false, 'expected a decode error');
  if (r.ok) throw new Error('unreachable');
  assert.equal(r.error.protocol, 'WCCP2');
  assert.ok(r.error.detail.length > 10);
  return { reason: r.error.reason, offset: r.error.offset, component: r.error.component, message: r.error.message };
}
/** Sets the header length to match a changed datagram. */
function fixLength(b: Buffer): Buffer {
  b.writeUInt16BE(b.length - 8, 6);
  return b;
}

test('truncated header', () => {
  assert.deepEqual(error(hereIAm.subarray(0, 5)), {
    reason: 'truncated',
    offset: 0,
    component: 'header',
    message: 'unknown',
  });
  assert.deepEqual(error(Buffer.alloc(0)), { reason: 'truncated', offset: 0, component: 'header', message: 'unknown' });
});

test('bad message type and bad version', () => {
  const t = Buffer.from(hereIAm);
  t.writeUInt32BE(9, 0);
  assert.deepEqual(error(t), { reason: 'bad-message-type', offset: 0, component: 'header', message: 'unknown' });
  const v = Buffer.from(hereIAm);
  v.writeUInt16BE(0x0100, 4);
  assert.deepEqual(error(v), { reason: 'bad-version', offset: 4, component: 'header', message: 'HERE_I_AM' });
  v.writeUInt16BE(0x0201, 4);
  assert.equal(decodeMessage(v).ok, true);
});

test('header length that does not match the datagram', () => {
  assert.deepEqual(error(hereIAm.subarray(0, 140)), {
    reason: 'length-mismatch',
    offset: 6,
    component: 'header',
    message: 'HERE_I_AM',
  });
  assert.deepEqual(error(Buffer.concat([hereIAm, Buffer.alloc(4)])).reason, 'length-mismatch');
});

test('component running past the end of the datagram', () => {
  const b = Buffer.from(hereIAm);
  b.writeUInt16BE(200, 92 + 2); // WC_VIEW_INFO at offset 92 claims 200 bytes
  assert.deepEqual(error(b), {
    reason: 'component-past-end',
    offset: 92,
    component: 'WC_VIEW_INFO',
    message: 'HERE_I_AM',
  });
});

test('component shorter than its content', () => {
  // WC_VIEW_INFO says 1 router but its length leaves room for none: the error points at that count (offset 100).
  const b = Buffer.concat([
    hereIAm.subarray(0, 92),
    Buffer.from('0005000c000000010000000100000000', 'hex'),
    hereIAm.subarray(116),
  ]);
  assert.deepEqual(error(fixLength(b)), {
    reason: 'truncated',
    offset: 92 + 8,
    component: 'WC_VIEW_INFO',
    message: 'HERE_I_AM',
  });
});

test('too many caches and too many routers', () => {
  const caches = Buffer.from(hereIAm);
  caches.writeUInt32BE(33, 92 + 4 + 4 + 4 + 8); // WC_VIEW_INFO Number of Web-Caches
  assert.deepEqual(error(caches), {
    reason: 'too-many-caches',
    offset: 112,
    component: 'WC_VIEW_INFO',
    message: 'HERE_I_AM',
  });
  const routers = Buffer.from(hereIAm);
  routers.writeUInt32BE(33, 92 + 4 + 4);
  assert.deepEqual(error(routers), {
    reason: 'too-many-routers',
    offset: 100,
    component: 'WC_VIEW_INFO',
    message: 'HERE_I_AM',
  });
});

test('missing required component, and a duplicated one', () => {
  // Drop WC_VIEW_INFO (offset 92, 24 bytes with its header).
  const b = fixLength(Buffer.concat([hereIAm.subarray(0, 92), hereIAm.subarray(116)]));
  assert.deepEqual(error(b), {
    reason: 'missing-component',
    offset: b.length,
    component: 'WC_VIEW_INFO',
    message: 'HERE_I_AM',
  });
  const dup = fixLength(Buffer.concat([hereIAm.subarray(0, 16), hereIAm.subarray(8)]));
  assert.deepEqual(error(dup), {
    reason: 'duplicate-component',
    offset: 16,
    component: 'SECURITY_INFO',
    message: 'HERE_I_AM',
  });
  const isy: Wccp2Message = {
    type: 'I_SEE_YOU',
    version: 0x0200,
    components: [
      NO_SECURITY,
      WEB_CACHE_SERVICE,
      {
        kind: 'router-identity',
        router: { routerId: '192.0.2.1', receiveId: 1 },
        sentTo: '192.0.2.1',
        receivedFrom: ['192.0.2.11'],
      },
      {
        kind: 'router-view',
        memberChangeNumber: 1,
        assignmentKey: { address: '0.0.0.0', changeNumber: 0 },
        routers: ['192.0.2.1'],
        caches: [],
      },
    ],
  };
  const e = error(encodeMessage(isy));
  assert.equal(e.reason, 'missing-component');
  assert.equal(e.component, 'REDIRECT_ASSIGNMENT or ASSIGN_MAP or ALT_ASSIGNMENT');
});

test('bucket naming a web cache the assignment does not list', () => {
  const ra = fixtureBytes('squid-master/redirect-assign-192.0.2.11.hex');
  const at = ra.length - 256 + 7;
  ra[at] = 1; // only index 0 exists
  assert.deepEqual(error(ra), {
    reason: 'bad-bucket',
    offset: at,
    component: 'REDIRECT_ASSIGNMENT',
    message: 'REDIRECT_ASSIGN',
  });
});

test('unknown component is kept, not fatal', () => {
  const b = fixLength(Buffer.concat([hereIAm, Buffer.from('00630004deadbeef', 'hex')]));
  const r = decodeMessage(b);
  assert.ok(r.ok);
  assert.deepEqual(r.value.components.at(-1), { kind: 'unknown', type: 99, data: 'deadbeef' });
  assert.deepEqual(encodeMessage(r.value), b);
});
