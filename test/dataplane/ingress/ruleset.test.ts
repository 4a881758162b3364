// The ingress backend's ruleset text: what each service, slot, gone engine and full flow map generates.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  CLAIM_GONE,
  CLAIM_REFUSED,
  CLAIM_UNASSIGNED,
  CLOSING_FLAG,
  DEFAULT_FLOW_LIMITS,
  DIRECT_VALUE,
  LOST_VALUE,
  NEW_FLOW_SECONDS,
} from '../../../src/dataplane/ingress/names.js';
import { ingressBaseRuleset, ingressServicesRuleset } from '../../../src/dataplane/ingress/ruleset.js';
import type { IngressService } from '../../../src/dataplane/ingress/service-objects.js';
import { planService } from '../../../src/dataplane/kernel/rules.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import { webCache } from '../service-fixture.js';
import { FLOWS_MAX_DEFAULT } from '../../../src/dataplane/settings.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const T = 'netdev wccpd_ingress';
const limits = { max: 1000, idleSeconds: 600 };

function service(
  s: ServiceRedirect,
  slots: Record<string, number>,
  over: Partial<IngressService> = {},
): IngressService {
  const m = new Map(Object.entries(slots));
  return {
    plan: planService(s, m),
    slots: [...m].map(([engine, slot]) => ({ slot, engine, device: 'br0' })),
    ...over,
  };
}

/** The transaction text, split into chains' rules and verdict maps' elements, to follow a packet's paths. */
function parse(text: string) {
  const chains = new Map<string, string[]>();
  const maps = new Map<string, Map<string, string>>();
  for (const line of text.split('\n')) {
    let m = /^add chain netdev wccpd_ingress (\S+)/.exec(line);
    if (m !== null && !chains.has(m[1] ?? '')) chains.set(m[1] ?? '', []);
    m = /^flush chain netdev wccpd_ingress (\S+)$/.exec(line);
    if (m !== null) chains.set(m[1] ?? '', []);
    m = /^delete chain netdev wccpd_ingress (\S+)$/.exec(line);
    if (m !== null) chains.delete(m[1] ?? '');
    m = /^add rule netdev wccpd_ingress (\S+) (.*)$/.exec(line);
    if (m !== null) chains.get(m[1] ?? '')?.push(m[2] ?? '');
    m = /^flush map netdev wccpd_ingress (\S+)$/.exec(line);
    if (m !== null) maps.set(m[1] ?? '', new Map());
    m = /^delete element netdev wccpd_ingress (\S+) \{ ([\d, ]+) \}$/.exec(line);
    if (m !== null) for (const k of (m[2] ?? '').split(', ')) maps.get(m[1] ?? '')?.delete(k);
    m = /^add element netdev wccpd_ingress (\S+) \{ (.*) \}$/.exec(line);
    if (m !== null && /: (goto|jump) /.test(m[2] ?? '')) {
      const map = maps.get(m[1] ?? '') ?? new Map<string, string>();
      maps.set(m[1] ?? '', map);
      for (const e of (m[2] ?? '').split(', ')) {
        const [k, v] = e.split(' : ');
        map.set(k ?? '', v ?? '');
      }
    }
  }
  return { chains, maps };
}

/**
 * Every way a packet can leave a chain after `meta priority` was written (an accept, a fwd, a reject, a drop, the
 * chain's end falling back to the hook's accept) is preceded by `meta priority set 0`: the scratch never leaves.
 * Returns the leaks found, following gotos, jumps and verdict maps.
 */
function leaks(parsed: ReturnType<typeof parse>, start: string): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  const walk = (chain: string, dirty: boolean): void => {
    const key = `${chain} ${dirty}`;
    if (seen.has(key)) return;
    seen.add(key);
    const rules = parsed.chains.get(chain);
    if (rules === undefined) {
      out.push(`${chain}: no such chain`);
      return;
    }
    for (const r of rules) {
      // Writes: a flow map hit or the hash; a miss of `meta priority set ... map` ends the rule before the write.
      const writes = /meta priority set (?!0( |$))/.test(r) || /jump hash_/.test(r);
      const cleans = /meta priority set 0( |$)/.test(r);
      const after = cleans && !writes ? false : dirty || writes;
      for (const [, , target] of r.matchAll(/\b(goto|jump) (\S+)/g)) {
        if (target?.startsWith('hash_')) continue;
        walk(target ?? '', after);
      }
      const vmap = /vmap @(\S+)/.exec(r);
      if (vmap !== null) {
        const map = parsed.maps.get(vmap[1] ?? '');
        if (map === undefined) out.push(`${chain}: no map ${vmap[1]}`);
        for (const v of map?.values() ?? []) walk(v.split(' ')[1] ?? '', after);
      }
      if (after && /\b(accept|fwd ip to|reject|drop)\b/.test(r) && !/^fib daddr type local accept$/.test(r))
        out.push(`${chain}: "${r}" leaves with meta priority written`);
      // Rules no packet gets past: an unconditional verdict, or a bucket map (256 entries: it always matches).
      const full = /^meta priority vmap @(bucket_\d+)$/.exec(r);
      if (/^(counter name \S+ )?(meta priority set 0 )?(goto \S+|accept|drop|reject|fwd ip to .*)$/.test(r)) return;
      if (full !== null && parsed.maps.get(full[1] ?? '')?.size === 256) return;
      dirty = after;
    }
    if (dirty) out.push(`${chain}: its end is reached with meta priority written`);
  };
  walk(start, false);
  return out;
}

