import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  wccpHash,
  xorOfBytes,
  bucketOf,
  addressKey,
  primaryKey,
  alternateKey,
  lookupBucket,
  type Flow,
} from '../../src/buckets/hash.js';
import { parseIpv4 } from '../../src/buckets/ipv4.js';
import { ipv6Words } from '../../src/address.js';
import type { EngineAddress } from '../../src/buckets/table.js';
import { seededUint32 } from '../helpers/seeded.js';

const rng = seededUint32;

// The draft's formula (5.6.2), spelled again here in BigInt so it shares nothing with the code under test.
function draftHash(key: number): number {
  let hash = BigInt(key);
  hash ^= hash >> 16n;
  hash ^= hash >> 8n;
  return Number(hash & 0xffn);
}

function bytesXor(key: number): number {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(key);
  return (b[0] ?? 0) ^ (b[1] ?? 0) ^ (b[2] ?? 0) ^ (b[3] ?? 0);
}

test('the hash equals the draft formula and the XOR of the key bytes on 1,000,000 seeded keys', () => {
  const next = rng(20240517);
  let mismatches = 0;
  for (let i = 0; i < 1_000_000; i++) {
    const key = next();
    const h = wccpHash(key);
    if (h !== draftHash(key) || h !== bytesXor(key) || xorOfBytes(key) !== h) mismatches++;
  }
  assert.equal(mismatches, 0);
});

test('bucketOf hashes the destination address read big-endian', () => {
  assert.equal(bucketOf('192.0.2.1'), 192 ^ 0 ^ 2 ^ 1);
  assert.equal(bucketOf('203.0.113.77'), 203 ^ 113 ^ 77);
  assert.equal(bucketOf(parseIpv4('198.51.100.9')), 198 ^ 51 ^ 100 ^ 9);
});

// 16 bytes as the WHATWG URL parser writes them (RFC 5952: lower case, the longest run of zero groups as ::), so the
// text the code under test reads is compressed by code that shares nothing with it.
function ipv6Text(bytes: Buffer, compressed: boolean): string {
  const full = Array.from({ length: 8 }, (_, i) => bytes.readUInt16BE(i * 2).toString(16)).join(':');
  return compressed ? new URL(`http://[${full}]/`).hostname.slice(1, -1) : full;
}

test('an IPv6 destination hashes to the XOR of its 16 bytes (the four 32-bit words folded by XOR), 20,000 seeded', () => {
  const next = rng(36);
  let mismatches = 0;
  for (let i = 0; i < 20_000; i++) {
    const bytes = Buffer.alloc(16);
    for (let w = 0; w < 4; w++) bytes.writeUInt32BE(next(), w * 4);
    // Zero runs, so the :: of the compressed form is met often.
    if (i % 3 === 0) bytes.fill(0, 4, 4 + (i % 12));
    const want = bytes.reduce((a, b) => a ^ b, 0);
    const words = [0, 4, 8, 12].map((o) => bytes.readUInt32BE(o));
    const fold = (words[0]! ^ words[1]! ^ words[2]! ^ words[3]!) >>> 0;
    for (const text of [ipv6Text(bytes, false), ipv6Text(bytes, true)]) {
      if (bucketOf(text) !== want || addressKey(text) !== fold) mismatches++;
    }
  }
  assert.equal(mismatches, 0);
});

