// The ingress redirector's bookkeeping over fake nft and ip: which transaction each change sends, what a failed one
// leaves, and how its counters are read back.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DataplaneError } from '../../../src/dataplane/errors.js';
import { IngressRedirector, nextMoves } from '../../../src/dataplane/ingress/ingress.js';
import { CLAIM_GONE, CLAIM_REFUSED, CLAIM_UNASSIGNED } from '../../../src/dataplane/ingress/names.js';
import type { NftListings, NftTransactions } from '../../../src/dataplane/kernel/nft-session.js';
import { webCache } from '../service-fixture.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const T = 'netdev wccpd_ingress';

function fakes(via: Record<string, string> = {}, now?: () => number) {
  const sent: string[] = [];
  const routeGets: string[] = [];
  let failNext: string | null = null;
  let listings: Record<string, string> = {};
  const session: NftTransactions = {
    describe: 'a fake',
    pid: () => undefined,
    run: async (text) => {
      if (failNext !== null) {
        const why = failNext;
        failNext = null;
        throw new DataplaneError('command-failed', why);
      }
      sent.push(text);
    },
    stop: async () => undefined,
  };
  const reader: NftListings = {
    list: async (args) => listings[args.join(' ')] ?? '{"nftables":[]}',
    stop: async () => undefined,
    pid: () => undefined,
  };
  const exec = async (cmd: string, args: readonly string[]): Promise<string> => {
    assert.equal(cmd, 'ip');
    const engine = args.at(-1) ?? '';
    routeGets.push(engine);
    if (engine === '192.0.2.1') return JSON.stringify([{ dst: engine, dev: 'lo', type: 'local' }]);
    return JSON.stringify([
      { dst: engine, dev: 'br0', prefsrc: '192.0.2.1', ...(via[engine] ? { gateway: via[engine] } : {}) },
    ]);
  };
  const r = new IngressRedirector({ session, reader, exec, ...(now !== undefined ? { now } : {}) });
  return {
    r,
    sent,
    routeGets,
    last: () => (sent.at(-1) ?? '').split('\n'),
    fail: (why: string) => {
      failNext = why;
    },
    list: (l: Record<string, string>) => {
      listings = l;
    },
  };
}

test('an engine leaves, comes back to its number, and the interfaces change: what each transaction carries', async () => {
  const f = fakes();
  await f.r.start();
  assert.match(f.sent[0] ?? '', /^add table netdev wccpd_ingress\ndelete table netdev wccpd_ingress\n/);
  await f.r.apply(webCache((b) => (b % 2 ? E1 : E2), [E1, E2]));
  const s1 = f.r.slotsInUse().get(`0 l2 ${E1}`) ?? 0;
  const s2 = f.r.slotsInUse().get(`0 l2 ${E2}`) ?? 0;
  assert.ok(s1 > 0 && s2 > 0 && s1 !== s2);
  assert.deepEqual(f.routeGets, [E1, E2]);
  let lines = f.last();
  // Both values of a slot, open and closing (CLOSING_FLAG), go to its chain.
  assert.ok(lines.includes(`add element ${T} slots { ${s1} : goto slot_${s1}, ${s1 | 0x10000} : goto slot_${s1} }`));
  assert.ok(lines.some((l) => l.startsWith(`add chain ${T} ingress_1 { type filter hook ingress devices = { "c0" }`)));
  assert.ok(
    lines.includes(
      `add rule ${T} slot_${s2} counter name engine_${s2} meta priority set 0 fwd ip to ${E2} device "br0"`,
    ),
  );

  // E2 leaves: its flows are reset from now on, its objects go; the base chain stays.
  await f.r.apply(webCache(() => E1, [E1]));
  lines = f.last();
  assert.equal(lines[0], `flush chain ${T} ingress_1`);
  assert.ok(lines.includes(`add element ${T} slots { ${s2} : goto gone, ${s2 | 0x10000} : goto gone }`));
  assert.ok(lines.includes(`delete chain ${T} slot_${s2}`));
  assert.ok(!lines.some((l) => l.includes(`slot_${s1}`) && l.startsWith('delete')));
  assert.deepEqual(f.routeGets, [E1, E2], 'no lookup for a kept slot');

  // It comes back: the same number (its home), the gone entry replaced; its interface is looked up again.
  await f.r.apply(webCache((b) => (b % 2 ? E1 : E2), [E1, E2]));
  assert.equal(f.r.slotsInUse().get(`0 l2 ${E2}`), s2);
  lines = f.last();
  const del = lines.indexOf(`delete element ${T} slots { ${s2}, ${s2 | 0x10000} }`);
  assert.ok(
    del >= 0 &&
      lines.indexOf(`add element ${T} slots { ${s2} : goto slot_${s2}, ${s2 | 0x10000} : goto slot_${s2} }`) > del,
  );
  assert.deepEqual(f.routeGets, [E1, E2, E2]);
  // Once replaced it is live: a later change does not delete it again.
  await f.r.apply(webCache((b) => (b % 2 ? E2 : E1), [E1, E2]));
  assert.ok(!f.last().some((l) => l.startsWith(`delete element ${T} slots`)));

  // A second client interface: a new base chain in the same transaction, the old one deleted last.
  await f.r.apply(webCache((b) => (b % 2 ? E2 : E1), [E1, E2], { clientInterfaces: ['c0', 'c1'] }));
  lines = f.last();
  assert.ok(
    lines.some((l) => l.startsWith(`add chain ${T} ingress_2 { type filter hook ingress devices = { "c0", "c1" }`)),
  );
  assert.equal(lines.at(-2), `delete chain ${T} ingress_1`);
});

