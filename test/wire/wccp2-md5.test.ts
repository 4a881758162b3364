// MD5 security against a real vector from Squid 5.7 (test/fixtures/squid-5.7-md5, password wccpsec1).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  decodeMessage,
  encodeMessage,
  findComponent,
  md5DigestOffset,
  signMessage,
  verifyMessage,
  Wccp2PasswordError,
} from '../../src/wire/wccp2/index.js';
import { fixtureBytes } from '../helpers/fixtures.js';

const squid = Buffer.from(
  readFileSync(new URL('../fixtures/squid-5.7-md5/here-i-am-md5-127.0.0.1.hex', import.meta.url), 'utf8').trim(),
  'hex',
);
const PASSWORD = 'wccpsec1';

test("Squid's signed HERE_I_AM verifies with its password and not with another", () => {
  assert.equal(squid.length, 160);
  assert.equal(verifyMessage(squid, PASSWORD), true);
  assert.equal(verifyMessage(squid, 'wccpsec2'), false);
  assert.equal(verifyMessage(squid, 'wccpsec'), false);
  assert.equal(verifyMessage(squid, ''), false);
});

test('a one-byte change anywhere in the message makes verification fail', () => {
  const digestAt = md5DigestOffset(squid);
  assert.equal(digestAt, 16);
  for (let i = 0; i < squid.length; i++) {
    const changed = Buffer.from(squid);
    changed[i] = (changed[i] as number) ^ 0x01;
    assert.equal(verifyMessage(changed, PASSWORD), false, `byte ${i} changed and the message still verified`);
  }
});

test("re-signing Squid's message gives Squid's digest; what we encode and sign verifies", () => {
  const zeroed = Buffer.from(squid);
  zeroed.fill(0, 16, 32);
  assert.deepEqual(signMessage(zeroed, PASSWORD), squid);

  const r = decodeMessage(squid);
  assert.ok(r.ok);
  assert.deepEqual(findComponent(r.value, 'security'), {
    kind: 'security',
    option: 'md5',
    digest: '31dc86f7acee2eab8aa67e3b271fb561',
  });
  // Encoding with the password in one call reproduces Squid's bytes exactly.
  assert.deepEqual(encodeMessage(r.value, { password: PASSWORD }), squid);

  const ours = encodeMessage(
    {
      ...r.value,
      components: r.value.components.map((c) => (c.kind === 'security' ? { kind: 'security', option: 'none' } : c)),
    },
    { password: 'short' },
  );
  assert.equal(verifyMessage(ours, 'short'), true);
  assert.equal(verifyMessage(ours, PASSWORD), false);
});

test('a message without MD5 security never verifies; passwords over 8 bytes are refused', () => {
  const plainMsg = fixtureBytes('squid-5.7/here-i-am-hash-192.0.2.11.hex');
  assert.equal(verifyMessage(plainMsg, ''), false);
  assert.throws(() => verifyMessage(squid, 'ninechars'), Wccp2PasswordError);
  assert.throws(() => signMessage(squid, 'ninechars'), Wccp2PasswordError);
});
