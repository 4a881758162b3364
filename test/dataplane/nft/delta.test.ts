// A change to one service costs one service's worth of nft work: the transaction rewrites that service's maps, sets
// and chain, and only the hook rules of the others (a fake `ip`/`nft` records each transaction's text).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DataplaneError, NftRedirector } from '../../../src/dataplane/index.js';
import type { Exec } from '../../../src/dataplane/kernel/exec.js';
import { fakeRouteGets, webCache } from '../service-fixture.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

function fakeKernel(): { exec: Exec; transactions: string[]; failNext: () => void } {
  const transactions: string[] = [];
  let fail = false;
  const exec: Exec = (cmd, args, input) => {
    if (cmd === 'ip' && args[0] === '-j' && args[1] === 'route' && args[2] === 'get') {
      return Promise.resolve(JSON.stringify([{ dst: args[3], dev: 'br0', prefsrc: '192.0.2.1' }]));
    }
    if (cmd === 'ip' && args.includes('-batch')) return Promise.resolve(fakeRouteGets(input));
    if (cmd === 'ip' && args.includes('-j')) return Promise.resolve('[]');
    if (cmd === 'nft' && args[0] === 'list')
      return Promise.reject(new DataplaneError('command-failed', 'no such table'));
    if (cmd === 'nft' && args[0] === '-f' && input !== undefined && input.includes('svc_')) {
      if (fail) {
        fail = false;
        return Promise.reject(new DataplaneError('command-failed', 'nft: rejected'));
      }
      transactions.push(input);
    }
    return Promise.resolve('');
  };
  return {
    exec,
    transactions,
    failNext: () => {
      fail = true;
    },
  };
}

const svc = (id: number, owner: (b: number) => string | null, engines: string[]) =>
  webCache(owner, engines, { serviceId: id, ports: [8000 + id] });