test('a refused transaction leaves the bookkeeping as it was: the next change is written against the kernel state', async () => {
  const f = fakes();
  await f.r.start();
  await f.r.apply(webCache(() => E1, [E1]));
  const before = new Map(f.r.slotsInUse());
  f.fail('nft said no');
  await assert.rejects(
    f.r.apply(webCache(() => E2, [E2], { clientInterfaces: ['c0', 'c1'] })),
    (e: unknown) => e instanceof DataplaneError && /nft said no/.test(e.message),
  );
  assert.deepEqual(f.r.slotsInUse(), before);
  await f.r.apply(webCache(() => E2, [E2]));
  const lines = f.last();
  // Against what is in force: E1's slot released, base chain 1 kept (the refused change's chain 2 never existed).
  assert.equal(lines[0], `flush chain ${T} ingress_1`);
  const s1 = before.get(`0 l2 ${E1}`);
  assert.ok(lines.includes(`add element ${T} slots { ${s1} : goto gone, ${(s1 ?? 0) | 0x10000} : goto gone }`));
  assert.ok(!lines.some((l) => l.includes('ingress_2')));
});

test("a change writes only what differs from the last one: the service's own chains left as they are, only the buckets that changed", async () => {
  const f = fakes();
  await f.r.start();
  await f.r.apply(webCache((b) => (b % 2 ? E2 : E1), [E1, E2]));
  let lines = f.last();
  assert.ok(lines.includes(`flush map ${T} bucket_0`), 'the first write is whole');
  assert.ok(lines.includes(`flush chain ${T} svc_0`));
  const slot2 = f.r.slotsInUse().get(`0 l2 ${E2}`);
  const slot1 = f.r.slotsInUse().get(`0 l2 ${E1}`);
  // Engine 2 takes buckets 0 and 2 besides its own: those two change, and they moved.
  await f.r.apply(webCache((b) => (b % 2 || b === 0 || b === 2 ? E2 : E1), [E1, E2]));
  lines = f.last();
  const own = new RegExp(`^(add|flush) (rule|chain) ${T} (svc|classify|unassigned|hashed|moved|close|closing)_0\\b`);
  assert.ok(!lines.some((l) => own.test(l)), lines.join('\n'));
  assert.ok(!lines.some((l) => l.startsWith(`flush map ${T}`)), 'no map flushed');
  assert.deepEqual(
    lines.filter((l) => /^(add|delete) element .* (bucket|newclaim|oldclaim|newsteer)_0 /.test(l)),
    [
      `delete element ${T} bucket_0 { 0, 2 }`,
      `add element ${T} bucket_0 { 0 : goto moved_0, 2 : goto moved_0 }`,
      `add element ${T} newclaim_0 { 0 : goto claim_${slot2}, 2 : goto claim_${slot2} }`,
      `add element ${T} oldclaim_0 { 0 : goto claim_${slot1}, 2 : goto claim_${slot1} }`,
      `add element ${T} newsteer_0 { 0 : goto slot_${slot2}, 2 : goto slot_${slot2} }`,
    ],
  );
  // Bucket 2 back to engine 1, its claim before the move: steady again, its moved elements go.
  await f.r.apply(webCache((b) => (b % 2 || b === 0 ? E2 : E1), [E1, E2]));
  assert.deepEqual(
    f.last().filter((l) => /^(add|delete) element .* (bucket|newclaim|oldclaim|newsteer)_0 /.test(l)),
    [
      `delete element ${T} bucket_0 { 2 }`,
      `add element ${T} bucket_0 { 2 : goto slot_${slot1} }`,
      `delete element ${T} newclaim_0 { 2 }`,
      `delete element ${T} oldclaim_0 { 2 }`,
      `delete element ${T} newsteer_0 { 2 }`,
    ],
  );
  // Rules that differ (no engine left: no engines test) are written whole, their chains emptied first.
  await f.r.apply(webCache(() => null, []));
  lines = f.last();
  assert.ok(lines.includes(`flush chain ${T} svc_0`));
  assert.ok(!lines.some((l) => l.includes('@engines_0')));
  assert.ok(lines.includes(`delete element ${T} engines_0 { ${E1}, ${E2} }`));
  assert.ok(!lines.some((l) => l.startsWith(`flush set ${T} engines_0`)));
});