/** Every chain a packet entering at `start` can reach (gotos, jumps and verdict maps followed). */
function reachable(parsed: ReturnType<typeof parse>, start: string): Set<string> {
  const seen = new Set<string>();
  const walk = (chain: string): void => {
    if (seen.has(chain)) return;
    seen.add(chain);
    for (const r of parsed.chains.get(chain) ?? []) {
      for (const [, , target] of r.matchAll(/\b(goto|jump) (\S+)/g)) walk(target ?? '');
      const vmap = /vmap @(\S+)/.exec(r);
      for (const v of parsed.maps.get(vmap?.[1] ?? '')?.values() ?? []) walk(v.split(' ')[1] ?? '');
    }
  };
  walk(start);
  return seen;
}

/**
 * What the packet path writes into the flow maps: each `add` and `update` of a flows_<id> map in a reachable chain,
 * with the timeout it names (null: none, so the map's own, flows.idle).
 */
function flowWrites(parsed: ReturnType<typeof parse>, start: string): { op: string; timeout: number | null }[] {
  const out: { op: string; timeout: number | null }[] = [];
  for (const chain of reachable(parsed, start)) {
    for (const r of parsed.chains.get(chain) ?? []) {
      for (const m of r.matchAll(/\b(add|update) @flows_\d+ \{ [^}]*?(?:timeout (\d+)s )?: [^}]*\}/g))
        out.push({ op: `${chain}: ${m[1]}`, timeout: m[2] !== undefined ? Number(m[2]) : null });
    }
  }
  return out;
}

test('the static part: the hash chains, @slots with the direct value, and gone resetting TCP', () => {
  const text = ingressBaseRuleset();
  const lines = text.split('\n');
  assert.deepEqual(lines.slice(0, 3), [`add table ${T}`, `delete table ${T}`, `add table ${T}`]);
  assert.ok(lines.includes(`add map ${T} byte { typeof @nh,128,8 : meta priority; }`));
  assert.ok(lines.includes(`add chain ${T} hash_daddr`) && lines.includes(`add chain ${T} hash_saddr`));
  // The hash (seven lookups) behind a cache of the addresses hashed in the last minute (one lookup).
  for (const f of ['daddr', 'saddr']) {
    const rules = lines.filter((l) => l.startsWith(`add rule ${T} hash_${f} `));
    assert.equal(rules.length, 9);
    assert.equal(rules[0], `add rule ${T} hash_${f} meta priority set ip ${f} map @hcache_${f} return`);
    assert.equal(rules[8], `add rule ${T} hash_${f} add @hcache_${f} { ip ${f} : meta priority }`);
    assert.ok(
      lines.includes(
        `add map ${T} hcache_${f} { typeof ip ${f} : meta priority; size 65536; timeout 60s; flags dynamic; }`,
      ),
    );
  }
  assert.ok(
    lines.includes(
      `add element ${T} slots { ${DIRECT_VALUE} : goto direct, ${DIRECT_VALUE | CLOSING_FLAG} : goto direct }`,
    ),
  );
  assert.deepEqual(
    lines.filter((l) => l.startsWith(`add rule ${T} gone `)),
    [
      `add rule ${T} gone meta priority set 0`,
      `add rule ${T} gone meta l4proto tcp reject with tcp reset`,
      `add rule ${T} gone reject`,
    ],
  );
  // No hook, no conntrack, no mark: nothing passes through the table before a service is applied.
  assert.doesNotMatch(text, /hook|\bct |\bmark\b/);
});