test('IPv6 examples: the documentation prefix, ::, a dotted-quad tail; not a zone, not a half address', () => {
  // 2001:db8::1 -> 0x20 ^ 0x01 ^ 0x0d ^ 0xb8 ^ 0x01
  assert.equal(bucketOf('2001:db8::1'), 0x20 ^ 0x01 ^ 0x0d ^ 0xb8 ^ 0x01);
  assert.equal(bucketOf('2001:DB8::1'), bucketOf('2001:db8::1'));
  assert.equal(bucketOf('2001:db8:0:0:0:0:0:1'), bucketOf('2001:db8::1'));
  assert.equal(bucketOf('::'), 0);
  assert.equal(bucketOf('::1'), 1);
  // An IPv4-mapped address is hashed as the IPv6 address it is: ffff ^ 192.0.2.1, not 192.0.2.1's bucket.
  assert.equal(bucketOf('::ffff:192.0.2.1'), 0xff ^ 0xff ^ 192 ^ 0 ^ 2 ^ 1);
  assert.deepEqual(ipv6Words('2001:db8::192.0.2.1'), [0x20010db8, 0, 0, 0xc0000201]);
  for (const bad of ['fe80::1%eth0', '2001:db8::1::2', '2001:db8:1', '2001:db8::g', '1.2.3', '', '::ffff:1.2.3']) {
    assert.throws(() => bucketOf(bad), /is not an IPv4 or IPv6 address/, bad);
  }
});

// The keys per the draft: XOR (from 0) of the fields the flags select; primary bits 0x1..0x8, alternate 0x100..0x800.
function expectedKey(flow: Flow, bits: number): number {
  let k = 0n;
  if (bits & 1) k ^= BigInt(flow.sourceIp);
  if (bits & 2) k ^= BigInt(flow.destinationIp);
  if (bits & 4) k ^= BigInt(flow.sourcePort);
  if (bits & 8) k ^= BigInt(flow.destinationPort);
  return Number(k);
}

test('every combination of primary and alternate hash flags selects the draft key, on a sample of flows', () => {
  const next = rng(7);
  const flows: Flow[] = Array.from({ length: 200 }, () => ({
    sourceIp: next(),
    destinationIp: next(),
    sourcePort: next() & 0xffff,
    destinationPort: next() & 0xffff,
  }));
  for (let p = 0; p < 16; p++) {
    for (let a = 0; a < 16; a++) {
      const flags = p | (a << 8) | 0x10; // Ports Defined must not change the key
      for (const f of flows) {
        assert.equal(
          primaryKey(f, flags),
          p === 0 ? f.destinationIp : expectedKey(f, p),
          `flags ${flags.toString(16)}`,
        );
        assert.equal(alternateKey(f, flags), a === 0 ? null : expectedKey(f, a), `flags ${flags.toString(16)}`);
      }
    }
  }
});

test('lookup: unassigned forwards normally, plain bucket redirects, A flag rehashes with the alternate fields', () => {
  const flow: Flow = {
    sourceIp: parseIpv4('198.51.100.20'),
    destinationIp: parseIpv4('203.0.113.5'),
    sourcePort: 40000,
    destinationPort: 80,
  };
  const flags = 0x2 | 0x100 | 0x800; // primary: destination IP; alternate: source IP ^ destination port
  const primary = 203 ^ 0 ^ 113 ^ 5;
  const altKey = (parseIpv4('198.51.100.20') ^ 80) >>> 0;
  const secondary = draftHash(altKey);
  assert.notEqual(primary, secondary);
  const buckets: (EngineAddress | null)[] = new Array(256).fill(null);
  assert.deepEqual(lookupBucket({ buckets }, flow, flags), { kind: 'unassigned', bucket: primary });
  buckets[primary] = '192.0.2.10';
  assert.deepEqual(lookupBucket({ buckets }, flow, flags), { kind: 'primary', bucket: primary, engine: '192.0.2.10' });
  const alternate = new Array<boolean>(256).fill(false);
  alternate[primary] = true;
  assert.deepEqual(lookupBucket({ buckets }, flow, flags, alternate), { kind: 'unassigned', bucket: secondary });
  buckets[secondary] = '192.0.2.11';
  assert.deepEqual(lookupBucket({ buckets }, flow, flags, alternate), {
    kind: 'alternate',
    primaryBucket: primary,
    bucket: secondary,
    engine: '192.0.2.11',
  });
  // A flag set but the service names no alternate field: the primary engine serves.
  assert.deepEqual(lookupBucket({ buckets }, flow, 0x2, alternate), {
    kind: 'primary',
    bucket: primary,
    engine: '192.0.2.10',
  });
});