test('a change written as differences that nft refuses for a missing element is written again whole, at once', async () => {
  const f = fakes();
  await f.r.start();
  await f.r.apply(webCache(() => E1, [E1, E2]));
  const sent = f.sent.length;
  f.fail('nft -f transaction-2.nft failed: Error: Could not process rule: No such file or directory');
  await f.r.apply(webCache((b) => (b < 8 ? E2 : E1), [E1, E2]));
  assert.equal(f.sent.length, sent + 1, 'one transaction went through');
  const lines = f.last();
  assert.ok(lines.includes(`flush map ${T} bucket_0`));
  assert.ok(lines.includes(`flush chain ${T} svc_0`));
  // And the next change is written as differences again.
  await f.r.apply(webCache((b) => (b < 9 ? E2 : E1), [E1, E2]));
  assert.ok(f.last().includes(`delete element ${T} bucket_0 { 8 }`));
});

test('GRE, an off-link engine and a local address are refused before any transaction', async () => {
  const f = fakes({ '198.51.100.80': '192.0.2.130' });
  await f.r.start();
  const sent = f.sent.length;
  await assert.rejects(
    f.r.apply(webCache(() => E1, [E1], { forwarding: 'gre' })),
    (e: unknown) => e instanceof DataplaneError && e.reason === 'unsupported-service' && /L2 only/.test(e.message),
  );
  await assert.rejects(
    f.r.apply(webCache(() => '198.51.100.80', ['198.51.100.80'])),
    (e: unknown) =>
      e instanceof DataplaneError && e.reason === 'engine-not-attached' && /via the router/.test(e.message),
  );
  await assert.rejects(
    f.r.apply(webCache(() => '192.0.2.1', ['192.0.2.1'])),
    (e: unknown) => e instanceof DataplaneError && e.reason === 'engine-not-attached',
  );
  assert.equal(f.sent.length, sent);
  assert.deepEqual(f.r.slotsInUse(), new Map());
});