test('a service: hook rule, flow map, per-bucket steering and claims, slot chains that fwd to the engine', () => {
  const owner = (b: number): string | null => (b < 100 ? E1 : b < 200 ? E2 : null);
  // Three buckets moved within flows.idle: from engine 2's slot, from no engine, from an engine that left since.
  const moved = new Map([
    [0, 9],
    [150, CLAIM_UNASSIGNED],
    [255, CLAIM_GONE],
  ]);
  const text = ingressServicesRuleset({
    services: [service(webCache(owner, [E1, E2]), { [E1]: 7, [E2]: 9 }, { moved })],
    added: [7, 9],
    hook: { chain: 1, previous: null },
    limits,
  });
  const lines = text.split('\n');
  assert.ok(
    lines.includes(
      `add chain ${T} ingress_1 { type filter hook ingress devices = { "c0" } priority filter + 10; policy accept; }`,
    ),
  );
  assert.ok(lines.includes(`add rule ${T} ingress_1 th dport { 80 } meta protocol ip meta l4proto tcp jump svc_0`));
  assert.ok(
    lines.includes(
      `add map ${T} flows_0 { typeof @nh,96,64 . @th,0,32 : meta priority; size 1000; ` +
        'timeout 600s; flags dynamic; }',
    ),
  );
  const p = parse(text);
  const buckets = p.maps.get('bucket_0');
  assert.equal(buckets?.size, 256);
  // A bucket that did not move: straight to its engine's slot chain (or routed, pass_0), nothing recorded.
  assert.equal(buckets?.get('1'), 'goto slot_7');
  assert.equal(buckets?.get('151'), 'goto slot_9');
  assert.equal(buckets?.get('254'), 'goto pass_0');
  for (const b of ['0', '150', '255']) assert.equal(buckets?.get(b), 'goto moved_0', b);
  // A moved one: a SYN is claimed by the engine now, anything else by the claim before the move (lost_0: one that
  // left); both recorded. With the map full, the steering now.
  assert.deepEqual(
    [...(p.maps.get('newclaim_0') ?? [])],
    [
      ['0', 'goto claim_7'],
      ['150', 'goto claim_9'],
      ['255', 'goto unassigned_0'],
    ],
  );
  assert.deepEqual(
    [...(p.maps.get('oldclaim_0') ?? [])],
    [
      ['0', 'goto claim_9'],
      ['150', 'goto unassigned_0'],
      ['255', 'goto lost_0'],
    ],
  );
  assert.deepEqual(
    [...(p.maps.get('newsteer_0') ?? [])],
    [
      ['0', 'goto slot_7'],
      ['150', 'goto slot_9'],
      ['255', 'goto pass_0'],
    ],
  );
  const K = '@nh,96,64 . @th,0,32';
  const lookup = `meta priority set ${K} map @flows_0`;
  assert.deepEqual(p.chains.get('svc_0'), [
    // FIN, SYN or RST (one mask, as costly as the FIN/RST test was): a SYN never reaches the refresh below.
    `@th,104,8 & 0x7 != 0 ${lookup} goto close_0`,
    // An open flow is refreshed; a closing one (the flag in its value) is not: no second set to look up.
    `${lookup} meta priority & 0x10000 == 0 update @flows_0 { ${K} : meta priority } meta priority vmap @slots`,
    'meta priority & 0x10000 != 0 goto closing_0',
    // No entry: an engine's own packet leaves; a destination hashed within the minute goes by its bucket.
    'ip saddr @engines_0 return',
    'meta priority set ip daddr map @hcache_daddr goto hashed_0',
    'goto classify_0',
  ]);
  // FIN/RST: an open entry deleted and added again with the closing flag and 10 s (a packet path update keeps the
  // value); a closing entry only steers (its 10 s run from the first FIN or RST, a flood of them writes nothing).
  // A SYN (a retransmission; SYN|FIN and SYN|RST are FIN and RST) is steered by an open entry, not refreshed: an
  // unanswered connection attempt keeps 30 s; on a closing entry it goes to closing_0 (a new connection).
  assert.deepEqual(p.chains.get('close_0'), [
    '@th,104,8 & 0x7 == 0x2 meta priority & 0x10000 == 0 meta priority vmap @slots',
    '@th,104,8 & 0x7 == 0x2 goto closing_0',
    'meta priority & 0x10000 != 0 meta priority vmap @slots',
    `meta priority set meta priority | 0x10000 delete @flows_0 { ${K} : meta priority } ` +
      `add @flows_0 { ${K} timeout 10s : meta priority } meta priority vmap @slots`,
    'counter name flows_full_0 meta priority vmap @slots',
    'meta priority set 0 goto classify_0',
  ]);
  // A closing flow's packets follow its entry without refreshing it; a new SYN on its 4-tuple is a new flow, once a
  // second per 4-tuple (@reopened_0, 1 s): within it, the next rule steers it by the closing entry. The lookup is made
  // again: a miss in svc_0 leaves whatever priority an earlier filter set, flag bit or not.
  assert.match(
    text,
    /add set netdev wccpd_ingress reopened_0 \{ typeof @nh,96,64 \. @th,0,32; size 1000; timeout 1s; flags dynamic; \}/,
  );
  assert.deepEqual(p.chains.get('closing_0'), [
    `@th,104,8 & 0x12 == 0x2 ${K} != @reopened_0 add @reopened_0 { ${K} } ${lookup} meta priority set 0 ` +
      `delete @flows_0 { ${K} : meta priority } goto classify_0`,
    `${lookup} meta priority vmap @slots`,
    'goto classify_0',
  ]);
  assert.deepEqual(p.chains.get('classify_0'), [
    'fib daddr type local accept',
    'ip saddr @engines_0 return',
    'jump hash_daddr',
    'goto hashed_0',
  ]);
  // A bucket counts its new connections (SYNs); Unassigned too.
  const SYN = '@th,104,8 & 0x12 == 0x2';
  assert.deepEqual(p.chains.get('hashed_0'), [`${SYN} meta priority @bseen_0`, 'meta priority vmap @bucket_0']);
  assert.deepEqual(p.chains.get('pass_0'), [`${SYN} counter name unassigned_0`, 'goto direct']);
  assert.deepEqual(p.chains.get('moved_0'), [
    `${SYN} meta priority vmap @newclaim_0`,
    'meta priority vmap @oldclaim_0',
    'meta priority set 0 accept',
  ]);
  assert.deepEqual(p.chains.get('lost_0'), [
    `add @flows_0 { ${K} timeout 10s : ${LOST_VALUE | CLOSING_FLAG} } goto gone`,
    'counter name flows_full_0 meta priority vmap @newsteer_0',
    'meta priority set 0 accept',
  ]);
  // A new flow is recorded with its slot, for 30 s until its second packet (svc_0's refresh, which names no timeout,
  // gives it the map's 600 s); a full map still steers it (counted), it is just not sticky. A FIN or RST classified
  // here had no entry: it is recorded closing instead (closenew_0, the value in meta priority), for 10 s.
  assert.equal(NEW_FLOW_SECONDS, 30);
  assert.deepEqual(p.chains.get('claim_9'), [
    `@th,104,8 & 0x5 != 0 meta priority set ${9 | CLOSING_FLAG} goto closenew_0`,
    'add @flows_0 { @nh,96,64 . @th,0,32 timeout 30s : 9 } goto slot_9',
    'counter name flows_full_0 meta priority vmap @newsteer_0',
    'meta priority set 0 accept',
  ]);
  assert.deepEqual(p.chains.get('closenew_0'), [
    `add @flows_0 { ${K} timeout 10s : meta priority } meta priority vmap @slots`,
    'counter name flows_full_0 meta priority vmap @slots',
    'meta priority set 0 accept',
  ]);
  assert.deepEqual(p.chains.get('slot_9'), [
    'counter name engine_9 meta priority set 0 fwd ip to 192.0.2.12 device "br0"',
  ]);
  assert.deepEqual(p.chains.get('unassigned_0'), [
    'counter name unassigned_0',
    `@th,104,8 & 0x5 != 0 meta priority set ${DIRECT_VALUE | CLOSING_FLAG} goto closenew_0`,
    `add @flows_0 { @nh,96,64 . @th,0,32 timeout 30s : ${DIRECT_VALUE} } goto direct`,
    'counter name flows_full_0 meta priority vmap @newsteer_0',
    'meta priority set 0 accept',
  ]);
  assert.equal(p.maps.get('slots')?.get('7'), 'goto slot_7');
  assert.equal(p.maps.get('slots')?.get('9'), 'goto slot_9');
  assert.equal(p.maps.get('slots')?.get(String(9 | CLOSING_FLAG)), 'goto slot_9', 'closing: the same engine');
  // closenew_0 never goes back to classify_0 (which reaches it: the kernel refuses a loop) and no rule of the open
  // flow's path (svc_0's first two) changed for it.
  assert.ok(!(p.chains.get('closenew_0') ?? []).some((r) => /classify/.test(r)));
  for (const c of ['engine_7', 'engine_9', 'denied_0', 'unassigned_0', 'flows_full_0'])
    assert.ok(lines.includes(`add counter ${T} ${c}`), c);
  assert.doesNotMatch(text, /\bct |\bmark\b/);
});

