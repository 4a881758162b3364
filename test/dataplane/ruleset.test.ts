import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bucketOf } from '../../src/buckets/hash.js';
import { baseRuleset, planService, servicesRuleset } from '../../src/dataplane/ruleset.js';
import { DataplaneError } from '../../src/dataplane/errors.js';
import { parseCounterSet, parseNamedCounters } from '../../src/dataplane/counters.js';
import { webCache } from './service-fixture.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const slots = new Map([[E1, 1], [E2, 2]]);

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
    if (line.startsWith(`add rule inet wccpd ${chain} `)) rules.push(line.slice(`add rule inet wccpd ${chain} `.length));
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
    fc.assert(fc.property(fc.ipV4(), (a) => hash(a) === bucketOf(a)), { numRuns: 20_000 });
  }
  // Small enough to load fast: no 65,536-entry map.
  const entries = text.split('\n').filter((l) => l.startsWith('add element')).join('\n').match(/ : /g) ?? [];
  assert.equal(entries.length, 256 + 256 * 31);
  // No mark is scratch: the hash chains never write the packet or conntrack mark.
  assert.doesNotMatch(text.split('\n').filter((l) => / hash_(d|s)addr /.test(l)).join('\n'), /mark set/);
  // Starting over a crashed run: our table goes first.
  assert.ok(text.startsWith('add table inet wccpd\ndelete table inet wccpd\n'));
});

test('every write to a mark is masked to wccpd\'s field and constant: other tools\' bits survive', () => {
  const text = baseRuleset() + servicesRuleset([planService(webCache((b) => (b % 2 ? E1 : E2), [E1, E2]), slots)], [],
    { added: [1, 2], released: [] });
  const writes = text.split('\n').filter((l) => /mark set/.test(l)).map((l) => l.replace(/^add rule inet wccpd \S+ /, ''));
  assert.deepEqual(writes.sort(), [
    'ct mark set ct mark and 0x7ffff or 0x100000', 'ct mark set ct mark and 0x7ffff or 0x80000',
    'ct mark set ct mark and 0x7ffff or 0xf8000000',
    'meta mark set meta mark and 0x7ffff or 0x100000', 'meta mark set meta mark and 0x7ffff or 0x80000',
  ]);
  // Reads of a mark look at the field only.
  for (const l of text.split('\n').filter((x) => / (ct|meta) mark /.test(x) && !/mark set/.test(x))) {
    assert.match(l, /(ct|meta) mark and 0xfff80000 /, l);
  }
});

