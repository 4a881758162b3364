import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  wccpHash,
  xorOfBytes,
  bucketOf,
  primaryKey,
  alternateKey,
  lookupBucket,
  type Flow,
} from '../../src/buckets/hash.js';
import { parseIpv4 } from '../../src/buckets/ipv4.js';
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
