import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bucketOf } from '../../src/buckets/hash.js';
import { baseRuleset, compareServiceOrder, planService, servicesRuleset } from '../../src/dataplane/ruleset.js';
import { DataplaneError } from '../../src/dataplane/errors.js';
import { parseCounterSet, parseNamedCounters } from '../../src/dataplane/counters.js';
import { webCache } from './service-fixture.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const slots = new Map([
  [E1, 1],
  [E2, 2],
]);

/**
 * Runs a static hash chain of baseRuleset() as the kernel would, over the maps the same text loads: meta priority is
 * the one register (no mark is used as scratch), a map miss throws.
 */
function kernelModel(text: string, chain: 'hash_daddr' | 'hash_saddr'): (address: string) => number {
  const byte = new Map<string, number>();
  const nibxor = new Map<string, number>();
  const rules: string[] = [];
  for (const line of text.split('\n')) {
    const el = /^add element inet wccpd (byte|nibxor) \{ (.*) \}$/.exec(line);
    if (el !== null) {
      for (const e of (el[2] ?? '').split(', ')) {
        const [k, v] = e.split(' : ');
        (el[1] === 'byte' ? byte : nibxor).set(k ?? '', Number(v));
      }
    }
    if (line.startsWith(`add rule inet wccpd ${chain} `))
      rules.push(line.slice(`add rule inet wccpd ${chain} `.length));
  }
  const base = chain === 'hash_daddr' ? 128 : 96;
  return (address) => {
    const bytes = address.split('.').map(Number);
    const at = (bit: number): number => {
      const i = (bit - base) / 8;
      if (!Number.isInteger(i) || i < 0 || i > 3) throw new Error(`${chain}: reads outside the address: @nh,${bit}`);
      return bytes[i] ?? NaN;
    };
    let priority = -1;
    const look = (m: Map<string, number>, key: string): number => {
      const v = m.get(key);
      if (v === undefined) throw new Error(`${chain}: map miss for ${key} (${address})`);
      return v;
    };
    for (const r of rules) {
      const first = /^meta priority set @nh,(\d+),8 map @byte$/.exec(r);
      const fold = /^meta priority set meta priority \. \(@nh,(\d+),8 & (0x[0-9a-f]+)\) map @nibxor$/.exec(r);
      if (first !== null) priority = look(byte, String(at(Number(first[1]))));
      else if (fold !== null) priority = look(nibxor, `${priority} . ${at(Number(fold[1])) & Number(fold[2])}`);
      else throw new Error(`${chain}: a rule the model does not know: ${r}`);
    }
    return priority;
  };
}

test('the static hash chains compute the draft hash: every byte value in every position, and 20,000 random addresses', () => {
  const text = baseRuleset();
  for (const chain of ['hash_daddr', 'hash_saddr'] as const) {
    const hash = kernelModel(text, chain);
    for (let pos = 0; pos < 4; pos++) {
      for (let v = 0; v < 256; v++) {
        const a = [0xc6, 0x33, 0x64, 0x50].map((b, i) => (i === pos ? v : b)).join('.');
        assert.equal(hash(a), bucketOf(a), `${chain} ${a}`);
      }
    }
    fc.assert(
      fc.property(fc.ipV4(), (a) => hash(a) === bucketOf(a)),
      { numRuns: 20_000 },
    );
  }
  // Small enough to load fast: no 65,536-entry map.
  const entries =
    text
      .split('\n')
      .filter((l) => l.startsWith('add element'))
      .join('\n')
      .match(/ : /g) ?? [];
  assert.equal(entries.length, 256 + 256 * 31);
  // No mark is scratch: the hash chains never write the packet or conntrack mark.
  assert.doesNotMatch(
    text
      .split('\n')
      .filter((l) => / hash_(d|s)addr /.test(l))
      .join('\n'),
    /mark set/,
  );
  // Starting over a crashed run: our table goes first.
  assert.ok(text.startsWith('add table inet wccpd\ndelete table inet wccpd\n'));
});

