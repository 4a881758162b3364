// What a hostile host sends wccpd, drawn from a seeded generator so a failure reproduces from its seed: random and
// mutated datagrams (the mutations start from real Squid datagrams and from what the test engines send), ICP queries,
// malformed HTTP requests, and malformed answers of a warm source's proxy. Shared by test/fuzz and bench/soak/hostile.
import { readdirSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import { decodeIcp, encodeIcp } from '../../src/wire/icp.js';
import { urlTarget } from '../../src/warmup/destination.js';
import { FIXTURES, fixtureBytes } from '../helpers/fixtures.js';
import { seededUint32 } from '../helpers/seeded.js';

/** A seeded source of the choices below. */
export class Draw {
  private readonly next: () => number;
  constructor(readonly seed: number) {
    this.next = seededUint32(seed);
  }
  /** 0..n-1 */
  int(n: number): number {
    return n <= 1 ? 0 : this.next() % n;
  }
  /** lo..hi inclusive */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }
  chance(p: number): boolean {
    return this.next() / 4294967296 < p;
  }
  pick<T>(xs: readonly T[]): T {
    const x = xs[this.int(xs.length)];
    if (x === undefined) throw new Error('pick from an empty list');
    return x;
  }
  bytes(n: number): Buffer {
    const b = Buffer.alloc(n);
    for (let i = 0; i < n; i++) b[i] = this.next() & 0xff;
    return b;
  }
}

/** Every real WCCP datagram under test/fixtures (Squid 5.7, 5.7 with MD5, master), by file name. */
export function fixtureDatagrams(): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (const dir of readdirSync(FIXTURES, { withFileTypes: true })) {
    if (!dir.isDirectory()) continue;
    for (const f of readdirSync(`${FIXTURES}/${dir.name}`))
      if (f.endsWith('.hex')) out.set(`${dir.name}/${f}`, fixtureBytes(`${dir.name}/${f}`));
  }
  return out;
}

const INTERESTING_8 = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff];
const INTERESTING_16 = [0x0000, 0x0001, 0x0007, 0x0008, 0x00ff, 0x0100, 0x7fff, 0x8000, 0xfffe, 0xffff];

/** Where a protocol keeps its length field, so a mutation can make it agree with the new size (and get past it). */
export type LengthField = 'wccp' | 'icp' | 'none';

function fixLength(b: Buffer, field: LengthField): void {
  // WCCPv2: the header's Length (bytes 6-7) counts what follows the 8-byte header; ICP: bytes 2-3 count it all.
  if (field === 'wccp' && b.length >= 8) b.writeUInt16BE(Math.min(0xffff, b.length - 8), 6);
  if (field === 'icp' && b.length >= 4) b.writeUInt16BE(Math.min(0xffff, b.length), 2);
}

/**
 * One to four random edits of `base` (bit flips, interesting values, truncation, inserted, deleted, repeated or
 * spliced chunks), then, half the time, the length field set to agree; never `base` itself (a replay of a signed
 * datagram would be a valid message).
 */
export function mutate(d: Draw, base: Buffer, field: LengthField, other?: Buffer): Buffer {
  let b = Buffer.from(base);
  const edits = d.range(1, 4);
  for (let e = 0; e < edits; e++) {
    const at = d.int(Math.max(1, b.length));
    switch (d.int(9)) {
      case 0:
        if (b.length > 0) b[at] = (b[at] ?? 0) ^ (1 << d.int(8));
        break;
      case 1:
        if (b.length > 0) b[at] = d.pick(INTERESTING_8);
        break;
      case 2:
        if (b.length > at + 1) b.writeUInt16BE(d.pick(INTERESTING_16), at);
        break;
      case 3:
        b = b.subarray(0, at);
        break;
      case 4:
        b = Buffer.concat([b.subarray(0, at), d.bytes(d.range(1, 64)), b.subarray(at)]);
        break;
      case 5:
        b = Buffer.concat([b.subarray(0, at), b.subarray(Math.min(b.length, at + d.range(1, 32)))]);
        break;
      case 6: {
        // A chunk repeated in place (a component twice, a count that runs on).
        const len = d.range(1, 64);
        b = Buffer.concat([b.subarray(0, at + len), b.subarray(at, at + len), b.subarray(at + len)]);
        break;
      }
      case 7:
        if (other !== undefined) b = Buffer.concat([b.subarray(0, at), other.subarray(d.int(other.length))]);
        break;
      default:
        if (b.length > at + 3) b.writeUInt32BE(d.chance(0.5) ? 0xffffffff : d.int(0x100000000), at);
    }
  }
  if (d.chance(0.5)) fixLength(b, field);
  if (b.equals(base)) {
    if (b.length === 0) return d.bytes(1);
    const at = d.int(b.length);
    b[at] = (b[at] ?? 0) ^ (1 << d.int(8));
  }
  return b;
}

/** Random bytes: mostly datagram-sized, some empty or tiny, a few large. */
export function randomDatagram(d: Draw): Buffer {
  const r = d.int(100);
  const size = r < 5 ? d.int(4) : r < 95 ? d.range(4, 1400) : d.range(1400, 9000);
  return d.bytes(size);
}