test('removing the last service removes its objects and the base chain; stop() removes the table', async () => {
  const f = fakes();
  await f.r.start();
  await f.r.applyAll([
    webCache(() => E1, [E1]),
    webCache(() => E1, [E1], { serviceId: 60, protocol: 17, ports: [53] }),
  ]);
  await f.r.removeService(60);
  let lines = f.last();
  assert.ok(lines.includes(`delete map ${T} flows_60`));
  assert.ok(!lines.some((l) => /\bclos(e|ing|enew)_60\b/.test(l)), 'a UDP service has no close, closing, closenew');
  const slot = f.r.slotsInUse().get(`0 l2 ${E1}`);
  await f.r.removeService(0);
  lines = f.last();
  for (const ch of ['close_0', 'closing_0', 'closenew_0']) {
    assert.ok(lines.indexOf(`flush chain ${T} ${ch}`) < lines.indexOf(`delete chain ${T} ${ch}`), ch);
    assert.ok(lines.indexOf(`delete chain ${T} ${ch}`) < lines.indexOf(`delete map ${T} flows_0`), ch);
  }
  // The released slot's claim chain (it names closenew_0) is emptied before closenew_0 goes.
  assert.ok(lines.indexOf(`flush chain ${T} claim_${slot}`) >= 0);
  assert.ok(lines.indexOf(`flush chain ${T} claim_${slot}`) < lines.indexOf(`delete chain ${T} closenew_0`));
  assert.equal(lines.at(-2), `delete chain ${T} ingress_1`);
  assert.ok(!lines.some((l) => l.includes('hook ingress')));
  await f.r.removeService(0); // not there: nothing sent
  assert.equal(f.last().join('\n'), lines.join('\n'));
  await f.r.stop();
  assert.equal(f.sent.at(-1), `add table ${T}\ndelete table ${T}\n`);
  await assert.rejects(
    f.r.apply(webCache(() => E1, [E1])),
    (e: unknown) => (e as DataplaneError).reason === 'not-started',
  );
});

test('counters: per engine by its slot, per bucket from the counter set, denied, unassigned and flows full', async () => {
  const f = fakes();
  await f.r.start();
  await f.r.apply(webCache(() => E1, [E1, E2]));
  const s1 = f.r.slotsInUse().get(`0 l2 ${E1}`);
  const s2 = f.r.slotsInUse().get(`0 l2 ${E2}`);
  const counter = (name: string, packets: number) => ({
    counter: { family: 'netdev', name, packets, bytes: packets * 60 },
  });
  f.list({
    [`list counters table ${T}`]: JSON.stringify({
      nftables: [
        counter(`engine_${s1}`, 7),
        counter(`engine_${s2}`, 0),
        counter('denied_0', 2),
        counter('unassigned_0', 3),
        counter('flows_full_0', 5),
      ],
    }),
    [`list set ${T} bseen_0`]: JSON.stringify({
      nftables: [{ set: { elem: [{ elem: { val: '0:ff', counter: { packets: 4, bytes: 240 } } }, 0] } }],
    }),
  });
  const c = await f.r.counters();
  assert.deepEqual(c.engines.get(0)?.get(E1), { packets: 7, bytes: 420 });
  assert.deepEqual(c.engines.get(0)?.get(E2), { packets: 0, bytes: 0 });
  assert.deepEqual(c.services?.get(0), { denied: { packets: 2, bytes: 120 }, unassigned: { packets: 3, bytes: 180 } });
  assert.deepEqual(c.flowsFull.get(0), { packets: 5, bytes: 300 });
  assert.equal(c.buckets.get(0)?.length, 256);
  assert.deepEqual(c.buckets.get(0)?.[255], { packets: 4, bytes: 240 });
  assert.deepEqual(c.buckets.get(0)?.[0], { packets: 0, bytes: 0 });
  assert.equal((await f.r.counters({ buckets: [] })).buckets.size, 0);
});

test('flow bounds are checked', () => {
  assert.throws(() => new IngressRedirector({ flowMax: 0 }), RangeError);
  assert.throws(() => new IngressRedirector({ flowMax: 1.5 }), RangeError);
  assert.throws(() => new IngressRedirector({ flowIdleSeconds: 0 }), RangeError);
  assert.throws(() => new IngressRedirector({ flowIdleSeconds: 86_401 }), RangeError);
  assert.deepEqual(new IngressRedirector({ flowMax: 10, flowIdleSeconds: 30 }).limits, { max: 10, idleSeconds: 30 });
});