test("every write to a mark is masked to wccpd's field and constant: other tools' bits survive", () => {
  const text =
    baseRuleset() +
    servicesRuleset(
      [
        planService(
          webCache((b) => (b % 2 ? E1 : E2), [E1, E2]),
          slots,
        ),
      ],
      [],
      { added: [1, 2], released: [] },
    );
  const writes = text
    .split('\n')
    .filter((l) => /mark set/.test(l))
    .map((l) => l.replace(/^add rule inet wccpd \S+ /, ''));
  assert.deepEqual(writes.sort(), [
    'ct mark set ct mark and 0x7ffff or 0x100000',
    'ct mark set ct mark and 0x7ffff or 0x80000',
    'ct mark set ct mark and 0x7ffff or 0xf8000000',
    'ct mark set ct mark and 0x7ffff or 0xf8080000',
    'meta mark set meta mark and 0x7ffff or 0x100000',
    'meta mark set meta mark and 0x7ffff or 0x80000',
  ]);
  // Reads of a mark look at the field only.
  for (const l of text.split('\n').filter((x) => / (ct|meta) mark /.test(x) && !/mark set/.test(x))) {
    assert.match(l, /(ct|meta) mark and 0xfff80000 /, l);
  }
});

test("the bucket map names each bucket's engine mark, 0 for unassigned or unusable engines", () => {
  const s = webCache((b) => (b < 100 ? E1 : b < 200 ? E2 : b < 250 ? '192.0.2.99' : null), [E1, E2]);
  const text = servicesRuleset([planService(s, slots)]);
  const m = /add element inet wccpd bucket_0 \{ (.*) \}/.exec(text);
  assert.ok(m);
  const map = new Map(
    (m[1] ?? '')
      .split(', ')
      .map((el) => el.split(' : ') as [string, string])
      .map(([k, v]) => [Number(k), v]),
  );
  assert.equal(map.size, 256);
  for (let b = 0; b < 256; b++) {
    assert.equal(map.get(b), b < 100 ? 'jump claim_1' : b < 200 ? 'jump claim_2' : 'jump direct', `bucket ${b}`);
  }
  // Flushed and refilled in the same transaction, before anything else reads it.
  assert.ok(text.indexOf('flush map inet wccpd bucket_0') < text.indexOf('add element inet wccpd bucket_0'));
  assert.match(text, /add element inet wccpd live \{ 0x80000, 0x100000 \}/);
  assert.match(text, /add element inet wccpd slotmark \{ 0x80000 : jump mark_1, 0x100000 : jump mark_2 \}/);
  assert.match(text, /add element inet wccpd engines_0 \{ 192\.0\.2\.11, 192\.0\.2\.12 \}/);
});

test("only the service's new connections on client interfaces are classified; engines' own traffic never", () => {
  const s = webCache(() => E1, [E1], { clientInterfaces: ['c0', 'c1'], ports: [80, 8080] });
  const text = servicesRuleset([planService(s, slots)]);
  assert.match(
    text,
    /add rule inet wccpd prerouting iifname \{ "c0", "c1" \} meta nfproto ipv4 meta l4proto tcp tcp dport \{ 80, 8080 \} jump svc_0/,
  );
  const chain = text
    .split('\n')
    .filter((l) => l.startsWith('add rule inet wccpd svc_0 '))
    .map((l) => l.slice(20));
  assert.deepEqual(chain, [
    // Only an unclaimed connection's first packet is classified (claimed: engine, direct or refused, never 0), and
    // never one an engine sent (draft 4.10); an established packet does not pay for that test.
    'svc_0 ct mark and 0xfff80000 == 0 ct state new ip saddr != @engines_0 jump classify_0',
    // Anything but this service's own engine claims is left alone: never rewritten, never counted.
    'svc_0 ct mark and 0xfff80000 != @slots_0 return',
    'svc_0 ct mark and 0xfff80000 vmap @slotmark',
    'svc_0 meta mark and 0xfff80000 @eseen_0',
  ]);
  const classify = text
    .split('\n')
    .filter((l) => l.startsWith('add rule inet wccpd classify_0 '))
    .map((l) => l.slice(20));
  assert.deepEqual(classify.slice(0, 3), [
    'classify_0 jump hash_daddr',
    'classify_0 meta priority @bseen_0',
    'classify_0 meta priority vmap @bucket_0',
  ]);
  assert.match(text, /add element inet wccpd slots_0 \{ 0x80000 \}/);
  // A source-port service (the return half of a TPROXY pair) also claims a TCP connection at the server's SYN-ACK.
  const src = servicesRuleset([planService({ ...s, serviceFlags: 0x1, portsAreSource: true }, slots)]);
  assert.match(src, /classify_0 jump hash_saddr\n/);
  assert.match(src, /tcp sport \{ 80, 8080 \}/);
  assert.match(src, /svc_0 ct mark and 0xfff80000 == 0 ct state new ip saddr != @engines_0 jump classify_0\n/);
  assert.match(
    src,
    /svc_0 ct mark and 0xfff80000 == 0 tcp flags & \(syn \| ack\) == syn \| ack ip saddr != @engines_0 jump classify_0\n/,
  );
  const udp = servicesRuleset([planService({ ...s, protocol: 17, serviceFlags: 0x1, portsAreSource: true }, slots)]);
  assert.match(udp, /svc_0 ct mark and 0xfff80000 == 0 ip saddr != @engines_0 jump classify_0\n/);
});