test('a change of one service rewrites its objects only; every service keeps its hook rule', async () => {
  const k = fakeKernel();
  const r = new NftRedirector({ exec: k.exec, probeGre: () => Promise.resolve(false) });
  await r.start();
  await r.apply(svc(51, () => E1, [E1, E2]));
  await r.apply(svc(52, () => E2, [E1, E2]));
  await r.apply(svc(51, (b) => (b % 2 ? E1 : E2), [E1, E2]));
  const [first, second, third] = k.transactions;
  assert.ok(first !== undefined && second !== undefined && third !== undefined);
  // The second transaction creates service 52 and leaves 51's map and chain alone.
  assert.match(second, /^flush map inet wccpd bucket_52$/m);
  assert.doesNotMatch(second, /bucket_51|flush chain inet wccpd svc_51|engines_51 \{/);
  // The third rewrites 51 (its new table) and leaves 52 alone; both hook rules are there.
  const slot = (id: number, engine: string) => r.slotsInUse().get(`${id} l2 ${engine}`);
  assert.match(
    third,
    new RegExp(
      `^add element inet wccpd bucket_51 \\{ 0 : jump claim_${slot(51, E2)}, 1 : jump claim_${slot(51, E1)},`,
      'm',
    ),
  );
  assert.doesNotMatch(third, /bucket_52|svc_52 ip saddr|flush chain inet wccpd svc_52/);
  for (const id of [51, 52]) assert.match(third, new RegExp(`^add rule inet wccpd unclaimed .* jump svc_${id}$`, 'm'));
  // The 256 bucket counter elements are added when the service first comes, not again (their counts stay).
  assert.match(first, /^add element inet wccpd bseen_51 \{ 0, 1, 2,/m);
  assert.doesNotMatch(third, /add element inet wccpd bseen_51/);
});

test('a failed transaction changes nothing: the next change of another service still leaves the failed one as it was', async () => {
  const k = fakeKernel();
  const r = new NftRedirector({ exec: k.exec, probeGre: () => Promise.resolve(false) });
  await r.start();
  await r.apply(svc(51, () => E1, [E1]));
  await r.apply(svc(52, () => E1, [E1]));
  k.failNext();
  await assert.rejects(r.apply(svc(51, () => E2, [E1, E2])), /rejected/);
  await r.apply(svc(52, () => null, [E1]));
  const last = k.transactions.at(-1) ?? '';
  assert.match(last, /^add element inet wccpd bucket_52 \{ 0 : jump direct,/m);
  assert.doesNotMatch(last, /bucket_51/);
  assert.equal(r.slotsInUse().has(`51 l2 ${E2}`), false, 'engine 2 of the failed change got no slot');
  const inForce = new Set(r.slotsInUse().values());
  const named = [...last.matchAll(/(?:jump|goto) (?:claim|slot)_(\d+)/g)].map((m) => Number(m[1]));
  assert.ok(
    named.length > 0 && named.every((n) => inForce.has(n)),
    `the transaction names only slots in force: ${[...new Set(named)].join(', ')}`,
  );
  // Removed and applied again: its objects, counters included, are written from scratch.
  await r.removeService(51);
  await r.apply(svc(51, () => E1, [E1]));
  assert.match(k.transactions.at(-1) ?? '', /^add element inet wccpd bseen_51 \{ 0, 1,/m);
});

test('applyAll: services that change together go in ONE transaction; a failed one changes none of them', async () => {
  const k = fakeKernel();
  const r = new NftRedirector({ exec: k.exec, probeGre: () => Promise.resolve(false) });
  await r.start();
  for (const id of [51, 52, 53]) await r.apply(svc(id, (b) => (b % 2 ? E1 : E2), [E1, E2]));
  const slotsBefore = r.slotsInUse();
  const n = k.transactions.length;
  // Engine 1 leaves 51 and 52 at the same moment (53 is not told yet): one transaction rewrites both, not 53.
  await r.applyAll([svc(51, () => E2, [E2]), svc(52, () => E2, [E2])]);
  assert.equal(k.transactions.length, n + 1);
  const both = k.transactions.at(-1) ?? '';
  for (const id of [51, 52]) assert.match(both, new RegExp(`^flush map inet wccpd bucket_${id}$`, 'm'));
  assert.doesNotMatch(both, /bucket_53|flush chain inet wccpd svc_53/);
  for (const id of [51, 52, 53])
    assert.match(both, new RegExp(`^add rule inet wccpd unclaimed .* jump svc_${id}$`, 'm'));
  // Both released slots are parked, 53's stays live.
  const parked = r.parkedSlots();
  assert.deepEqual([...parked.values()].sort(), [`51 l2 ${E1}`, `52 l2 ${E1}`]);
  assert.equal(r.slotsInUse().get(`53 l2 ${E1}`), slotsBefore.get(`53 l2 ${E1}`));

  // Its return to both, refused by nft: neither service changes, nothing is unparked.
  k.failNext();
  const back = (id: number) => svc(id, (b) => (b % 2 ? E1 : E2), [E1, E2]);
  await assert.rejects(r.applyAll([back(51), back(52)]), /rejected/);
  assert.equal(k.transactions.length, n + 1);
  assert.deepEqual(r.parkedSlots(), parked);
  assert.equal(r.slotsInUse().has(`51 l2 ${E1}`), false);
  // Applied again: one transaction, each key back on its parked slot.
  await r.applyAll([back(51), back(52)]);
  assert.equal(k.transactions.length, n + 2);
  for (const id of [51, 52]) assert.equal(r.slotsInUse().get(`${id} l2 ${E1}`), slotsBefore.get(`${id} l2 ${E1}`));
  assert.deepEqual(r.parkedSlots(), new Map());
  // An empty list costs no transaction; a service listed twice is refused before any.
  await r.applyAll([]);
  await assert.rejects(r.applyAll([back(51), back(51)]), /listed twice/);
  assert.equal(k.transactions.length, n + 2);
});