const OPCODES = ['HIT', 'MISS', 'ERR', 'SECHO', 'DECHO', 'MISS_NOFETCH', 'DENIED'] as const;

/**
 * An ICP query (or a reply's opcode) for a URL on a TEST-NET address, or for `url`, with a random path (invalid UTF-8
 * and long ones too): what a member engine could be made to send, or a forger writes in its name.
 */
export function icpDatagram(d: Draw, url?: string): Buffer {
  const path = d.chance(0.2) ? d.bytes(d.range(1, 2000)) : Buffer.from(`/f${d.int(1e6)}`);
  const host = `${d.pick(['198.51.100', '203.0.113'])}.${d.int(256)}`;
  const head = Buffer.from(url ?? `http://${host}`);
  const common = { requestNumber: d.int(0x100000000), options: 0, optionData: 0, senderAddress: '0.0.0.0', url: 'x' };
  const bytes = encodeIcp(
    url !== undefined || d.chance(0.8)
      ? {
          ...common,
          opcode: 'QUERY',
          options: d.chance(0.9) ? 0 : d.int(0x100000000),
          requesterAddress: `127.0.0.${d.int(256)}`,
        }
      : { ...common, opcode: d.pick(OPCODES) },
  );
  // Swap the one-byte URL for ours (raw bytes, so invalid UTF-8 goes through as it is).
  const urlAt = bytes.length - 2;
  const out = Buffer.concat([bytes.subarray(0, urlAt), head, url === undefined ? path : Buffer.alloc(0), Buffer.of(0)]);
  out.writeUInt16BE(Math.min(0xffff, out.length), 2);
  return out;
}

/**
 * Whether a member engine's broker would look a name up for this datagram: a QUERY whose URL names a host that is not
 * an IPv4 address. Datagrams sent in a member's name are drawn until this is false: the test sends nothing to a DNS
 * server.
 */
export function wouldResolve(datagram: Buffer): boolean {
  const decoded = decodeIcp(datagram);
  if (!decoded.ok || decoded.value.opcode !== 'QUERY') return false;
  const target = urlTarget(decoded.value.url);
  return target !== null && !isIPv4(target.host);
}

/** A mutated ICP datagram that would not make the broker resolve a name (see wouldResolve). */
export function icpMutation(d: Draw, base: Buffer, other?: Buffer): Buffer {
  for (;;) {
    const m = mutate(d, base, 'icp', other);
    if (!wouldResolve(m)) return m;
  }
}

/** One malformed HTTP exchange: bytes written in pieces (a pause after each but the last), and what it tries. */
export interface HttpAttempt {
  readonly kind: string;
  readonly pieces: readonly Buffer[];
  readonly pauseMs: number;
}

const METHODS = [
  'GET',
  'HEAD',
  'POST',
  'PUT',
  'DELETE',
  'CONNECT',
  'OPTIONS',
  'TRACE',
  'PATCH',
  'get',
  'G\x00T',
  'XYZ',
];

