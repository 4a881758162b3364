// Parked slots (a fake `ip` and `nft` that keep the rules and routes the batches make): an engine that leaves a
// service group and comes back costs no ip process and no record write; a parked slot expires; a new key whose home
// a parked slot holds takes it; thousands of churns leave nothing behind beyond the bound.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAX_SLOT, MIN_SLOT, NftRedirector } from '../../../src/dataplane/index.js';
import { homeSlot } from '../../../src/dataplane/kernel/engine-slots.js';
import { fakeTimers, webCache } from '../service-fixture.js';
import { fakeKernel } from './fake-kernel.js';

const range = { min: MIN_SLOT, max: MAX_SLOT };
const E = ['192.0.2.11', '192.0.2.12', '192.0.2.13'];
const svc = (engines: string[], serviceId = 0) =>
  webCache((b) => engines[b % engines.length] ?? null, engines, { serviceId, ports: [8000 + serviceId] });

test('an engine leaves and rejoins: no ip process, no record write, the same slot; its chains are kept', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-park-'));
  try {
    const k = fakeKernel();
    const r = new NftRedirector({ exec: k.exec, stateDir: dir, probeGre: () => Promise.resolve(false) });
    await r.start();
    await r.apply(svc(E));
    const slot = r.slotsInUse().get(`0 l2 ${E[2]}`);
    assert.ok(slot !== undefined);
    const record = join(dir, 'kernel-objects');
    const before = statSync(record);
    const ipBefore = k.ip.length;

    await r.apply(svc(E.slice(0, 2)));
    const leave = k.nft.at(-1) ?? '';
    assert.deepEqual(r.parkedSlots(), new Map([[slot, `0 l2 ${E[2]}`]]));
    assert.equal(r.slotsInUse().has(`0 l2 ${E[2]}`), false);
    // Not live: out of `@claims` (nothing is steered by it, its flows are reset); its chains and counter stay.
    assert.match(leave, /^flush map inet wccpd claims$/m);
    assert.doesNotMatch(leave, new RegExp(`goto slot_${slot}\\b`));
    assert.doesNotMatch(leave, new RegExp(`delete (chain|counter) inet wccpd (claim|slot|engine)_${slot}\\b`));

    await r.apply(svc(E));
    const back = k.nft.at(-1) ?? '';
    assert.equal(r.slotsInUse().get(`0 l2 ${E[2]}`), slot, 'the same slot on return');
    assert.deepEqual(r.parkedSlots(), new Map());
    assert.match(back, new RegExp(`^add element inet wccpd claims .* : goto slot_${slot}\\b`, 'm'));
    assert.doesNotMatch(
      back,
      /add (chain inet wccpd claim_|counter inet wccpd engine_)/,
      'its chains and counter were kept',
    );
    assert.equal(k.ip.length, ipBefore, 'no ip process for the leave or the rejoin');
    const after = statSync(record);
    assert.equal(after.ino, before.ino, 'the record was not written again');
    assert.equal(after.mtimeMs, before.mtimeMs);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an IPv6 service: a parked slot keeps its IPv6 rule and route too, its return makes none, and they go with it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-park6-'));
  try {
    const k = fakeKernel(E);
    const t = fakeTimers();
    const r = new NftRedirector({
      exec: k.exec,
      stateDir: dir,
      probeGre: () => Promise.resolve(false),
      now: t.now,
      setTimer: t.setTimer,
    });
    await r.start();
    const dual = (engines: string[]) => ({ ...svc(engines), families: ['ipv4', 'ipv6'] as const });
    await r.apply(dual(E));
    const slot = r.slotsInUse().get(`0 l2 ${E[2]}`) ?? 0;
    const table = String(2_048_000_000 + slot);
    assert.equal(k.routes6.get(table), `via 2001:db8:e::13 dev br0`);
    assert.equal(k.rules6.size, 3 + 2, 'three slot rules and the guard pair');
    const record = join(dir, 'kernel-objects');
    const before = statSync(record);
    const ipBefore = k.ip.length;
    const routeLines = (): string[] =>
      k.ip.slice(ipBefore).filter((c) => /^(rule|route) (add|del|replace) /m.test(c.split('\n').slice(1).join('\n')));

    await r.apply(dual(E.slice(0, 2)));
    assert.deepEqual(r.parkedSlots(), new Map([[slot, `0 l2 ${E[2]}`]]));
    assert.equal(k.routes6.get(table), `via 2001:db8:e::13 dev br0`, 'kept while parked');
    assert.equal(k.rules6.size, 3 + 2);
    await r.apply(dual(E));
    assert.equal(r.slotsInUse().get(`0 l2 ${E[2]}`), slot);
    // Only the changes' `neigh show` (a line of the persistent ip in the daemon): no rule or route made or removed.
    assert.deepEqual(routeLines(), [], 'no ip or ip -6 batch for the leave or the rejoin');
    const after = statSync(record);
    assert.equal(after.mtimeMs, before.mtimeMs, 'the record was not written again');
    // Its IPv6 counter goes on (`add` keeps an existing counter's figures; it is never deleted meanwhile).
    assert.doesNotMatch(k.nft.slice(-2).join('\n'), new RegExp(`delete counter inet wccpd engine6_${slot}\\b`));

    // Parked again, then expired: its IPv6 rule and route go with its IPv4 ones.
    await r.apply(dual(E.slice(0, 2)));
    t.advance(10 * 60_000);
    await r.settled();
    assert.deepEqual(r.parkedSlots(), new Map());
    assert.equal(k.routes6.has(table), false);
    assert.equal(k.rules6.size, 2 + 2);
    assert.equal(k.routes.has(table), false);
    assert.deepEqual(
      r.record.objects().filter((o) => o.kind === 'rule6' || o.kind === 'route6').length,
      2 * 2,
      "the record lists the live slots' IPv6 objects only",
    );
    await r.stop();
    assert.equal(k.rules6.size, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a parked slot expires after ten minutes: its chains, rule and route go, through the queue', async () => {
  const k = fakeKernel();
  const t = fakeTimers();
  const r = new NftRedirector({
    exec: k.exec,
    probeGre: () => Promise.resolve(false),
    now: t.now,
    setTimer: t.setTimer,
  });
  await r.start();
  await r.apply(svc(E));
  const slot = r.slotsInUse().get(`0 l2 ${E[0]}`) ?? 0;
  await r.apply(svc(E.slice(1)));
  assert.equal(k.rules.size, 3 + 2, 'three slot rules and the guard pair');
  t.advance(10 * 60_000 - 1);
  await r.settled();
  assert.equal(r.parkedSlots().size, 1, 'not yet');
  t.advance(1);
  await r.settled();
  assert.deepEqual(r.parkedSlots(), new Map());
  assert.equal(
    k.nft.at(-1),
    `delete chain inet wccpd claim_${slot}\ndelete chain inet wccpd slot_${slot}\ndelete counter inet wccpd engine_${slot}\n`,
  );
  assert.equal(k.rules.size, 2 + 2);
  assert.equal(k.routes.has(String(2_048_000_000 + slot)), false);
  assert.equal(t.waiting(), 0, 'no timer left');
  // The engine comes back after that: a slot made from scratch (its home again).
  await r.apply(svc(E));
  assert.equal(r.slotsInUse().get(`0 l2 ${E[0]}`), slot);
  assert.match(k.nft.at(-1) ?? '', new RegExp(`add chain inet wccpd claim_${slot}\\n`));
  await r.stop();
  assert.equal(t.waiting(), 0);
});

test("a new key whose home a parked slot holds takes it (placement ignores parked slots), the parked one's route repointed", async () => {
  const k = fakeKernel();
  const r = new NftRedirector({ exec: k.exec, probeGre: () => Promise.resolve(false) });
  await r.start();
  // 10.0.0.1 and 10.0.30.254 are 7,933 apart: the same home slot in one service.
  const A = '10.0.0.1';
  const B = '10.0.30.254';
  const home = homeSlot({ serviceId: 0, engine: A, forwarding: 'l2' }, range);
  assert.equal(homeSlot({ serviceId: 0, engine: B, forwarding: 'l2' }, range), home);
  await r.apply(svc([A]));
  await r.apply(svc([]));
  assert.deepEqual(r.parkedSlots(), new Map([[home, `0 l2 ${A}`]]));
  const ipBefore = k.ip.length;
  await r.apply(svc([B]));
  assert.equal(r.slotsInUse().get(`0 l2 ${B}`), home, 'B at its home, as on a gateway that never saw A');
  assert.deepEqual(r.parkedSlots(), new Map(), 'A is no longer parked');
  const batch = k.ip.slice(ipBefore).join('\n');
  assert.match(
    batch,
    new RegExp(`route replace default via ${B.replaceAll('.', '\\.')} table ${2_048_000_000 + home}`),
  );
  assert.doesNotMatch(batch, /rule (add|del)/, 'the slot keeps its rule');
  assert.equal(k.routes.get(String(2_048_000_000 + home)), `via ${B}`);
  // Its nft objects are made again in the same transaction, so B's engine counter starts from zero.
  const taken = k.nft.at(-1) ?? '';
  const del = taken.indexOf(`delete counter inet wccpd engine_${home}\n`);
  const add = taken.indexOf(`add counter inet wccpd engine_${home}\n`);
  assert.ok(del >= 0 && add > del, 'deleted, then made again');
  // A returns while B holds the slot: it is placed next to it, as anywhere else.
  await r.apply(svc([B, A]));
  assert.equal(r.slotsInUse().get(`0 l2 ${A}`), home + 1);
});

test('1,000 churns of 40 engines in 3 service groups (one group, or all three in one applyAll) leave no growth: parked within the bound, rules and record match', async () => {
  const k = fakeKernel();
  const t = fakeTimers();
  const r = new NftRedirector({
    exec: k.exec,
    probeGre: () => Promise.resolve(false),
    maxParked: 8,
    now: t.now,
    setTimer: t.setTimer,
  });
  await r.start();
  const pool = Array.from({ length: 40 }, (_, i) => `198.51.100.${10 + i}`);
  let seed = 7;
  const rand = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const members = new Map<number, Set<string>>([51, 52, 53].map((id) => [id, new Set(pool.slice(0, 8))]));
  for (const [id, set] of members) await r.apply(svc([...set], id));
  let mostParked = 0;
  const toggle = (id: number, e: string): void => {
    const set = members.get(id) ?? new Set();
    if (set.has(e)) set.delete(e);
    else if (set.size < 32) set.add(e);
  };
  for (let i = 0; i < 1000; i++) {
    const e = pool[rand(pool.length)] ?? '';
    // Every other churn is one engine leaving or joining all three groups at once, in one applyAll.
    const ids = rand(2) === 0 ? [51 + rand(3)] : [51, 52, 53];
    for (const id of ids) toggle(id, e);
    await r.applyAll(ids.map((id) => svc([...(members.get(id) ?? [])], id)));
    if (i % 100 === 99) t.advance(60_000);
    await r.settled();
    const live = r.slotsInUse().size;
    const parked = r.parkedSlots().size;
    assert.ok(parked <= 8, `parked ${parked}`);
    mostParked = Math.max(mostParked, parked);
    assert.equal(
      live,
      [...members.values()].reduce((n, s) => n + s.size, 0),
    );
    const slotRules = [...k.rules].filter((l) => l.startsWith('priority 2048 ')).length;
    assert.equal(slotRules, live + parked, 'one rule per live or parked slot, no more');
    assert.equal(k.routes.size, live + parked);
    const recorded = r.record.objects().filter((o) => o.kind === 'rule').length;
    assert.equal(recorded, live + parked, 'the record lists exactly those');
  }
  assert.equal(mostParked, 8, 'the bound was reached');
  await r.stop();
  assert.equal(t.waiting(), 0);
});
