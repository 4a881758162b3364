// The peer comparison against peers that answer badly: every failure is reported with its reason, never thrown, and
// counted; a good answer is compared bucket by bucket, whatever its change number.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PeerChecker } from '../../src/admin/peers.js';
import { fakeClock } from '../cluster/helpers.js';

const OURS = Array.from({ length: 256 }, (_, i) => (i % 2 === 0 ? '192.0.2.10' : '192.0.2.11'));
let server: Server;
let base = '';
const hanging = new Set<ServerResponse>();

// A mask service's Mask/Value Sets (Squid's 0x1741 on the destination: 64 values), engines alternating.
const MASK = { sourceAddressMask: 0, destinationAddressMask: 0x1741, sourcePortMask: 0, destinationPortMask: 0 };
const VALUES = Array.from({ length: 64 }, (_, i) => ({
  sourceAddress: 0,
  destinationAddress: i,
  sourcePort: 0,
  destinationPort: 0,
  engine: i % 2 === 0 ? '192.0.2.10' : '192.0.2.11',
}));
const OUR_MASK = [{ mask: MASK, values: VALUES }];
const maskAnswer = (mask: unknown) => (res: ServerResponse) =>
  res.end(JSON.stringify({ service: 0, changeNumber: 7, buckets: OURS, mask }));

// Each path is a kind of peer: /<kind>/api/v1/services/0/buckets
const answers: Record<string, (res: ServerResponse) => void> = {
  maskSame: maskAnswer(OUR_MASK),
  // Two values hand the other engine: the buckets agree, the mask values do not.
  maskTwo: maskAnswer([
    { mask: MASK, values: VALUES.map((v, i) => (i === 5 || i === 9 ? { ...v, engine: '192.0.2.12' } : v)) },
  ]),
  maskOther: maskAnswer([{ mask: { ...MASK, destinationAddressMask: 0x0f }, values: VALUES }]),
  maskNone: maskAnswer(null),
  maskBad: maskAnswer([{ mask: MASK, values: [{ ...VALUES[0], engine: 'evil' }] }]),
  same: (res) => res.end(JSON.stringify({ service: 0, changeNumber: 99, buckets: OURS })),
  three: (res) =>
    res.end(JSON.stringify({ service: 0, changeNumber: 1, buckets: OURS.map((e, i) => (i < 3 ? null : e)) })),
  garbage: (res) => res.end('<html>not json'),
  short: (res) => res.end(JSON.stringify({ changeNumber: 1, buckets: OURS.slice(1) })),
  notip: (res) => res.end(JSON.stringify({ changeNumber: 1, buckets: OURS.map((e, i) => (i === 7 ? 'evil' : e)) })),
  negative: (res) => res.end(JSON.stringify({ changeNumber: -1, buckets: OURS })),
  huge: (res) => res.end(`{"changeNumber":1,"x":"${'a'.repeat(400_000)}"}`),
  missing: (res) => {
    res.statusCode = 404;
    res.end(JSON.stringify({ error: 'not-found' }));
  },
  broken: (res) => {
    res.statusCode = 500;
    res.end('{}');
  },
  redirect: (res) => {
    res.statusCode = 302;
    res.setHeader('location', `${base}/same/api/v1/services/0/buckets`);
    res.end();
  },
  silent: (res) => {
    hanging.add(res);
  },
};

