import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  packetTransportChecksum,
  decodeGreRedirect,
  decodeIpv4Header,
  encodeGreRedirect,
  encodeIpv4Tcp,
  GreEncodeError,
  internetChecksum,
  onesComplementSum,
  transportChecksum,
  IP_PROTOCOL_TCP,
  TCP_FLAGS,
} from '../../src/wire/gre.js';

const inner = encodeIpv4Tcp({ src: '203.0.113.10', dst: '198.51.100.80', srcPort: 40000, dstPort: 80, seq: 1 });

test('the GRE header is flags/version 0 + protocol 0x883E, then the redirect header, then the inner packet', () => {
  const bytes = encodeGreRedirect(
    { serviceId: 90, dynamic: true, alternate: false, altBucket: 7, priBucket: 200 },
    inner,
  );
  assert.deepEqual([...bytes.subarray(0, 8)], [0x00, 0x00, 0x88, 0x3e, 0x01, 90, 7, 200]);
  assert.deepEqual(bytes.subarray(8), inner);
  const alt = encodeGreRedirect({ serviceId: 0, dynamic: false, alternate: true, altBucket: 1, priBucket: 2 }, inner);
  assert.equal(alt[4], 0x02);
  // Linux's GRE receive path skips the redirect header only when its first nibble is not 4 (an IPv4 header).
  for (const d of [false, true])
    for (const a of [false, true]) {
      const b = encodeGreRedirect({ serviceId: 0, dynamic: d, alternate: a, altBucket: 0, priBucket: 0 }, inner);
      assert.notEqual((b[4] ?? 0) >> 4, 4);
    }
});

test('the inner IPv4+TCP packet has a correct IP header checksum and TCP checksum', () => {
  const h = decodeIpv4Header(inner);
  assert.ok(h.ok);
  assert.deepEqual(
    {
      src: h.value.src,
      dst: h.value.dst,
      protocol: h.value.protocol,
      totalLength: h.value.totalLength,
      ok: h.value.checksumOk,
    },
    { src: '203.0.113.10', dst: '198.51.100.80', protocol: IP_PROTOCOL_TCP, totalLength: 40, ok: true },
  );
  assert.equal(inner[33], TCP_FLAGS.SYN);
  // A segment with a correct checksum sums (with its pseudo-header) to zero.
  assert.equal(transportChecksum('203.0.113.10', '198.51.100.80', IP_PROTOCOL_TCP, inner.subarray(20)), 0);
  const broken = Buffer.from(inner);
  broken.writeUInt8(broken.readUInt8(15) ^ 1, 15);
  const hb = decodeIpv4Header(broken);
  assert.ok(hb.ok && !hb.value.checksumOk);
});