test('every path that writes meta priority sets it back to 0 before the packet leaves (hash, mask, closed, udp)', () => {
  const base = parse(ingressBaseRuleset());
  const cases: IngressService[] = [
    service(
      webCache((b) => (b % 2 === 0 ? E1 : null), [E1, E2]),
      { [E1]: 1, [E2]: 2 },
      // Some buckets moved (each kind of claim before), so every recording path is there.
      {
        moved: new Map([
          [0, 2],
          [1, 1],
          [2, CLAIM_UNASSIGNED],
          [3, CLAIM_GONE],
          [5, CLAIM_REFUSED],
        ]),
      },
    ),
    service(
      webCache(() => null, [], { failMode: 'closed' }),
      {},
    ),
    service(
      webCache(() => E1, [E1], { protocol: 17, ports: [53], serviceId: 60 }),
      { [E1]: 3 },
    ),
    service(
      webCache(() => E1, [E1], { protocol: 47, ports: [], serviceId: 61 }),
      { [E1]: 4 },
    ),
    service(
      webCache(() => null, [E1, E2], {
        serviceId: 62,
        maskSets: [
          {
            mask: { sourceAddressMask: 0, destinationAddressMask: 0x1, sourcePortMask: 0, destinationPortMask: 0 },
            values: [
              { sourceAddress: 0, destinationAddress: 0, sourcePort: 0, destinationPort: 0, engine: E1 },
              { sourceAddress: 0, destinationAddress: 1, sourcePort: 0, destinationPort: 0, engine: E2 },
            ],
          },
        ],
      }),
      { [E1]: 5, [E2]: 6 },
    ),
  ];
  for (const s of cases) {
    const text = ingressServicesRuleset({
      services: [s],
      added: s.slots.map((x) => x.slot),
      hook: { chain: 1, previous: null },
      limits,
    });
    const p = parse(text);
    for (const [k, v] of base.chains) if (!p.chains.has(k)) p.chains.set(k, v);
    p.maps.set('slots', new Map([...(base.maps.get('slots') ?? []), ...(p.maps.get('slots') ?? [])]));
    assert.deepEqual(leaks(p, 'ingress_1'), [], `service ${s.plan.serviceId}`);
    assert.ok((p.chains.get('ingress_1')?.length ?? 0) === 1);
    // No path records an entry for the idle timeout: a first packet's add names 30 s (a FIN or RST's 10 s), and only
    // the refresh of an entry that exists (a flow's second packet on) names none, so the map's flows.idle.
    const writes = flowWrites(p, 'ingress_1');
    const id = s.plan.serviceId;
    const adds = writes.filter((w) => / add$/.test(w.op));
    const firsts = adds.filter((w) => w.timeout === 30).length;
    if (s.plan.refuse) assert.equal(firsts, 0, 'fail closed with no engine: no new flow recorded');
    else assert.ok(firsts > 0, `service ${id} records new flows`);
    for (const w of adds) assert.ok(w.timeout === 30 || w.timeout === 10, `service ${id}, ${w.op}: ${w.timeout}`);
    assert.deepEqual(
      writes.filter((w) => / update$/.test(w.op)),
      [{ op: `svc_${id}: update`, timeout: null }],
      `service ${id}: the one refresh names no timeout`,
    );
  }
  // The checker does find a leak: a slot chain that forgot its reset.
  const broken = parse(
    ingressServicesRuleset({ services: [cases[0]!], added: [1, 2], hook: { chain: 1, previous: null }, limits }),
  );
  for (const [k, v] of base.chains) if (!broken.chains.has(k)) broken.chains.set(k, v);
  broken.maps.set('slots', new Map([...(base.maps.get('slots') ?? []), ...(broken.maps.get('slots') ?? [])]));
  broken.chains.set('slot_1', ['counter name engine_1 fwd ip to 192.0.2.11 device "br0"']);
  assert.deepEqual(leaks(broken, 'ingress_1'), [
    'slot_1: "counter name engine_1 fwd ip to 192.0.2.11 device "br0"" leaves with meta priority written',
  ]);
  // And follows a FIN or RST with no entry into closenew_0 (the value set in claim_<s> or unassigned_<id>).
  const unreset = parse(
    ingressServicesRuleset({ services: [cases[0]!], added: [1, 2], hook: { chain: 1, previous: null }, limits }),
  );
  for (const [k, v] of base.chains) if (!unreset.chains.has(k)) unreset.chains.set(k, v);
  unreset.maps.set('slots', new Map([...(base.maps.get('slots') ?? []), ...(unreset.maps.get('slots') ?? [])]));
  unreset.chains.set('closenew_0', (unreset.chains.get('closenew_0') ?? []).slice(0, 2));
  assert.deepEqual(leaks(unreset, 'ingress_1'), ['closenew_0: its end is reached with meta priority written']);
});

