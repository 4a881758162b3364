import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bucketOf } from '../../../src/buckets/hash.js';
import { baseRuleset, servicesRuleset } from '../../../src/dataplane/nft/ruleset.js';
import { compareServiceOrder, planService } from '../../../src/dataplane/kernel/rules.js';
import { DataplaneError } from '../../../src/dataplane/errors.js';
import { parseCounterSet, parseNamedCounters } from '../../../src/dataplane/kernel/counters.js';
import { webCache } from '../service-fixture.js';
import { NftModel, type Packet } from './nft-model.js';
import { DIRECT_VALUE, REFUSED_VALUE } from '../../../src/dataplane/kernel/names.js';

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
  const writes = [...text.matchAll(/(ct|meta) mark set (ct|meta) mark and (0x[0-9a-f]+) or (0x[0-9a-f]+)/g)].map(
    (m) => m[0],
  );
  assert.deepEqual([...new Set(writes)].sort(), [
    'ct mark set ct mark and 0x7ffff or 0x100000',
    'ct mark set ct mark and 0x7ffff or 0x80000',
    'ct mark set ct mark and 0x7ffff or 0xf8000000',
    'ct mark set ct mark and 0x7ffff or 0xf8080000',
    'meta mark set meta mark and 0x7ffff or 0x100000',
    'meta mark set meta mark and 0x7ffff or 0x80000',
  ]);
  assert.equal((text.match(/mark set/g) ?? []).length, writes.length);
  // Reads of a mark look at the field only.
  for (const l of text.split('\n').filter((x) => / (ct|meta) mark /.test(x) && !/mark set/.test(x))) {
    assert.match(l, /(ct|meta) mark and 0xfff80000 /, l);
  }
  // Run over packets: foreign bits of both marks survive a claim, a steered packet and a direct one.
  const model = new NftModel(text);
  const FOREIGN = 0x3f05;
  const first = model.run(pkt({ daddr: '198.51.100.1', ctMark: FOREIGN, mark: FOREIGN }));
  assert.equal(first.ctMark & 0x7ffff, FOREIGN);
  assert.equal(first.mark & 0x7ffff, FOREIGN);
  assert.notEqual(first.mark & 0xfff80000, 0);
});

const C = '203.0.113.5';
const pkt = (over: Partial<Packet> = {}): Packet => ({
  iif: 'c0',
  saddr: C,
  daddr: '198.51.100.7',
  proto: 'tcp',
  sport: 40000,
  dport: 80,
  ctState: 'new',
  ...over,
});
const fm = (v: number): number => v * 2 ** 19;
/** The answer to a client packet: the engine's (or origin's) segment, ports swapped. */
const reply = (p: Packet, over: Partial<Packet> = {}): Packet => ({
  ...p,
  iif: 'e0',
  saddr: p.daddr,
  daddr: p.saddr,
  sport: p.dport,
  dport: p.sport,
  ctState: 'established',
  ...over,
});

/** The model loaded with the base table and one transaction of these services (slots 1, 2 brought in). */
function loaded(...services: ReturnType<typeof webCache>[]): NftModel {
  const plans = services.map((s) => planService(s, slots));
  const added = [...new Set(plans.flatMap((p) => [...p.engineSlots.values()]))];
  return new NftModel(baseRuleset() + servicesRuleset(plans, [], { added, released: [] }));
}

