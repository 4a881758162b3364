import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  decodeIcp,
  encodeIcp,
  ICP_OPCODES,
  IcpEncodeError,
  type IcpMessage,
  type IcpOpcode,
} from '../../src/wire/icp.js';

const query: IcpMessage = {
  opcode: 'QUERY',
  requestNumber: 0x01020304,
  options: 0,
  optionData: 0,
  senderAddress: '0.0.0.0',
  requesterAddress: '192.0.2.1',
  url: 'http://198.51.100.80/a',
};

test('a QUERY is laid out as RFC 2186 says: 20-byte header, requester address, NUL-terminated URL', () => {
  const bytes = encodeIcp(query);
  const url = Buffer.from('http://198.51.100.80/a');
  const expected = Buffer.concat([
    Buffer.from([1, 2, 0, 20 + 4 + url.length + 1, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 1]),
    url,
    Buffer.from([0]),
  ]);
  assert.deepEqual(bytes, expected);
  assert.deepEqual(decodeIcp(bytes), { ok: true, value: query });
});

test('a HIT_OBJ carries the URL, a 16-bit object size and the object', () => {
  const msg: IcpMessage = {
    opcode: 'HIT_OBJ',
    requestNumber: 9,
    options: 0x80000000,
    optionData: 0,
    senderAddress: '192.0.2.11',
    url: 'http://x/',
    object: Uint8Array.from([0xde, 0xad, 0xbe]),
  };
  const bytes = encodeIcp(msg);
  assert.equal(bytes.length, 20 + 10 + 2 + 3);
  assert.deepEqual([...bytes.subarray(30, 35)], [0, 3, 0xde, 0xad, 0xbe]);
  const back = decodeIcp(bytes);
  assert.ok(back.ok);
  assert.equal(back.value.opcode, 'HIT_OBJ');
  assert.deepEqual(back.value.opcode === 'HIT_OBJ' && [...back.value.object], [0xde, 0xad, 0xbe]);
});

test('every reply opcode carries just the URL and keeps its code on the wire', () => {
  for (const opcode of ['HIT', 'MISS', 'ERR', 'SECHO', 'DECHO', 'MISS_NOFETCH', 'DENIED'] as const) {
    const bytes = encodeIcp({
      opcode,
      requestNumber: 5,
      options: 0,
      optionData: 0,
      senderAddress: '0.0.0.0',
      url: 'u',
    });
    assert.equal(bytes[0], ICP_OPCODES[opcode]);
    assert.equal(bytes.length, 22);
    const back = decodeIcp(bytes);
    assert.ok(back.ok && back.value.opcode === opcode, opcode);
  }
});

const ip = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((b) => b.join('.'));
const url = fc.string({ maxLength: 200 }).filter((s) => !s.includes('\0'));
const common = {
  requestNumber: fc.nat(0xffffffff),
  options: fc.nat(0xffffffff),
  optionData: fc.nat(0xffffffff),
  senderAddress: ip,
};
const replyOpcodes = ['HIT', 'MISS', 'ERR', 'SECHO', 'DECHO', 'MISS_NOFETCH', 'DENIED'] as const;
export const arbIcp: fc.Arbitrary<IcpMessage> = fc.oneof(
  fc.record({ ...common, opcode: fc.constant('QUERY' as const), requesterAddress: ip, url }),
  fc.record({ ...common, opcode: fc.constantFrom(...replyOpcodes), url }),
  fc.record({ ...common, opcode: fc.constant('HIT_OBJ' as const), url, object: fc.uint8Array({ maxLength: 300 }) }),
);

test('property: decode(encode(m)) == m for every message type', () => {
  fc.assert(
    fc.property(arbIcp, (m) => {
      const back = decodeIcp(encodeIcp(m));
      assert.ok(back.ok, back.ok ? '' : back.error.detail);
      assert.deepEqual(
        back.value.opcode === 'HIT_OBJ' ? { ...back.value, object: [...back.value.object] } : back.value,
        m.opcode === 'HIT_OBJ' ? { ...m, object: [...m.object] } : { ...m },
      ); // spread: fast-check records have no prototype
    }),
    { numRuns: 2000, seed: 2186 },
  );
});