/** A malformed (or merely odd) HTTP request to `target` (a path or an absolute URL) on `host`. */
export function httpAttempt(d: Draw, target: string, host: string): HttpAttempt {
  const line = (m = 'GET', t = target, v = 'HTTP/1.1') => `${m} ${t} ${v}\r\n`;
  const h = `Host: ${host}\r\n`;
  const one = (kind: string, text: string | Buffer, pauseMs = 0): HttpAttempt => ({
    kind,
    pieces: [typeof text === 'string' ? Buffer.from(text, 'latin1') : text],
    pauseMs,
  });
  const body = d.bytes(d.range(1, 200));
  switch (d.int(24)) {
    case 0:
      return one('random-bytes', d.bytes(d.range(1, 3000)));
    case 1:
      return one('no-version', `GET ${target}\r\n${h}\r\n`);
    case 2:
      return one(
        'bad-version',
        line('GET', target, d.pick(['HTTP/9.9', 'HTTP/1', 'HTTP/1.1x', 'FTP/1.0', ''])) + h + '\r\n',
      );
    case 3:
      return one('odd-method', line(d.pick(METHODS)) + h + 'Content-Length: 0\r\n\r\n');
    case 4:
      return one('huge-method', line('G'.repeat(d.range(100, 20_000))) + h + '\r\n');
    case 5:
      return one('huge-target', line('GET', `${target}${'a'.repeat(d.range(8000, 40_000))}`) + h + '\r\n');
    case 6:
      return one('huge-header', line() + h + `X-Big: ${'b'.repeat(d.range(17_000, 70_000))}\r\n\r\n`);
    case 7:
      return one(
        'many-headers',
        line() + h + Array.from({ length: d.range(200, 3000) }, (_, i) => `X-${i}: v\r\n`).join('') + '\r\n',
      );
    case 8:
      return one('header-no-colon', line() + h + 'NoColonHere\r\n\r\n');
    case 9:
      return one('header-bad-name', line() + h + `Bad Name${String.fromCharCode(d.int(32))}: v\r\n\r\n`);
    case 10:
      return one(
        'header-bad-value',
        line() + h + `X-V: a${String.fromCharCode(d.pick([0, 1, 8, 0x7f, 0x0b]))}b\r\n\r\n`,
      );
    case 11:
      return one('obs-fold', line() + h + 'X-Fold: a\r\n  folded\r\n\r\n');
    case 12:
      return one(
        'bad-content-length',
        line('POST') +
          h +
          `Content-Length: ${d.pick(['-1', 'abc', '1e3', '99999999999999999999', '0x10', ' 5'])}\r\n\r\nhello`,
      );
    case 13:
      return one('two-content-lengths', line('POST') + h + 'Content-Length: 3\r\nContent-Length: 5\r\n\r\nhello');
    case 14:
      return one('cl-and-te', line('POST') + h + 'Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n');
    case 15:
      return one(
        'bad-chunk-size',
        line('POST') +
          h +
          `Transfer-Encoding: chunked\r\n\r\n${d.pick(['zz', 'ffffffffffffffffffff', '-1', '5;' + 'e'.repeat(20_000)])}\r\nhello\r\n0\r\n\r\n`,
      );
    case 16:
      return one('truncated-chunk', line('POST') + h + 'Transfer-Encoding: chunked\r\n\r\n10\r\nabc');
    case 17:
      return one(
        'bad-te',
        line('POST') + h + `Transfer-Encoding: ${d.pick(['gzip', 'chunked, gzip', 'identity', 'chunked\x00'])}\r\n\r\n`,
      );
    case 18:
      return {
        kind: 'get-with-body',
        pieces: [Buffer.concat([Buffer.from(line() + h + `Content-Length: ${body.length}\r\n\r\n`), body])],
        pauseMs: 0,
      };
    case 19:
      return one('get-chunked-body', line() + h + 'Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n');
    case 20: {
      // Pipelining: several requests in one write, good and bad mixed.
      const n = d.range(2, 8);
      const reqs = Array.from({ length: n }, () =>
        d.chance(0.7) ? line() + h + '\r\n' : line('GET', target, 'HTTP/1.1') + h + 'Content-Length: 4\r\n\r\nbody',
      );
      return one('pipelined', reqs.join('') + (d.chance(0.3) ? 'GARBAGE\r\n\r\n' : ''));
    }
    case 21: {
      // Slowloris-style: the request line and headers a few bytes at a time; sometimes never finished.
      const text = line() + h + 'X-Slow: 1\r\n' + (d.chance(0.5) ? '\r\n' : '');
      const pieces: Buffer[] = [];
      for (let i = 0; i < text.length; i += d.range(1, 12)) pieces.push(Buffer.from(text.slice(i, i + 12)));
      return { kind: 'slow', pieces, pauseMs: d.range(1, 5) };
    }
    case 22:
      return one('bare-lf', `GET ${target} HTTP/1.1\n${h.replace('\r\n', '\n')}\n`);
    default:
      return one(
        'bad-host',
        line() + `Host: ${d.pick(['', 'evil.example', 'a b', '[::1', host + ':99999', 'x'.repeat(5000)])}\r\n\r\n`,
      );
  }
}

/** A source proxy's answer that is broken: invalid status lines, reason phrases, headers, lengths and chunks. */
export function sourceAnswer(d: Draw): { kind: string; bytes: Buffer } {
  const ok = (s: string) => Buffer.from(s, 'latin1');
  const body = 'warm object';
  switch (d.int(12)) {
    case 0:
      return { kind: 'status-099', bytes: ok(`HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n`) };
    case 1:
      return { kind: 'reason-control-char', bytes: ok(`HTTP/1.1 200 O\x01K\r\nContent-Length: 2\r\n\r\nok`) };
    case 2:
      return {
        kind: 'status-1000',
        bytes: ok(`HTTP/1.1 ${d.pick(['1000', '600', '2x0', '-20'])} X\r\nContent-Length: 0\r\n\r\n`),
      };
    case 3:
      return { kind: 'no-status', bytes: ok(`HTTP/1.1\r\nContent-Length: 0\r\n\r\n`) };
    case 4:
      return { kind: 'random-bytes', bytes: d.bytes(d.range(1, 2000)) };
    case 5:
      return { kind: 'short-body', bytes: ok(`HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n${body}`) };
    case 6:
      return {
        kind: 'bad-chunk',
        bytes: ok(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n${body}\r\n0\r\n\r\n`),
      };
    case 7:
      return {
        kind: 'huge-header',
        bytes: ok(`HTTP/1.1 200 OK\r\nX-Big: ${'b'.repeat(20_000)}\r\nContent-Length: 0\r\n\r\n`),
      };
    case 8:
      return { kind: 'bad-header-value', bytes: ok(`HTTP/1.1 200 OK\r\nX-V: a\x00b\r\nContent-Length: 0\r\n\r\n`) };
    case 9:
      return {
        kind: 'two-lengths',
        bytes: ok(`HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nhello`),
      };
    case 10:
      return { kind: 'bare-lf', bytes: ok(`HTTP/1.1 200 OK\nContent-Length: 2\n\nok`) };
    default:
      return { kind: 'fine', bytes: ok(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`) };
  }
}