test('per packet, one service: what each kind of packet meets and leaves with (docs/dataplane/nft.md, "Rules per packet")', () => {
  const model = loaded(webCache((b) => (b < 128 ? E1 : E2), [E1, E2]));
  // Each of 256 destinations: the new connection is claimed by the bucket's engine slot, counted in its bucket and
  // for its engine, and its packet marked: 8 rules and the 7 of the hash chain, in one base chain.
  for (let b = 0; b < 256; b++) {
    const daddr = `198.51.100.${b}`; // bucket = XOR of the bytes
    const bucket = 198 ^ 51 ^ 100 ^ b;
    const slot = bucket < 128 ? 1 : 2;
    const o = model.run(pkt({ daddr }));
    assert.equal(o.verdict, 'accept');
    assert.equal(o.ctMark, fm(slot), daddr);
    assert.equal(o.mark, fm(slot), daddr);
    assert.deepEqual(o.counted, [`bseen_0[${bucket}]`, `engine_${slot}`]);
    assert.equal(o.rules, 15);
    assert.equal(o.chains[0], 'prerouting');
    assert.ok(!o.chains.includes('forward'));
  }
  const first = pkt({ daddr: '198.51.100.1' });
  const est = { ...first, ctState: 'established' as const, ctMark: fm(2) };
  // Established, the steered direction: the first rule's lookup, its slot chain's one rule: marked, counted.
  const steered = model.run(est);
  assert.deepEqual(
    [steered.verdict, steered.mark, steered.counted, steered.rules, steered.lookups, steered.chains],
    ['accept', fm(2), ['engine_2'], 2, 1, ['prerouting', 'slot_2']],
  );
  // The other direction (the engine's answer, on the engine segment): the same two rules, unmarked, uncounted.
  const back = model.run(reply(est));
  assert.deepEqual([back.verdict, back.mark, back.counted, back.rules], ['accept', 0, [], 2]);
  // Unrelated: not the service's port, and not its interface; one lookup, then the hook rule.
  for (const u of [pkt({ dport: 443 }), pkt({ iif: 'up0' }), pkt({ dport: 443, ctState: 'established' })]) {
    const o = model.run(u);
    assert.deepEqual([o.verdict, o.ctMark, o.mark, o.counted, o.rules, o.lookups], ['accept', 0, 0, [], 2, 1]);
  }
  // Direct (claimed, no engine): one rule.
  const direct = model.run({ ...est, ctMark: fm(DIRECT_VALUE) });
  assert.deepEqual([direct.verdict, direct.mark, direct.rules], ['accept', 0, 1]);
  // An engine's own connection is never claimed (draft 4.10); its later packets stay unclaimed.
  const own = model.run(pkt({ saddr: E1 }));
  assert.deepEqual([own.verdict, own.ctMark, own.mark, own.counted, own.rules], ['accept', 0, 0, [], 3]);
  // A gone engine's slot (not in the claims map): reset, TCP with a RST; never a packet for the gateway itself.
  assert.equal(model.run({ ...est, ctMark: fm(7) }).verdict, 'reject tcp reset');
  assert.equal(model.run({ ...est, proto: 'udp', ctMark: fm(7) }).verdict, 'reject');
  assert.equal(model.run(reply(est, { ctMark: fm(7) })).verdict, 'reject tcp reset');
  assert.equal(model.run({ ...est, ctMark: fm(7), local: true }).verdict, 'accept');
  // A reserved value other than direct/refused (the userland backend's) passes.
  assert.equal(model.run({ ...est, ctMark: fm(0x1fff) }).verdict, 'accept');
  // A related ICMP packet of a claimed connection is not steered (the service's match is TCP).
  assert.deepEqual(model.run({ ...est, proto: 'icmp' }).mark, 0);
});

test('several client interfaces and ports: each is claimed and steered, nothing else', () => {
  const model = loaded(webCache(() => E1, [E1], { clientInterfaces: ['c0', 'c1'], ports: [80, 8080] }));
  for (const p of [pkt(), pkt({ iif: 'c1', dport: 8080 })]) {
    const o = model.run(p);
    assert.deepEqual([o.ctMark, o.mark], [fm(1), fm(1)]);
    assert.equal(model.run({ ...p, ctState: 'established', ctMark: fm(1) }).mark, fm(1));
  }
  for (const p of [pkt({ iif: 'c2' }), pkt({ dport: 8081 }), pkt({ proto: 'udp' })]) {
    assert.deepEqual(model.run(p).ctMark, 0);
    assert.deepEqual(model.run({ ...p, ctState: 'established', ctMark: fm(1) }).mark, 0);
  }
});