test('the bucket map names each bucket\'s engine mark, 0 for unassigned or unusable engines', () => {
  const s = webCache((b) => (b < 100 ? E1 : b < 200 ? E2 : b < 250 ? '192.0.2.99' : null), [E1, E2]);
  const text = servicesRuleset([planService(s, slots)]);
  const m = /add element inet wccpd bucket_0 \{ (.*) \}/.exec(text);
  assert.ok(m);
  const map = new Map((m[1] ?? '').split(', ').map((el) => el.split(' : ') as [string, string]).map(([k, v]) => [Number(k), v]));
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

test('only the service\'s new connections on client interfaces are classified; engines\' own traffic never', () => {
  const s = webCache(() => E1, [E1], { clientInterfaces: ['c0', 'c1'], ports: [80, 8080] });
  const text = servicesRuleset([planService(s, slots)]);
  assert.match(text, /add rule inet wccpd prerouting iifname \{ "c0", "c1" \} meta nfproto ipv4 meta l4proto tcp tcp dport \{ 80, 8080 \} jump svc_0/);
  const chain = text.split('\n').filter((l) => l.startsWith('add rule inet wccpd svc_0 '));
  assert.equal(chain[0], 'add rule inet wccpd svc_0 ip saddr @engines_0 return');
  const classify = chain.filter((l) => /vmap @bucket_0|jump hash_/.test(l));
  assert.deepEqual(classify, ['add rule inet wccpd svc_0 ct state new jump hash_daddr',
    'add rule inet wccpd svc_0 ct state new meta priority vmap @bucket_0']);
  assert.ok(chain.includes('add rule inet wccpd svc_0 ct mark and 0xfff80000 vmap @slotmark'));
  const src = servicesRuleset([planService({ ...s, serviceFlags: 0x1, portsAreSource: true }, slots)]);
  assert.match(src, /svc_0 ct state new jump hash_saddr\n/);
  assert.match(src, /tcp sport \{ 80, 8080 \}/);
});

test('fail closed refuses new connections only when no engine is usable; open never refuses', () => {
  const none = webCache(() => null, [], { failMode: 'closed' });
  const refused = servicesRuleset([planService(none, slots)]);
  assert.match(refused, /add rule inet wccpd forward iifname \{ "c0" \} meta nfproto ipv4 meta l4proto tcp tcp dport \{ 80 \} ip saddr != @engines_0 ct state new counter name denied_0 reject with tcp reset/);
  assert.doesNotMatch(refused, /counter name unassigned_0/, 'while refusing, nothing counts as unassigned');
  const open = servicesRuleset([planService({ ...none, failMode: 'open' }, slots)]);
  assert.doesNotMatch(open, /ct state new (counter name denied_0 )?reject/);
  assert.match(open, /add rule inet wccpd svc_0 ct state new ct mark and 0xfff80000 == 0xf8000000 counter name unassigned_0/);
  const served = servicesRuleset([planService(webCache(() => E1, [E1], { failMode: 'closed' }), slots)]);
  assert.doesNotMatch(served, /ct state new (counter name denied_0 )?reject/);
  // A flow whose engine is gone is ended in every mode.
  for (const t of [refused, open, served]) {
    assert.match(t, /ct state != new ct mark and 0xfff80000 0x80000-0xf7f80000 ct mark and 0xfff80000 != @live reject with tcp reset/);
  }
  const udp = servicesRuleset([planService(webCache(() => null, [], { failMode: 'closed', protocol: 17, ports: [53] }), slots)]);
  assert.match(udp, /meta l4proto udp udp dport \{ 53 \} .* ct state new counter name denied_0 reject$/m);
});

test('removing a service empties its chain before deleting it, and deletes its objects', () => {
  const text = servicesRuleset([], [51]);
  assert.ok(text.indexOf('flush chain inet wccpd svc_51') < text.indexOf('delete chain inet wccpd svc_51'));
  assert.ok(text.indexOf('flush chain inet wccpd prerouting') < text.indexOf('delete chain inet wccpd svc_51'));
  for (const o of ['map inet wccpd bucket_51', 'set inet wccpd engines_51', 'set inet wccpd bseen_51', 'set inet wccpd eseen_51',
    'counter inet wccpd denied_51', 'counter inet wccpd unassigned_51']) {
    assert.match(text, new RegExp(`^delete ${o}$`, 'm'));
  }
});

test('counters: every bucket and each engine mark is an element of a counter set; a departed engine\'s is dropped', () => {
  const plan = { ...planService(webCache(() => E1, [E1]), slots), previousEngineSlots: [1, 2] };
  const text = servicesRuleset([plan]);
  assert.match(text, /add set inet wccpd bseen_0 \{ typeof meta priority; counter; \}/);
  const buckets = /add element inet wccpd bseen_0 \{ (.*) \}/.exec(text)?.[1]?.split(', ').map(Number);
  assert.deepEqual(buckets, Array.from({ length: 256 }, (_, b) => b));
  assert.match(text, /delete element inet wccpd eseen_0 \{ 0x100000 \}/);
  assert.match(text, /add element inet wccpd eseen_0 \{ 0x80000 \}/);
  assert.match(text, /svc_0 ct state new meta priority @bseen_0\n/);
  assert.match(text, /svc_0 meta mark and 0xfff80000 @eseen_0\n/);
});

test('a counter set read back from nft JSON', () => {
  const json = JSON.stringify({ nftables: [{ metainfo: {} }, { set: { name: 'bseen_0', elem: [
    { elem: { val: 0, counter: { packets: 3, bytes: 180 } } }, { elem: { val: 257, counter: { packets: 0, bytes: 0 } } }] } }] });
  const m = parseCounterSet(json);
  assert.deepEqual([...m], [[0, { packets: 3, bytes: 180 }], [257, { packets: 0, bytes: 0 }]]);
  // meta priority values (the bucket counters) come back as TC class ids, minor in hex.
  const classid = JSON.stringify({ nftables: [{ set: { name: 'bseen_0', elem: [
    { elem: { val: 'none', counter: { packets: 1, bytes: 60 } } }, { elem: { val: '0:96', counter: { packets: 2, bytes: 120 } } }] } }] });
  assert.deepEqual([...parseCounterSet(classid)], [[0, { packets: 1, bytes: 60 }], [150, { packets: 2, bytes: 120 }]]);
});

test('every named counter of the table read back from one nft JSON listing', () => {
  const json = JSON.stringify({ nftables: [{ metainfo: {} },
    { counter: { family: 'inet', name: 'denied_80', table: 'wccpd', handle: 43, packets: 2, bytes: 120 } },
    { counter: { family: 'inet', name: 'unassigned_90', table: 'wccpd', handle: 63, packets: 0, bytes: 0 } }] });
  assert.deepEqual([...parseNamedCounters(json)], [['denied_80', { packets: 2, bytes: 120 }], ['unassigned_90', { packets: 0, bytes: 0 }]]);
});

test('a hash the kernel path cannot compute exactly is refused with a pointer to userland', () => {
  const s = webCache(() => E1, [E1], { serviceFlags: 0x2 | 0x8 });
  assert.throws(() => planService(s, slots), (e: unknown) =>
    e instanceof DataplaneError && e.reason === 'unsupported-service' && /userland/.test(e.message));
});