function err(bytes: Uint8Array): { component: string; offset: number; reason: string } {
  const r = decodeIcp(bytes);
  assert.ok(!r.ok, 'expected a decode error');
  return { component: r.error.component, offset: r.error.offset, reason: r.error.reason };
}

test('bad datagrams give a DecodeError naming the field and offset', () => {
  const good = encodeIcp(query);
  assert.deepEqual(err(good.subarray(0, 19)), { component: 'header', offset: 0, reason: 'truncated' });
  const v3 = Buffer.from(good);
  v3[1] = 3;
  assert.deepEqual(err(v3), { component: 'header', offset: 1, reason: 'bad-version' });
  const op = Buffer.from(good);
  op[0] = 0;
  assert.deepEqual(err(op), { component: 'header', offset: 0, reason: 'unknown-opcode' });
  assert.deepEqual(err(good.subarray(0, good.length - 1)), { component: 'header', offset: 2, reason: 'truncated' });
  const noNul = Buffer.from(good);
  noNul[noNul.length - 1] = 0x41;
  assert.deepEqual(err(noNul), { component: 'URL', offset: 24, reason: 'unterminated-url' });
  const trailing = Buffer.concat([good, Buffer.from([0x41])]);
  trailing.writeUInt16BE(trailing.length, 2);
  assert.equal(err(trailing).reason, 'trailing-bytes');
  const hitObj = encodeIcp({
    opcode: 'HIT_OBJ',
    requestNumber: 1,
    options: 0,
    optionData: 0,
    senderAddress: '0.0.0.0',
    url: 'u',
    object: Uint8Array.of(1, 2),
  });
  const badSize = Buffer.from(hitObj);
  badSize.writeUInt16BE(5, 22);
  assert.deepEqual(err(badSize), { component: 'object size', offset: 22, reason: 'bad-length' });
});

test('encode refuses what the wire cannot carry, with a typed error', () => {
  assert.throws(() => encodeIcp({ ...query, url: 'a\0b' }), IcpEncodeError);
  assert.throws(() => encodeIcp({ ...query, requesterAddress: '300.1.1.1' }), /requesterAddress/);
  assert.throws(() => encodeIcp({ ...query, requestNumber: -1 }), /requestNumber/);
});

test('fuzz: 25,000 seeded inputs each give a value or a DecodeError inside the datagram', () => {
  const seeds = fc.sample(arbIcp, { numRuns: 200, seed: 42 }).map((m) => encodeIcp(m));
  const mutated = fc
    .tuple(fc.constantFrom(...seeds), fc.array(fc.tuple(fc.nat(400), fc.nat(255)), { maxLength: 6 }), fc.nat(500))
    .map(([s, edits, cut]) => {
      const b = Buffer.from(s);
      for (const [at, v] of edits) if (b.length > 0) b[at % b.length] = v;
      return cut % 3 === 0 ? b.subarray(0, cut % (b.length + 1)) : b;
    });
  const inputs = [
    ...fc.sample(fc.uint8Array({ maxLength: 120 }), { numRuns: 10_000, seed: 1 }),
    ...fc.sample(mutated, { numRuns: 15_000, seed: 2 }),
  ];
  assert.ok(inputs.length >= 20_000);
  const counts = { ok: 0, error: 0 };
  const opcodes = new Set<IcpOpcode>();
  for (const input of inputs) {
    const r = decodeIcp(input);
    if (r.ok) {
      counts.ok++;
      opcodes.add(r.value.opcode);
      const again = decodeIcp(encodeIcp(r.value)); // what we decoded can always be re-encoded and decodes the same
      assert.ok(again.ok);
      assert.equal(again.value.opcode, r.value.opcode);
      assert.equal(again.value.requestNumber, r.value.requestNumber);
    } else {
      counts.error++;
      assert.equal(r.error.kind, 'decode-error');
      assert.ok(
        r.error.offset >= 0 && r.error.offset <= input.length,
        `offset ${r.error.offset} outside ${input.length}`,
      );
      assert.ok(r.error.detail.length > 0);
    }
  }
  // Both outcomes occur: the mutations reach valid and invalid messages alike.
  assert.ok(counts.ok > 1000 && counts.error > 1000, JSON.stringify(counts));
  assert.equal(opcodes.size, Object.keys(ICP_OPCODES).length);
});