test('fail closed claims every connection as refused only when no engine is usable; open never refuses', () => {
  const none = webCache(() => null, [], { failMode: 'closed' });
  const b = bucketOf(pkt().daddr);
  const refused = loaded(none);
  const first = refused.run(pkt());
  assert.deepEqual(
    [first.verdict, first.ctMark, first.counted],
    ['reject tcp reset', fm(REFUSED_VALUE), [`bseen_0[${b}]`, 'denied_0']],
  );
  assert.equal(refused.run(pkt({ proto: 'udp', ctState: 'new' })).verdict, 'accept'); // not the service's protocol
  // An established refused claim (a connection already claimed when the service began to refuse) is refused too.
  assert.equal(refused.run(pkt({ ctState: 'established', ctMark: fm(REFUSED_VALUE) })).verdict, 'reject tcp reset');
  // A connection to the gateway's own address is never refused (it never reached the forward hook).
  assert.equal(refused.run(pkt({ local: true })).verdict, 'accept');
  // Other traffic, and connections another service claimed or let through, are untouched.
  assert.equal(refused.run(pkt({ dport: 443 })).verdict, 'accept');
  assert.equal(refused.run(pkt({ ctState: 'established', ctMark: fm(DIRECT_VALUE) })).verdict, 'accept');
  const open = loaded({ ...none, failMode: 'open' }).run(pkt());
  assert.deepEqual(
    [open.verdict, open.ctMark, open.mark, open.counted],
    ['accept', fm(DIRECT_VALUE), 0, [`bseen_0[${b}]`, 'unassigned_0']],
  );
  const served = loaded(webCache((x) => (x === b ? null : E1), [E1], { failMode: 'closed' }));
  assert.deepEqual(
    [served.run(pkt()).verdict, served.run(pkt()).counted],
    ['accept', [`bseen_0[${b}]`, 'unassigned_0']],
  );
  assert.equal(served.run(pkt({ daddr: '198.51.100.8' })).ctMark, fm(1));
});

test('overlapping services: claimed by the first in priority order; the other never counts, steers or refuses it', () => {
  const high = webCache((b) => (b % 2 ? E1 : null), [E1], { serviceId: 60, priority: 250, serviceFlags: 0x12 });
  const low = webCache(() => E2, [E2], { serviceId: 51, priority: 240, serviceFlags: 0x12, failMode: 'closed' });
  const model = loaded(low, high);
  for (let b = 0; b < 256; b++) {
    const o = model.run(pkt({ daddr: `198.51.100.${b}` }));
    const bucket = 198 ^ 51 ^ 100 ^ b;
    assert.equal(o.verdict, 'accept');
    assert.equal(o.ctMark, bucket % 2 ? fm(1) : fm(DIRECT_VALUE));
    assert.ok(!o.chains.includes('svc_51'), `${b}: the lower service met a claimed packet`);
  }
  // An established packet of the higher service's claim leaves at its own slot chain.
  const est = model.run(pkt({ ctState: 'established', ctMark: fm(1) }));
  assert.deepEqual([est.mark, est.counted, est.chains], [fm(1), ['engine_1'], ['prerouting', 'slot_1']]);
  // A refusing higher service refuses what it claims; the lower one redirects none of it.
  const refusing = loaded(low, {
    ...high,
    failMode: 'closed',
    table: { changeNumber: 2, buckets: new Array(256).fill(null) },
  });
  const r = refusing.run(pkt());
  assert.deepEqual([r.verdict, r.counted.at(-1)], ['reject tcp reset', 'denied_60']);
  // The hook rules meet the services by priority, highest first, then lowest id.
  const svc = (serviceId: number, priority: number): ReturnType<typeof webCache> =>
    webCache(() => E1, [E1], { serviceId, priority, serviceFlags: 0x12 });
  const plans = [svc(0, 240), svc(52, 100), svc(51, 240), svc(60, 250)].map((s) => planService(s, slots));
  const hooks = [...servicesRuleset(plans).matchAll(/^add rule inet wccpd unclaimed .* jump svc_(\d+)$/gm)].map((m) =>
    Number(m[1]),
  );
  assert.deepEqual(hooks, [60, 0, 51, 52]);
  assert.deepEqual(
    [...plans].sort(compareServiceOrder).map((p) => p.serviceId),
    [60, 0, 51, 52],
  );
});

test('a source-port service (the TPROXY pair) claims at the SYN-ACK and steers only the direction it matches', () => {
  // Service 80: client -> origin:80 on c0. Service 90: origin:80 -> the client's address, arriving on up0.
  const s80 = webCache(() => E1, [E1], { serviceId: 80, serviceFlags: 0x12 });
  const s90 = webCache(() => E2, [E2], {
    serviceId: 90,
    serviceFlags: 0x11,
    portsAreSource: true,
    clientInterfaces: ['up0'],
  });
  const model = loaded(s80, s90);
  // The engine's own connection to the origin (from the engine segment, the client's address) is met by no service.
  const syn = pkt({ iif: 'e0' });
  assert.deepEqual([model.run(syn).ctMark, model.run(syn).rules], [0, 3]);
  const synAck = reply(syn, { iif: 'up0', synAck: true });
  const claimed = model.run(synAck);
  assert.deepEqual([claimed.verdict, claimed.ctMark, claimed.mark], ['accept', fm(2), fm(2)]);
  assert.equal(model.run({ ...synAck, synAck: false, ctMark: fm(2) }).mark, fm(2));
  // Its other direction (the engine's packets, on e0) is never marked.
  assert.equal(model.run({ ...syn, ctState: 'established', ctMark: fm(2) }).mark, 0);
  // A UDP source-port service claims at any packet of an unclaimed connection.
  const udp = loaded({ ...s90, protocol: 17 });
  assert.equal(
    udp.run(pkt({ iif: 'up0', proto: 'udp', sport: 80, dport: 5000, ctState: 'established' })).ctMark,
    fm(2),
  );
});