before(async () => {
  server = createServer((req, res) => {
    const kind = (req.url ?? '').split('/')[1] ?? '';
    (answers[kind] ?? answers.missing!)(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  for (const res of hanging) res.destroy();
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

// A generous timeout for peers that answer (the machine may be busy); a short one only where none is coming.
async function checkOne(
  kind: string,
  timeoutMs = 10_000,
): Promise<{ agrees: boolean | null; error: string | null; differing: number | null; list: readonly number[] }> {
  let t = 0;
  const checker = new PeerChecker({
    peers: [{ address: '192.0.2.2', api: `${base}/${kind}` }],
    serviceIds: () => [0],
    ours: () => ({ changeNumber: 5, buckets: OURS }),
    clock: { now: () => (t += 5000), wall: () => Date.now() },
    timeoutMs,
  });
  const [peer] = await checker.check();
  const s = peer!.services[0]!;
  assert.equal(peer!.agrees, s.agrees === true);
  assert.equal(peer!.failures, s.error === null ? 0 : 1);
  return { agrees: s.agrees, error: s.error, differing: s.differingBuckets, list: s.differing };
}

test('a peer with the same buckets agrees whatever its change number; one with 3 other buckets differs in exactly those', async () => {
  assert.deepEqual(await checkOne('same'), { agrees: true, error: null, differing: 0, list: [] });
  assert.deepEqual(await checkOne('three'), { agrees: false, error: null, differing: 3, list: [0, 1, 2] });
});

test('bad answers are reported with the reason and the URL, never thrown', async () => {
  const cases: [string, RegExp][] = [
    ['garbage', /^bad answer from http:\/\/127\.0\.0\.1:\d+\/garbage\/api\/v1\/services\/0\/buckets: not JSON$/],
    ['short', /buckets is not a list of 256 entries/],
    ['notip', /bucket 7 is neither an IPv4 address nor null/],
    ['negative', /changeNumber is not a uint32/],
    ['huge', /more than 262144 bytes/],
    ['missing', /^service 0 is not configured on the peer \(.*HTTP 404\)$/],
    ['broken', /HTTP 500$/],
    ['redirect', /^unreachable: /],
    ['silent', /^unreachable: no answer from .* within 300 ms$/],
  ];
  for (const [kind, reason] of cases) {
    const r = await checkOne(kind, kind === 'silent' ? 300 : 10_000);
    assert.equal(r.agrees, null, kind);
    assert.equal(r.differing, null, kind);
    assert.match(r.error ?? '', reason, kind);
  }
});

test('a burst of status requests sends each peer one request per second, not one per request', async () => {
  let requests = 0;
  let now = 0;
  const checker = new PeerChecker({
    peers: [{ address: '192.0.2.2', api: `${base}/same` }],
    serviceIds: () => [0],
    ours: () => ({ changeNumber: 5, buckets: OURS }),
    clock: { now: () => now, wall: () => Date.now() },
    fetch: (input, init) => {
      requests++;
      return fetch(input, init);
    },
  });
  await Promise.all(Array.from({ length: 50 }, () => checker.check()));
  assert.equal(requests, 1);
  now += 999;
  await checker.check();
  assert.equal(requests, 1);
  now += 1;
  const [peer] = await checker.check();
  assert.equal(requests, 2);
  assert.equal(peer?.checks, 2);
});

test('the clock set back an hour: the peers are read again within a second, not after the hour', async () => {
  let requests = 0;
  let now = 10 * 3_600_000;
  const checker = new PeerChecker({
    peers: [{ address: '192.0.2.2', api: `${base}/same` }],
    serviceIds: () => [0],
    ours: () => ({ changeNumber: 5, buckets: OURS }),
    clock: { now: () => now, wall: () => Date.now() },
    fetch: (input, init) => {
      requests++;
      return fetch(input, init);
    },
  });
  await checker.check();
  now -= 3_600_000;
  await checker.check();
  assert.equal(requests, 2);
  now += 500;
  await checker.check();
  assert.equal(requests, 2, 'then reused for a second again');
});

test('the wall clock stepped an hour forward and back: checkedAt shows it, reuse follows monotonic time alone', async () => {
  let requests = 0;
  const clock = fakeClock();
  const checker = new PeerChecker({
    peers: [{ address: '192.0.2.2', api: `${base}/same` }],
    serviceIds: () => [0],
    ours: () => ({ changeNumber: 5, buckets: OURS }),
    clock,
    fetch: (input, init) => {
      requests++;
      return fetch(input, init);
    },
  });
  const before = (await checker.check())[0]?.checkedAt;
  assert.equal(before, new Date(clock.wall()).toISOString());
  clock.stepWall(3_600_000);
  clock.advance(500);
  await checker.check();
  assert.equal(requests, 1, 'still reused: half a second passed, whatever the wall clock says');
  clock.advance(500);
  const after = (await checker.check())[0]?.checkedAt;
  assert.equal(requests, 2);
  assert.equal(after, new Date(clock.wall()).toISOString(), 'dated by the stepped wall clock');
  clock.stepWall(-2 * 3_600_000);
  clock.advance(999);
  await checker.check();
  assert.equal(requests, 2, 'set back: still reused for the second');
});

test('a mask service is compared value by value: the same sets agree, two values on another engine differ in two', async () => {
  const check = async (kind: string) => {
    const checker = new PeerChecker({
      peers: [{ address: '192.0.2.2', api: `${base}/${kind}` }],
      serviceIds: () => [0],
      ours: () => ({ changeNumber: 5, buckets: OURS, maskSets: OUR_MASK }),
      clock: { now: () => 0, wall: () => Date.now() },
      timeoutMs: 10_000,
    });
    const s = (await checker.check())[0]!.services[0]!;
    return { agrees: s.agrees, buckets: s.differingBuckets, mask: s.differingMaskValues, error: s.error };
  };
  assert.deepEqual(await check('maskSame'), { agrees: true, buckets: 0, mask: 0, error: null });
  assert.deepEqual(await check('maskTwo'), { agrees: false, buckets: 0, mask: 2, error: null });
  assert.deepEqual(await check('maskOther'), { agrees: false, buckets: 0, mask: 64, error: null }, 'another mask');
  assert.deepEqual(await check('maskNone'), { agrees: false, buckets: 0, mask: 64, error: null }, 'no sets there');
  const bad = await check('maskBad');
  assert.equal(bad.agrees, null);
  assert.match(bad.error ?? '', /mask set 0 value 0: engine is not an IPv4 address/);
  // A hash service (no sets on either side) has no mask figure.
  assert.equal((await checkOne('same')).agrees, true);
});