test('ports, protocol and interfaces: source ports, UDP keys, an interface subset, another protocol', () => {
  const text = ingressServicesRuleset({
    services: [
      service(
        webCache(() => E1, [E1], { clientInterfaces: ['c0', 'c1'] }),
        { [E1]: 1 },
      ),
      service(
        webCache(() => E1, [E1], { serviceId: 60, protocol: 17, ports: [53, 5353], clientInterfaces: ['c1'] }),
        { [E1]: 2 },
      ),
      service(
        webCache(() => E1, [E1], { serviceId: 61, portsAreSource: true, priority: 5 }),
        { [E1]: 3 },
      ),
      service(
        webCache(() => E1, [E1], { serviceId: 62, protocol: 47, ports: [] }),
        { [E1]: 4 },
      ),
      service(
        webCache(() => E1, [E1], { serviceId: 63, clientInterfaces: [] }),
        { [E1]: 5 },
      ),
    ],
    added: [1, 2, 3, 4, 5],
    hook: { chain: 3, previous: 2 },
    limits,
  });
  const lines = text.split('\n');
  assert.ok(lines.includes(`flush chain ${T} ingress_2`));
  assert.ok(
    lines.includes(
      `add chain ${T} ingress_3 { type filter hook ingress devices = { "c0", "c1" } priority filter + 10; policy accept; }`,
    ),
  );
  // Priority order (61 first: priority 5), interfaces named only where the service does not listen on all of them.
  assert.deepEqual(
    lines
      .filter((l) => l.startsWith(`add rule ${T} ingress_3 `))
      .map((l) => l.slice(`add rule ${T} ingress_3 `.length)),
    [
      'th sport { 80 } meta protocol ip meta l4proto tcp iifname { "c0" } jump svc_61',
      'th dport { 80 } meta protocol ip meta l4proto tcp jump svc_0',
      'th dport { 53, 5353 } meta protocol ip meta l4proto udp iifname { "c1" } jump svc_60',
      'meta protocol ip meta l4proto 47 iifname { "c0" } jump svc_62',
    ],
  );
  assert.equal(lines.at(-2), `delete chain ${T} ingress_2`, 'the old base chain goes last, once nothing jumps from it');
  assert.ok(lines.some((l) => l.includes('typeof @nh,96,64 . @th,0,32 : meta priority')));
  assert.ok(lines.some((l) => l.startsWith(`add map ${T} flows_62 { typeof @nh,96,64 : meta priority;`)));
  // FIN/RST shortening is TCP's only: its rule and the close and closing chains.
  assert.equal(lines.filter((l) => l.startsWith(`add rule ${T} svc_60 @th,104,8`)).length, 0);
  assert.equal(lines.filter((l) => l.startsWith(`add rule ${T} svc_61 @th,104,8`)).length, 1);
  assert.ok(lines.includes(`add chain ${T} close_61`) && lines.includes(`add chain ${T} closing_61`));
  assert.ok(lines.includes(`add chain ${T} closenew_61`));
  assert.ok(
    lines.includes(`add rule ${T} claim_3 @th,104,8 & 0x5 != 0 meta priority set ${3 | CLOSING_FLAG} goto closenew_61`),
  );
  // Not for UDP (nor another protocol): @th,104,8 would be payload there.
  assert.ok(!lines.some((l) => /^add rule \S+ \S+ (claim_[24]|unassigned_6[02]) @th,104,8/.test(l)));
  assert.ok(!lines.some((l) => /closenew_6[02]/.test(l)));
  assert.ok(!lines.some((l) => /\bclos(e|ing)_60\b|0x10000/.test(l) && l.includes('_60')));
  assert.deepEqual(
    lines.filter((l) => l.startsWith(`add rule ${T} svc_60 `)),
    [
      `add rule ${T} svc_60 meta priority set @nh,96,64 . @th,0,32 map @flows_60 ` +
        'update @flows_60 { @nh,96,64 . @th,0,32 : meta priority } meta priority vmap @slots',
      `add rule ${T} svc_60 goto classify_60`,
    ],
  );
});