test('one `ip route get` per engine: an engine joining several services at once, or one more, costs one or none', async () => {
  const f = fakes();
  await f.r.start();
  const in3 = (id: number, engines: string[]) => ({ ...webCache(() => engines[0] ?? null, engines), serviceId: id });
  await f.r.applyAll([51, 52, 53].map((id) => in3(id, [E1])));
  assert.deepEqual(f.routeGets, [E1], 'E1 joins three services: one lookup');
  await f.r.applyAll([51, 52, 53].map((id) => in3(id, [E1, E2])));
  assert.deepEqual(f.routeGets, [E1, E2], 'E2 joins all three: one lookup');
  await f.r.applyAll([51, 52, 53, 54].map((id) => in3(id, [E1, E2])));
  assert.deepEqual(f.routeGets, [E1, E2], 'a fourth service of engines with live slots: none');
  assert.ok(
    f
      .last()
      .includes(
        `add rule ${T} slot_${f.r.slotsInUse().get(`54 l2 ${E2}`)} counter name engine_${f.r.slotsInUse().get(`54 l2 ${E2}`)} meta priority set 0 fwd ip to ${E2} device "br0"`,
      ),
  );
  await f.r.applyAll([51, 52, 53, 54].map((id) => in3(id, [E1])));
  await f.r.applyAll([51, 52, 53, 54].map((id) => in3(id, [E1, E2])));
  assert.deepEqual(f.routeGets, [E1, E2, E2], 'E2 gone from every service and back: looked up again, once');
});

test('a moved bucket keeps the claim it had before its first move, for flows.idle after its last', () => {
  const idle = 600_000;
  const claims = (...first: number[]): number[] => [...first, ...new Array<number>(256 - first.length).fill(7)];
  const none = new Map<number, { old: number; until: number }>();
  // A new service: nothing moved (there was nothing to keep).
  assert.equal(nextMoves(undefined, claims(1, 2), none, new Set(), 0, idle).size, 0);
  // Bucket 0 from slot 1 to slot 2, bucket 1 from unassigned to slot 1, bucket 2 from refused to slot 1.
  const m1 = nextMoves(claims(1, CLAIM_UNASSIGNED, CLAIM_REFUSED), claims(2, 1, 1), none, new Set(), 1000, idle);
  assert.deepEqual(
    [...m1],
    [
      [0, { old: 1, until: 601_000 }],
      [1, { old: CLAIM_UNASSIGNED, until: 601_000 }],
      [2, { old: CLAIM_REFUSED, until: 601_000 }],
    ],
  );
  // Bucket 0 again (slot 2 to 3): its older connections are still slot 1's, for flows.idle from now. Bucket 1 back to
  // unassigned, its claim before the move: steady (every younger connection was recorded). Bucket 2 unchanged.
  const m2 = nextMoves(claims(2, 1, 1), claims(3, CLAIM_UNASSIGNED, 1), m1, new Set(), 5000, idle);
  assert.deepEqual(
    [...m2],
    [
      [0, { old: 1, until: 605_000 }],
      [2, { old: CLAIM_REFUSED, until: 601_000 }],
    ],
  );
  // Slot 1 released: its older connections are lost (reset), bucket 0's and those of bucket 2, which moves from it
  // now (its earlier move, from refused, ended at 601 s).
  const m3 = nextMoves(claims(3, CLAIM_UNASSIGNED, 1), claims(3, CLAIM_UNASSIGNED, 7), m2, new Set([1]), 601_000, idle);
  assert.deepEqual(
    [...m3],
    [
      [0, { old: CLAIM_GONE, until: 605_000 }],
      [2, { old: CLAIM_GONE, until: 1_201_000 }],
    ],
  );
  assert.equal(nextMoves(claims(3), claims(3), m3, new Set(), 2_000_000, idle).size, 0, 'all ended');
});