test('fail closed claims every connection as refused only when no engine is usable; open never refuses', () => {
  const verdicts = (t: string): Set<string> =>
    new Set(
      (/add element inet wccpd bucket_0 \{ (.*) \}/.exec(t)?.[1] ?? '').split(', ').map((e) => e.split(' : ')[1] ?? ''),
    );
  const none = webCache(() => null, [], { failMode: 'closed' });
  const refused = servicesRuleset([planService(none, slots)]);
  assert.deepEqual(verdicts(refused), new Set(['jump refused']));
  const open = servicesRuleset([planService({ ...none, failMode: 'open' }, slots)]);
  assert.deepEqual(verdicts(open), new Set(['jump direct']));
  const served = servicesRuleset([
    planService(
      webCache((b) => (b < 10 ? null : E1), [E1], { failMode: 'closed' }),
      slots,
    ),
  ]);
  assert.deepEqual(verdicts(served), new Set(['jump direct', 'jump claim_1']));
  for (const t of [refused, open, served]) {
    // Counted once, where the claim is made: unassigned (direct) or denied (refused).
    assert.match(t, /add rule inet wccpd classify_0 ct mark and 0xfff80000 == 0xf8000000 counter name unassigned_0\n/);
    assert.match(t, /add rule inet wccpd classify_0 ct mark and 0xfff80000 == 0xf8080000 counter name denied_0\n/);
    // The refusal is of refused claims only (whichever service made them), never of another service's traffic.
    const forward = t
      .split('\n')
      .filter((l) => l.startsWith('add rule inet wccpd forward '))
      .map((l) => l.slice(20));
    // One rule: unclaimed (unrelated) and direct traffic leaves at once; an engine claim is checked against the live
    // slots (a flow whose engine is gone is ended in every mode); a refused claim is refused.
    assert.deepEqual(forward, [
      'forward ct mark and 0xfff80000 vmap { 0x0 : accept, 0xf8000000 : accept, ' +
        '0xf8080000 : jump reject_claim, 0x80000-0xf7f80000 : jump check_live }',
    ]);
    const chainRules = (name: string): string[] =>
      baseRuleset()
        .split('\n')
        .filter((l) => l.startsWith(`add rule inet wccpd ${name} `))
        .map((l) => l.slice(`add rule inet wccpd ${name} `.length));
    assert.deepEqual(chainRules('check_live'), [
      'ct mark and 0xfff80000 @live accept',
      'meta l4proto tcp reject with tcp reset',
      'reject',
    ]);
    assert.deepEqual(chainRules('reject_claim'), ['meta l4proto tcp reject with tcp reset', 'reject']);
  }
});

test('overlapping services: the prerouting hook meets them by priority, highest first, then lowest id', () => {
  const svc = (serviceId: number, priority: number): ReturnType<typeof webCache> =>
    webCache(() => E1, [E1], { serviceId, priority, serviceFlags: 0x12 });
  const plans = [svc(0, 240), svc(52, 100), svc(51, 240), svc(60, 250)].map((s) => planService(s, slots));
  const hooks = [...servicesRuleset(plans).matchAll(/^add rule inet wccpd prerouting .* jump svc_(\d+)$/gm)].map((m) =>
    Number(m[1]),
  );
  assert.deepEqual(hooks, [60, 0, 51, 52]);
  assert.deepEqual(
    [...plans].sort(compareServiceOrder).map((p) => p.serviceId),
    [60, 0, 51, 52],
  );
});