test('a gone engine: its @slots entry resets its flows, its objects go; the number placed again replaces it', () => {
  const one = service(
    webCache(() => E1, [E1]),
    { [E1]: 1 },
    {},
  );
  const text = ingressServicesRuleset({
    services: [{ ...one, plan: { ...one.plan } }],
    released: [2],
    hook: { chain: 1, previous: 1 },
    limits,
  });
  const lines = text.split('\n');
  const at = (l: string): number => lines.indexOf(l);
  const drop = `delete element ${T} slots { 2, ${2 | CLOSING_FLAG} }`;
  const gone = `add element ${T} slots { 2 : goto gone, ${2 | CLOSING_FLAG} : goto gone }`;
  assert.ok(at(drop) >= 0);
  assert.ok(at(gone) > at(drop), 'open and closing flows of the slot alike');
  // Chains go after nothing refers to them: the bucket map rewritten, @slots pointing at gone.
  for (const o of [`chain ${T} claim_2`, `chain ${T} slot_2`, `counter ${T} engine_2`]) {
    assert.ok(at(`delete ${o}`) > at(gone), o);
    assert.ok(at(`delete ${o}`) > at(`flush map ${T} bucket_0`), o);
  }
  assert.ok(at(`flush chain ${T} ingress_1`) === 0, 'the same base chain, rules written again');
  // Later the number is placed again: the gone entry is replaced, not added twice.
  const again = ingressServicesRuleset({
    services: [
      service(
        webCache(() => E2, [E2]),
        { [E2]: 2 },
      ),
    ],
    added: [2],
    goneBefore: new Set([2]),
    hook: { chain: 1, previous: 1 },
    limits,
  }).split('\n');
  const del = again.indexOf(drop);
  assert.ok(del >= 0 && again.indexOf(`add element ${T} slots { 2 : goto slot_2, 65538 : goto slot_2 }`) > del);
  assert.ok(again.indexOf(`add chain ${T} slot_2`) < del);
});