test('moves end flows.idle after the change: the service is written again with those buckets steady', async () => {
  let clock = 0;
  const f = fakes({}, () => clock);
  await f.r.start();
  await f.r.apply(webCache(() => E1, [E1, E2]));
  assert.equal(f.r.movedBuckets(0).size, 0, 'a new service: nothing moved');
  assert.ok(!f.last().some((l) => l.includes('goto moved_0')));
  const s1 = f.r.slotsInUse().get(`0 l2 ${E1}`) ?? 0;
  clock = 1000;
  await f.r.apply(
    webCache((b) => (b < 10 ? E2 : E1), [E1, E2], {
      table: { changeNumber: 2, buckets: Array.from({ length: 256 }, (_, b) => (b < 10 ? E2 : E1)) },
    }),
  );
  assert.deepEqual([...f.r.movedBuckets(0).keys()], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  assert.ok(
    [...f.r.movedBuckets(0).values()].every((old) => old === s1),
    'from engine 1',
  );
  // What the admin reads: each moved bucket, the engine it went to before, the time left (flows.idle from the move).
  assert.deepEqual(
    f.r.bucketMoves().get(0),
    Array.from({ length: 10 }, (_, bucket) => ({ bucket, before: 'engine', engineBefore: E1, endsInMs: 600_000 })),
  );
  const written = f.last();
  assert.ok(written.some((l) => l.startsWith(`add element ${T} oldclaim_0 { 0 : goto claim_${s1}`)));
  // Not yet: a check before the end writes nothing.
  const count = f.sent.length;
  clock = 600_000;
  await f.r.expireMoves();
  assert.equal(f.sent.length, count);
  assert.equal(f.r.bucketMoves().get(0)?.[0]?.endsInMs, 1000, 'the time left runs down');
  // Past its end and not yet written again (the timer's 100 ms, or a failed write's 10 s): still in force, still shown.
  clock = 601_000;
  assert.equal(f.r.bucketMoves().get(0)?.length, 10);
  assert.equal(f.r.bucketMoves().get(0)?.[0]?.endsInMs, 0);
  clock = 601_001;
  await f.r.expireMoves();
  assert.equal(f.sent.length, count + 1, 'one transaction');
  assert.equal(f.r.movedBuckets(0).size, 0);
  assert.deepEqual(f.r.bucketMoves().get(0), [], 'listed, with nothing in a move');
  assert.ok(!f.last().some((l) => l.includes('goto moved_0')), 'every bucket steady');
  await f.r.stop();
});

test('what the admin reads of a move: no engine before, refused before, an engine gone since; a UDP service has none', async () => {
  let clock = 5000;
  const f = fakes({}, () => clock);
  await f.r.start();
  const table = (owner: (b: number) => string | null, changeNumber: number) => ({
    changeNumber,
    buckets: Array.from({ length: 256 }, (_, b) => owner(b)),
  });
  const dns = (engines: string[]) =>
    webCache(() => null, engines, { serviceId: 53, protocol: 17, ports: [53], table: table(() => null, 1) });
  // Service 0 with no engine (fail open), service 1 with none (fail closed), service 2 with E1, and a UDP service.
  const two = (e: string, changeNumber: number) =>
    webCache(() => e, [e], { serviceId: 2, priority: 2, table: table(() => e, changeNumber) });
  await f.r.applyAll([
    webCache(() => null, []),
    webCache(() => null, [], { serviceId: 1, failMode: 'closed' }),
    two(E1, 1),
    dns([]),
  ]);
  assert.deepEqual(
    [...f.r.bucketMoves()],
    [
      [0, []],
      [1, []],
      [2, []],
    ],
  );
  // E1 takes every bucket of 0 and 1: each moved, from unassigned and from refused.
  clock = 6000;
  await f.r.applyAll([
    webCache(() => E1, [E1], { table: table(() => E1, 2) }),
    webCache(() => E1, [E1], { serviceId: 1, failMode: 'closed', table: table(() => E1, 2) }),
    dns([E1]),
  ]);
  const moves = f.r.bucketMoves();
  assert.equal(moves.get(0)?.length, 256);
  assert.ok(moves.get(0)?.every((m) => m.before === 'unassigned' && m.engineBefore === null && m.endsInMs === 600_000));
  assert.ok(moves.get(1)?.every((m) => m.before === 'refused' && m.engineBefore === null));
  assert.equal(moves.has(53), false, 'a service that records every flow keeps no moves');
  // E2 joins service 0 and takes buckets 0-9: they keep their claim before the first move (unassigned). E1 leaves
  // service 2 for E2: its older connections are an engine's that has left (reset).
  clock = 7000;
  await f.r.applyAll([
    webCache((b) => (b < 10 ? E2 : E1), [E1, E2], { table: table((b) => (b < 10 ? E2 : E1), 3) }),
    two(E2, 2),
  ]);
  const again = f.r.bucketMoves();
  assert.deepEqual(again.get(0)?.[0], { bucket: 0, before: 'unassigned', engineBefore: null, endsInMs: 600_000 });
  assert.equal(again.get(0)?.[10]?.endsInMs, 599_000, 'bucket 10 did not move again');
  assert.equal(again.get(2)?.length, 256);
  assert.ok(again.get(2)?.every((m) => m.before === 'gone' && m.engineBefore === null && m.endsInMs === 600_000));
  await f.r.stop();
});