test('removing a service empties its chain before deleting it, and deletes its objects', () => {
  const text = servicesRuleset([], [51]);
  assert.ok(text.indexOf('flush chain inet wccpd svc_51') < text.indexOf('delete chain inet wccpd svc_51'));
  assert.ok(text.indexOf('flush chain inet wccpd prerouting') < text.indexOf('delete chain inet wccpd svc_51'));
  for (const o of [
    'map inet wccpd bucket_51',
    'set inet wccpd engines_51',
    'set inet wccpd bseen_51',
    'set inet wccpd eseen_51',
    'set inet wccpd slots_51',
    'chain inet wccpd classify_51',
    'counter inet wccpd denied_51',
    'counter inet wccpd unassigned_51',
  ]) {
    assert.match(text, new RegExp(`^delete ${o}$`, 'm'));
  }
});

test("counters: every bucket and each engine mark is an element of a counter set; a departed engine's is dropped", () => {
  const plan = {
    ...planService(
      webCache(() => E1, [E1]),
      slots,
    ),
    previousEngineSlots: [1, 2],
  };
  const text = servicesRuleset([plan]);
  assert.match(text, /add set inet wccpd bseen_0 \{ typeof meta priority; counter; \}/);
  const buckets = /add element inet wccpd bseen_0 \{ (.*) \}/.exec(text)?.[1]?.split(', ').map(Number);
  assert.deepEqual(
    buckets,
    Array.from({ length: 256 }, (_, b) => b),
  );
  assert.match(text, /delete element inet wccpd eseen_0 \{ 0x100000 \}/);
  assert.match(text, /add element inet wccpd eseen_0 \{ 0x80000 \}/);
  assert.match(text, /classify_0 meta priority @bseen_0\n/);
  assert.match(text, /svc_0 meta mark and 0xfff80000 @eseen_0\n/);
});

test('a counter set read back from nft JSON', () => {
  const json = JSON.stringify({
    nftables: [
      { metainfo: {} },
      {
        set: {
          name: 'bseen_0',
          elem: [
            { elem: { val: 0, counter: { packets: 3, bytes: 180 } } },
            { elem: { val: 257, counter: { packets: 0, bytes: 0 } } },
          ],
        },
      },
    ],
  });
  const m = parseCounterSet(json);
  assert.deepEqual(
    [...m],
    [
      [0, { packets: 3, bytes: 180 }],
      [257, { packets: 0, bytes: 0 }],
    ],
  );
  // meta priority values (the bucket counters) come back as TC class ids, minor in hex.
  const classid = JSON.stringify({
    nftables: [
      {
        set: {
          name: 'bseen_0',
          elem: [
            { elem: { val: 'none', counter: { packets: 1, bytes: 60 } } },
            { elem: { val: '0:96', counter: { packets: 2, bytes: 120 } } },
          ],
        },
      },
    ],
  });
  assert.deepEqual(
    [...parseCounterSet(classid)],
    [
      [0, { packets: 1, bytes: 60 }],
      [150, { packets: 2, bytes: 120 }],
    ],
  );
});

test('every named counter of the table read back from one nft JSON listing', () => {
  const json = JSON.stringify({
    nftables: [
      { metainfo: {} },
      { counter: { family: 'inet', name: 'denied_80', table: 'wccpd', handle: 43, packets: 2, bytes: 120 } },
      { counter: { family: 'inet', name: 'unassigned_90', table: 'wccpd', handle: 63, packets: 0, bytes: 0 } },
    ],
  });
  assert.deepEqual(
    [...parseNamedCounters(json)],
    [
      ['denied_80', { packets: 2, bytes: 120 }],
      ['unassigned_90', { packets: 0, bytes: 0 }],
    ],
  );
});

test('a hash the kernel path cannot compute exactly is refused with a pointer to userland', () => {
  const s = webCache(() => E1, [E1], { serviceFlags: 0x2 | 0x8 });
  assert.throws(
    () => planService(s, slots),
    (e: unknown) => e instanceof DataplaneError && e.reason === 'unsupported-service' && /userland/.test(e.message),
  );
});