test('internetChecksum matches the RFC 1071 worked example', () => {
  // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2, so the checksum is 220d.
  const bytes = Uint8Array.from([0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
  assert.equal(onesComplementSum(bytes), 0xddf2);
  assert.equal(internetChecksum(bytes), 0x220d);
});

const ip = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((b) => b.join('.'));
const arbHeader = fc.record({
  serviceId: fc.nat(255),
  dynamic: fc.boolean(),
  alternate: fc.boolean(),
  altBucket: fc.nat(255),
  priBucket: fc.nat(255),
});
const arbInner = fc
  .record({
    src: ip,
    dst: ip,
    srcPort: fc.nat(65535),
    dstPort: fc.nat(65535),
    seq: fc.nat(0xffffffff),
    flags: fc.nat(0x3f),
    payload: fc.uint8Array({ maxLength: 200 }),
  })
  .map((o) => encodeIpv4Tcp(o));

test('property: decode(encode(h, p)) gives back h and p byte for byte', () => {
  fc.assert(
    fc.property(arbHeader, arbInner, (h, p) => {
      const r = decodeGreRedirect(encodeGreRedirect(h, p));
      assert.ok(r.ok, r.ok ? '' : r.error.detail);
      const { inner: got, ...header } = r.value;
      assert.deepEqual(header, { ...h });
      assert.deepEqual(Buffer.from(got), p);
      const ih = decodeIpv4Header(got);
      assert.ok(ih.ok && ih.value.checksumOk);
    }),
    { numRuns: 2000, seed: 883 },
  );
});

function err(bytes: Uint8Array): { component: string; offset: number; reason: string } {
  const r = decodeGreRedirect(bytes);
  assert.ok(!r.ok, 'expected a decode error');
  return { component: r.error.component, offset: r.error.offset, reason: r.error.reason };
}

test('bad GRE packets give a DecodeError naming the part and offset', () => {
  const good = encodeGreRedirect({ serviceId: 0, dynamic: false, alternate: false, altBucket: 0, priBucket: 9 }, inner);
  assert.deepEqual(err(good.subarray(0, 3)), { component: 'GRE header', offset: 0, reason: 'truncated' });
  const keyed = Buffer.from(good);
  keyed[0] = 0x20;
  assert.deepEqual(err(keyed), { component: 'GRE header', offset: 0, reason: 'unsupported-flags' });
  const ipProto = Buffer.from(good);
  ipProto.writeUInt16BE(0x0800, 2);
  assert.deepEqual(err(ipProto), { component: 'GRE header', offset: 2, reason: 'not-wccp' });
  assert.deepEqual(err(good.subarray(0, 6)), { component: 'WCCP redirect header', offset: 4, reason: 'truncated' });
  assert.deepEqual(err(good.subarray(0, 20)), { component: 'inner IPv4 header', offset: 8, reason: 'truncated' });
  const v6 = Buffer.from(good);
  v6[8] = 0x65;
  assert.deepEqual(err(v6), { component: 'inner IPv4 header', offset: 8, reason: 'bad-version' });
  assert.deepEqual(err(good.subarray(0, good.length - 1)), {
    component: 'inner IPv4 header',
    offset: 10,
    reason: 'bad-length',
  });
});

test('encode refuses out-of-range fields with a typed error', () => {
  assert.throws(
    () => encodeGreRedirect({ serviceId: 256, dynamic: false, alternate: false, altBucket: 0, priBucket: 0 }, inner),
    GreEncodeError,
  );
  assert.throws(
    () => encodeGreRedirect({ serviceId: 0, dynamic: false, alternate: false, altBucket: 0, priBucket: -1 }, inner),
    /priBucket/,
  );
});

test('fuzz: 25,000 seeded inputs each give a value or a DecodeError inside the packet', () => {
  const seeds = fc
    .sample(fc.tuple(arbHeader, arbInner), { numRuns: 200, seed: 7 })
    .map(([h, p]) => encodeGreRedirect(h, p));
  const mutated = fc
    .tuple(fc.constantFrom(...seeds), fc.array(fc.tuple(fc.nat(300), fc.nat(255)), { maxLength: 4 }), fc.nat(300))
    .map(([s, edits, cut]) => {
      const b = Buffer.from(s);
      // the headers and the inner IPv4 length/version live in the first bytes
      for (const [at, v] of edits) b[at % 12] = v;
      return cut % 4 === 0 ? b.subarray(0, cut % (b.length + 1)) : b;
    });
  const inputs = [
    ...fc.sample(fc.uint8Array({ maxLength: 80 }), { numRuns: 10_000, seed: 3 }),
    ...fc.sample(mutated, { numRuns: 15_000, seed: 4 }),
  ];
  const counts = { ok: 0, error: 0 };
  for (const input of inputs) {
    const r = decodeGreRedirect(input);
    if (r.ok) {
      counts.ok++;
      assert.ok(r.value.inner.length + 8 === input.length);
      const { inner: p, ...h } = r.value;
      assert.deepEqual(decodeGreRedirect(encodeGreRedirect(h, p)), r);
    } else {
      counts.error++;
      assert.ok(
        r.error.offset >= 0 && r.error.offset <= input.length,
        `offset ${r.error.offset} outside ${input.length}`,
      );
      assert.ok(r.error.detail.length > 0);
    }
  }
  assert.ok(counts.ok > 1000 && counts.error > 1000, JSON.stringify(counts));
});

test('packetTransportChecksum (addresses read from the header bytes) equals transportChecksum for any packet', () => {
  fc.assert(
    fc.property(
      fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)),
      fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)),
      fc.constantFrom(6, 17),
      fc.uint8Array({ minLength: 8, maxLength: 300 }),
      (a, b, protocol, segment) => {
        const ip = new Uint8Array(20);
        ip.set(a, 12);
        ip.set(b, 16);
        assert.equal(
          packetTransportChecksum(ip, protocol, segment),
          transportChecksum(a.join('.'), b.join('.'), protocol, segment),
        );
      },
    ),
    { numRuns: 2000 },
  );
});

test('onesComplementSum equals the byte-by-byte RFC 1071 sum at every alignment, odd length and size up to 64 KiB of 0xff', () => {
  const reference = (bytes: Uint8Array, initial: number): number => {
    let sum = initial;
    for (let i = 0; i < bytes.length; i += 2) sum += ((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0);
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
    return sum;
  };
  let seed = 7;
  const random = (): number => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24;
  const pool = Buffer.from(Array.from({ length: 4096 }, random));
  for (let n = 0; n < 300; n++) {
    const length = (n * 37) % 3000;
    for (const offset of [0, 1, 2, 3, 4, 5, 8]) {
      const bytes = pool.subarray(offset, offset + length);
      const initial = (n * 4099) & 0x1ffff;
      assert.equal(onesComplementSum(bytes, initial), reference(bytes, initial), `length ${length}, offset ${offset}`);
    }
  }
  for (const size of [65535, 65536, 70001]) {
    const ff = new Uint8Array(size).fill(0xff);
    assert.equal(onesComplementSum(ff), reference(ff, 0), `${size} bytes of 0xff`);
  }
});
