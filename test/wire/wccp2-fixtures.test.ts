// Real Squid datagrams decode to the fields their READMEs list and re-encode byte for byte.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  decodeMessage,
  encodeMessage,
  findComponent,
  describeMessage,
  type Wccp2Message,
} from '../../src/wire/wccp2/index.js';
import { fixtureBytes as load } from '../helpers/fixtures.js';
import { NO_SECURITY, WEB_CACHE_SERVICE } from '../helpers/wccp2.js';

function decode(bytes: Buffer): Wccp2Message {
  const r = decodeMessage(bytes);
  assert.ok(r.ok, r.ok ? '' : JSON.stringify(r.error));
  return r.value;
}

function assertSquidHereIAm(msg: Wccp2Message, cache: string, receiveId: number, assignment: 'hash' | 'mask'): void {
  assert.equal(msg.type, 'HERE_I_AM');
  assert.equal(msg.version, 0x0200);
  assert.deepEqual(
    msg.components.map((c) => c.kind),
    ['security', 'service', 'web-cache-identity', 'web-cache-view', 'capabilities'],
  );
  assert.deepEqual(findComponent(msg, 'security'), NO_SECURITY);
  assert.deepEqual(findComponent(msg, 'service'), WEB_CACHE_SERVICE);
  const wc = findComponent(msg, 'web-cache-identity')?.element;
  assert.equal(wc?.address, cache);
  assert.equal(wc?.hashRevision, 0);
  assert.equal(wc?.flags, 0);
  assert.equal(wc?.status, 0);
  if (assignment === 'hash') {
    assert.deepEqual(wc?.assignment, { type: 'hash', buckets: [] });
    assert.equal(wc?.weight, 10000);
  } else {
    assert.deepEqual(wc?.assignment, {
      type: 'mask',
      sets: [
        {
          mask: { srcAddrMask: 0, dstAddrMask: 0x1741, srcPortMask: 0, dstPortMask: 0 },
          values: [],
        },
      ],
    });
    assert.equal(wc?.weight, 0);
  }
  assert.deepEqual(findComponent(msg, 'web-cache-view'), {
    kind: 'web-cache-view',
    changeNumber: 1,
    routers: [{ routerId: '192.0.2.1', receiveId }],
    caches: [],
  });
  assert.deepEqual(findComponent(msg, 'capabilities')?.elements, [
    { form: 'value', type: 1, value: 0x2 },
    { form: 'value', type: 2, value: assignment === 'hash' ? 0x1 : 0x2 },
    { form: 'value', type: 3, value: 0x2 },
  ]);
}

for (const [file, cache, assignment, size] of [
  ['squid-5.7/here-i-am-hash-192.0.2.11.hex', '192.0.2.11', 'hash', 144],
  ['squid-5.7/here-i-am-hash-192.0.2.12.hex', '192.0.2.12', 'hash', 144],
  ['squid-5.7/here-i-am-mask-192.0.2.12.hex', '192.0.2.12', 'mask', 132],
] as const) {
  test(`Squid 5.7 ${file} decodes to the README's fields and re-encodes exactly`, () => {
    const bytes = load(file);
    assert.equal(bytes.length, size);
    const msg = decode(bytes);
    assertSquidHereIAm(msg, cache, 0, assignment);
    assert.deepEqual(encodeMessage(msg), bytes);
  });
}

test('Squid master HERE_I_AM echoes Receive ID 1 and re-encodes exactly', () => {
  const bytes = load('squid-master/here-i-am-echoing-receive-id-192.0.2.11.hex');
  const msg = decode(bytes);
  assertSquidHereIAm(msg, '192.0.2.11', 1, 'hash');
  assert.deepEqual(encodeMessage(msg), bytes);
});

test('Squid master REDIRECT_ASSIGN: 336 bytes, key 192.0.2.11/1, all 256 buckets to index 0', () => {
  const bytes = load('squid-master/redirect-assign-192.0.2.11.hex');
  assert.equal(bytes.length, 336);
  const msg = decode(bytes);
  assert.equal(msg.type, 'REDIRECT_ASSIGN');
  const a = findComponent(msg, 'assignment-info');
  assert.ok(a);
  assert.deepEqual(a.key, { address: '192.0.2.11', changeNumber: 1 });
  assert.equal(a.routers.length, 1);
  assert.equal(a.routers[0]?.routerId, '192.0.2.1');
  assert.deepEqual(a.caches, ['192.0.2.11']);
  assert.equal(a.buckets.length, 256);
  assert.ok(a.buckets.every((b) => b !== null && b.cache === 0 && !b.alternate));
  assert.deepEqual(encodeMessage(msg), bytes);
});

test('describeMessage prints offsets, lengths and fields like the fixture README', () => {
  const text = describeMessage(decode(load('squid-5.7/here-i-am-hash-192.0.2.11.hex')));
  const lines = text.split('\n');
  assert.equal(lines[0], 'type=10 HERE_I_AM version=0x0200 length=136 (144 bytes with the 8-byte header)');
  assert.match(text, /^@44 3 WC_ID_INFO len=44: cache ip=192\.0\.2\.11, .*weight=10000/m);
  assert.match(text, /^@92 5 WC_VIEW_INFO len=20: change number=1, 1 routers \[\{192\.0\.2\.1, received_id 0\}\]/m);
  assert.match(
    text,
    /^@116 8 CAPABILITY_INFO len=24: \{1 forwarding=0x2 L2\} \{2 assignment=0x1 hash\} \{3 return=0x2 L2\}$/m,
  );
});