test('an unchanged service gets only its hook rule; a removed one loses every object; no hook without interfaces', () => {
  const s = service(
    webCache(() => E1, [E1]),
    { [E1]: 1 },
  );
  const text = ingressServicesRuleset({
    services: [{ ...s, plan: { ...s.plan, unchanged: true } }],
    removed: [{ serviceId: 51, maskMaps: [0], kind: 'tcp' }],
    released: [3],
    hook: { chain: 1, previous: 1 },
    limits,
  });
  assert.doesNotMatch(text, /svc_0 (?!$)|flows_0|bucket_0/m);
  assert.match(text, /^add rule netdev wccpd_ingress ingress_1 .* jump svc_0$/m);
  for (const o of [
    'chain svc_51',
    'chain classify_51',
    'chain unassigned_51',
    'chain refused_51',
    'map mask_51_0',
    'map bucket_51',
    'map flows_51',
    'set reopened_51',
    'chain close_51',
    'chain closing_51',
    'chain closenew_51',
    'set engines_51',
    'set bseen_51',
    'counter denied_51',
    'counter unassigned_51',
    'counter flows_full_51',
  ]) {
    const [kind, name] = o.split(' ');
    assert.match(text, new RegExp(`^delete ${kind} ${T} ${name}$`, 'm'), o);
  }
  const lines = text.split('\n');
  assert.ok(lines.indexOf(`flush chain ${T} svc_51`) < lines.indexOf(`delete map ${T} flows_51`));
  assert.ok(lines.indexOf(`flush chain ${T} closing_51`) < lines.indexOf(`delete set ${T} reopened_51`));
  // The verdict maps (whose elements `goto unassigned_51`, `refused_51`, or a claim) go before the chains they name:
  // the kernel refuses to delete a chain a map element still names (EBUSY).
  for (const map of ['bucket_51', 'mask_51_0'])
    for (const ch of ['unassigned_51', 'refused_51'])
      assert.ok(lines.indexOf(`delete map ${T} ${map}`) < lines.indexOf(`delete chain ${T} ${ch}`), `${map}, ${ch}`);
  const none = ingressServicesRuleset({
    services: [
      service(
        webCache(() => E1, [E1], { clientInterfaces: [] }),
        { [E1]: 1 },
      ),
    ],
    hook: { chain: null, previous: 4 },
    limits,
  });
  assert.match(none, /^delete chain netdev wccpd_ingress ingress_4$/m);
  assert.doesNotMatch(none, /hook ingress/);
});