test("a mask service claims by its Mask/Value Sets, then its packets are steered like a hash service's", () => {
  const s = webCache(() => null, [E1, E2], {
    maskSets: [
      {
        mask: { sourceAddressMask: 0, destinationAddressMask: 0x1, sourcePortMask: 0, destinationPortMask: 0 },
        values: [
          { sourceAddress: 0, destinationAddress: 0, sourcePort: 0, destinationPort: 0, engine: E1 },
          { sourceAddress: 0, destinationAddress: 1, sourcePort: 0, destinationPort: 0, engine: E2 },
        ],
      },
    ],
  });
  const model = loaded(s);
  assert.equal(model.run(pkt({ daddr: '198.51.100.8' })).ctMark, fm(1));
  const odd = model.run(pkt({ daddr: '198.51.100.9' }));
  assert.deepEqual([odd.ctMark, odd.mark, odd.counted], [fm(2), fm(2), ['engine_2']]);
});

test('a change: a slot brought in and one released; removing a service deletes its objects', () => {
  const model = loaded(webCache((b) => (b < 128 ? E1 : E2), [E1, E2]));
  const next = planService(
    webCache(() => E1, [E1]),
    new Map([[E1, 1]]),
  );
  const text = servicesRuleset([next], [], { added: [], released: [2] });
  model.load(text);
  // Slot 2 left the claims map in the same transaction: its flows are reset at their next packet.
  assert.equal(model.run(pkt({ ctState: 'established', ctMark: fm(2) })).verdict, 'reject tcp reset');
  assert.equal(model.run(pkt({ daddr: '198.51.100.200' })).ctMark, fm(1));
  assert.equal(model.chain('slot_2').length, 0);
  for (const o of ['chain inet wccpd claim_2', 'chain inet wccpd slot_2', 'counter inet wccpd engine_2']) {
    assert.match(text, new RegExp(`^delete ${o}$`, 'm'));
  }
  // The claim chain goes before the slot chain it refers to.
  assert.ok(text.indexOf('delete chain inet wccpd claim_2') < text.indexOf('delete chain inet wccpd slot_2'));
  const gone = servicesRuleset([], [51]);
  assert.ok(gone.indexOf('flush chain inet wccpd svc_51') < gone.indexOf('delete chain inet wccpd svc_51'));
  for (const o of [
    'map inet wccpd bucket_51',
    'set inet wccpd engines_51',
    'set inet wccpd bseen_51',
    'chain inet wccpd classify_51',
    'counter inet wccpd denied_51',
    'counter inet wccpd unassigned_51',
  ]) {
    assert.match(gone, new RegExp(`^delete ${o}$`, 'm'));
  }
  // A service without client interfaces claims nothing: its slot chains stay empty.
  const quiet = loaded(webCache(() => E1, [E1], { clientInterfaces: [] }));
  assert.equal(quiet.chain('slot_1').length, 0);
  assert.equal(quiet.run(pkt()).ctMark, 0);
});

test('the bucket counter set holds every bucket once; the service adds them only when they are not there', () => {
  const plan = planService(
    webCache(() => E1, [E1]),
    slots,
  );
  const text = servicesRuleset([plan]);
  assert.match(text, /add set inet wccpd bseen_0 \{ typeof meta priority; counter; \}/);
  const buckets = /add element inet wccpd bseen_0 \{ (.*) \}/.exec(text)?.[1]?.split(', ').map(Number);
  assert.deepEqual(
    buckets,
    Array.from({ length: 256 }, (_, b) => b),
  );
  assert.doesNotMatch(servicesRuleset([{ ...plan, countersExist: true }]), /add element inet wccpd bseen_0/);
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
