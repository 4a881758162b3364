// Seeded fuzz: 100,000+ mutated and random datagrams give a value or a DecodeError, never an exception; whatever
// decodes re-encodes to the same bytes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import fc from 'fast-check';
import { decodeMessage, encodeMessage } from '../../src/wire/wccp2/index.js';
import { message } from '../fixtures/wccp2-arbitraries.js';
import { FIXTURES } from '../helpers/fixtures.js';
import { seededUnit } from '../helpers/seeded.js';

const prng = seededUnit;

function seeds(): Buffer[] {
  const out: Buffer[] = [];
  for (const dir of [
    `${FIXTURES}/squid-5.7`,
    `${FIXTURES}/squid-master`,
    new URL('../fixtures/squid-5.7-md5', import.meta.url).pathname,
  ]) {
    for (const f of readdirSync(dir).filter((n) => n.endsWith('.hex'))) {
      out.push(Buffer.from(readFileSync(`${dir}/${f}`, 'utf8').trim(), 'hex'));
    }
  }
  for (const m of fc.sample(message, { numRuns: 200, seed: 2048 })) out.push(encodeMessage(m));
  return out;
}

/** Offsets of the component length fields of a valid encoding. */
function lengthFields(b: Buffer): number[] {
  const out = [6];
  for (let p = 8; p + 4 <= b.length; p += 4 + b.readUInt16BE(p + 2)) out.push(p + 2);
  return out;
}

function mutate(rand: () => number, base: Buffer): Buffer {
  const pick = (n: number): number => Math.floor(rand() * n);
  const b = Buffer.from(base);
  switch (pick(5)) {
    case 0: {
      // bit flips
      const flips = 1 + pick(4);
      for (let i = 0; i < flips; i++) {
        const at = pick(b.length);
        b[at] = (b[at] as number) ^ (1 << pick(8));
      }
      return b;
    }
    case 1: {
      // truncation, with the header length kept consistent half of the time
      const t = b.subarray(0, pick(b.length + 1));
      if (t.length >= 8 && rand() < 0.5) t.writeUInt16BE(t.length - 8, 6);
      return Buffer.from(t);
    }
    case 2: {
      // a length field edited (header or component)
      const fields = lengthFields(b);
      const at = fields[pick(fields.length)] as number;
      const v = rand() < 0.5 ? b.readUInt16BE(at) + pick(9) - 4 : pick(0x10000);
      b.writeUInt16BE(Math.max(0, Math.min(0xffff, v)), at);
      return b;
    }
    case 3: {
      // a 32-bit count or field somewhere set to a small or huge number
      if (b.length < 12) return b;
      const at = 8 + 4 * pick(Math.floor((b.length - 8) / 4));
      b.writeUInt32BE(rand() < 0.5 ? pick(40) : pick(0x100000000), at);
      return b;
    }
    default: {
      // random bytes, behind a plausible header most of the time
      const r = Buffer.alloc(pick(400));
      for (let i = 0; i < r.length; i++) r[i] = pick(256);
      if (r.length >= 8 && rand() < 0.8) {
        r.writeUInt32BE(10 + pick(4), 0);
        r.writeUInt16BE(0x0200, 4);
        r.writeUInt16BE(r.length - 8, 6);
      }
      return r;
    }
  }
}

test('100,000 mutated or random datagrams: only values or DecodeErrors; decoded ones re-encode exactly', () => {
  const rand = prng(0x5eed2048);
  const bases = seeds();
  let decoded = 0;
  const reasons = new Map<string, number>();
  const N = 100_000;
  for (let i = 0; i < N; i++) {
    const input = mutate(rand, bases[Math.floor(rand() * bases.length)] as Buffer);
    let r;
    try {
      r = decodeMessage(input);
    } catch (e) {
      assert.fail(`decodeMessage threw on ${input.toString('hex')}: ${String(e)}`);
    }
    if (r.ok) {
      decoded++;
      assert.deepEqual(encodeMessage(r.value), input, `re-encoding differs for ${input.toString('hex')}`);
    } else {
      assert.equal(r.error.kind, 'decode-error');
      assert.ok(
        r.error.offset >= 0 && r.error.offset <= input.length,
        `offset ${r.error.offset} outside a ${input.length}-byte datagram`,
      );
      reasons.set(r.error.reason, (reasons.get(r.error.reason) ?? 0) + 1);
    }
  }
  // The mix must exercise both outcomes and many distinct failure reasons, or the fuzzer is not reaching the decoder.
  assert.ok(decoded > N / 20, `only ${decoded} inputs decoded`);
  assert.ok(reasons.size >= 8, `only these reasons seen: ${[...reasons.keys()].join(', ')}`);
});