test('a changed flow key (protocol) makes the flow map again after emptying every chain that refers to it', () => {
  const s = service(
    webCache(() => E1, [E1], { protocol: 17, ports: [53] }),
    { [E1]: 1 },
    { previousKind: 'tcp' },
  );
  const lines = ingressServicesRuleset({ services: [s], hook: { chain: 1, previous: 1 }, limits }).split('\n');
  const del = lines.indexOf(`delete map ${T} flows_0`);
  assert.ok(del > 0);
  for (const c of ['svc_0', 'claim_1', 'unassigned_0']) assert.ok(lines.indexOf(`flush chain ${T} ${c}`) < del, c);
  // claim_1 and unassigned_0 named closenew_0 (a TCP service's): emptied before it goes.
  for (const c of ['claim_1', 'unassigned_0'])
    assert.ok(lines.indexOf(`flush chain ${T} ${c}`) < lines.indexOf(`delete chain ${T} closenew_0`), c);
  // No longer TCP: the close and closing chains are emptied and deleted before the map they name, not written again.
  for (const c of ['close_0', 'closing_0', 'closenew_0']) {
    assert.ok(lines.indexOf(`flush chain ${T} ${c}`) > lines.indexOf(`flush chain ${T} svc_0`), c);
    assert.ok(lines.indexOf(`delete chain ${T} ${c}`) < del, c);
    assert.ok(!lines.some((l) => l.startsWith(`add rule ${T} ${c} `)), c);
  }
  // ... and so does the set of 4-tuples opened again, which only closing_0 named.
  assert.ok(lines.indexOf(`delete set ${T} reopened_0`) > lines.indexOf(`delete chain ${T} closing_0`));
  assert.ok(!lines.some((l) => l.startsWith(`add set ${T} reopened_0 `)));
  assert.ok(lines.findIndex((l) => l.startsWith(`add map ${T} flows_0 { typeof @nh,96,64 . @th,0,32`)) > del);
});

test("a change writes only the new slots' chains; a flow map made anew has every slot's claim written again", () => {
  const both = (over: Partial<IngressService>): string[] =>
    ingressServicesRuleset({
      services: [
        service(
          webCache(() => E1, [E1, E2]),
          { [E1]: 1, [E2]: 2 },
          over,
        ),
      ],
      added: [2],
      hook: { chain: 1, previous: 1 },
      limits,
    }).split('\n');
  const held = both({ previousKind: 'tcp' });
  assert.ok(held.includes(`add chain ${T} slot_2`) && held.includes(`add chain ${T} claim_2`));
  assert.ok(!held.some((l) => /\b(slot|claim)_1\b/.test(l) && !l.includes('bucket_0')), 'slot 1 is left as it is');
  assert.ok(held.some((l) => l.startsWith(`add element ${T} bucket_0`) && l.includes('goto slot_1')));
  const remade = both({ previousKind: 'udp' });
  for (const ch of ['claim_1', 'slot_1', 'claim_2', 'slot_2']) assert.ok(remade.includes(`flush chain ${T} ${ch}`), ch);
  assert.ok(remade.indexOf(`flush chain ${T} claim_1`) < remade.indexOf(`delete map ${T} flows_0`));
});

test('the default flow bound is also the kernel table size hint: 65,535 in its 16 bits, so a new flow map starts presized', () => {
  // nft passes `size` as the bound and as rhashtable's nelem_hint (a u16): 262,144 would be 0, a 64-bucket start.
  assert.equal(DEFAULT_FLOW_LIMITS.max, FLOWS_MAX_DEFAULT);
  assert.equal(DEFAULT_FLOW_LIMITS.max % 65_536, 65_535);
});

test("a new flow's entry is never given longer than flows.idle: an idle below 30 s is the first packet's timeout too", () => {
  const lines = (idleSeconds: number): string[] =>
    ingressServicesRuleset({
      services: [
        service(
          webCache(() => E1, [E1]),
          { [E1]: 1 },
        ),
        service(
          webCache(() => E1, [E1], { protocol: 17, ports: [53], serviceId: 60 }),
          { [E1]: 2 },
        ),
      ],
      added: [1, 2],
      hook: { chain: 1, previous: null },
      limits: { max: 1000, idleSeconds },
    })
      .split('\n')
      .filter((l) => / (claim_\d|unassigned_\d+) add @flows_/.test(l));
  const K = '@nh,96,64 . @th,0,32';
  assert.deepEqual(lines(20), [
    `add rule ${T} claim_1 add @flows_0 { ${K} timeout 20s : 1 } goto slot_1`,
    `add rule ${T} unassigned_0 add @flows_0 { ${K} timeout 20s : ${DIRECT_VALUE} } goto direct`,
    `add rule ${T} claim_2 add @flows_60 { ${K} timeout 20s : 2 } goto slot_2`,
    `add rule ${T} unassigned_60 add @flows_60 { ${K} timeout 20s : ${DIRECT_VALUE} } goto direct`,
  ]);
  assert.ok(lines(30).every((l) => l.includes(' timeout 30s : ')));
  assert.ok(lines(86_400).every((l) => l.includes(' timeout 30s : ')));
});
