// What the table watches read from `nft -j monitor destroy` and hold the kernel against (no root): which deletions
// name our tables, chains and rules (element lines and other tables' objects are passed over), the chains and rule
// counts our own transactions leave (trackChains), the guard table's rules per chain, and the restore backoff.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_RESTORE_BACKOFF, deletedObject, restoreWait } from '../../../src/dataplane/kernel/table-watch.js';
import { trackChains } from '../../../src/dataplane/nft/commands.js';
import { baseRuleset, removeTableRuleset } from '../../../src/dataplane/nft/ruleset.js';
import { guardRuleCounts, guardRuleset } from '../../../src/dataplane/userland/guard.js';
import { webCache } from '../service-fixture.js';

const T = ['wccpd', 'wccpd_closed'];

test('deletedObject: our tables, chains and rules; not elements, other families or tables, nor other events', () => {
  const line = (o: string): string => `{"delete": {${o}}}`;
  assert.deepEqual(deletedObject(line('"table": {"family": "inet", "name": "wccpd", "handle": 1}'), 'inet', T), {
    table: 'wccpd',
    kind: 'table',
  });
  assert.deepEqual(
    deletedObject(line('"chain": {"family": "inet", "table": "wccpd", "name": "hash_saddr", "handle": 9}'), 'inet', T),
    { table: 'wccpd', kind: 'chain', chain: 'hash_saddr' },
  );
  // A rule event cut by the monitor (4 KiB) still names its table and chain.
  const rule = line(
    `"rule": {"family": "inet", "table": "wccpd", "chain": "prerouting", "handle": 18, "expr": [${'{"x": 1}, '.repeat(9)}`,
  ).slice(0, 120);
  assert.deepEqual(deletedObject(rule, 'inet', T), { table: 'wccpd', kind: 'rule', chain: 'prerouting' });
  for (const other of [
    line('"element": {"family": "inet", "table": "wccpd", "name": "byte", "elem": {"set": [1]}}'),
    line('"table": {"family": "ip", "name": "wccpd", "handle": 1}'),
    line('"chain": {"family": "inet", "table": "admin", "name": "input", "handle": 2}'),
    line('"rule": {"family": "inet", "table": "wccpdx", "chain": "prerouting", "handle": 3}'),
    '{"add": {"table": {"family": "inet", "name": "wccpd", "handle": 1}}}',
    'rule without statements?!',
    '',
  ])
    assert.equal(deletedObject(other, 'inet', T), null, other);
});

test('trackChains: the base ruleset, a flush, deletions and a table deletion; other tables are not ours', () => {
  const chains = new Map<string, number>();
  trackChains(baseRuleset(), chains);
  assert.equal(chains.get('prerouting'), 2);
  assert.equal(chains.get('gone'), 3);
  assert.ok(chains.has('unclaimed') && chains.has('hash_saddr') && chains.has('hash_daddr'));
  trackChains(
    [
      'add chain inet wccpd slot_1',
      'flush chain inet wccpd slot_1',
      'add rule inet wccpd slot_1 counter accept',
      'add rule inet wccpd slot_1 counter accept',
      'flush chain inet wccpd unclaimed',
      'add chain inet wccpd_closed forward { type filter hook forward priority filter + 10; policy accept; }',
      'add rule inet admin input accept',
      'delete chain inet wccpd hash_saddr',
      'delete rule inet wccpd gone handle 7',
    ].join('\n'),
    chains,
  );
  assert.equal(chains.get('slot_1'), 2);
  assert.equal(chains.get('unclaimed'), 0);
  assert.equal(chains.has('hash_saddr'), false);
  assert.equal(chains.get('gone'), -1, 'a rule deleted by handle: the count is no longer known');
  assert.equal(chains.has('forward') || chains.has('input'), false);
  trackChains(removeTableRuleset(), chains);
  assert.equal(chains.size, 0);
});

test("guardRuleCounts: the guard table's rules per chain, not the closed table's", () => {
  const text = guardRuleset([
    { service: webCache(() => '192.0.2.11', ['192.0.2.11'], { failMode: 'closed' }), mode: 'redirect' },
  ]);
  assert.deepEqual(
    [...guardRuleCounts(text)],
    [
      ['forward', 3],
      ['output', 1],
    ],
  );
  assert.deepEqual(
    [...guardRuleCounts(guardRuleset([]))],
    [
      ['forward', 0],
      ['output', 1],
    ],
  );
});

test('restoreWait: three restores a minute at once, then 1 s doubling to 60 s; old ones leave the window', () => {
  const b = DEFAULT_RESTORE_BACKOFF;
  const times: number[] = [];
  const waits: number[] = [];
  for (let i = 0; i < 10; i++) {
    waits.push(restoreWait(times, 1000 + i, b));
    times.push(1000 + i);
  }
  assert.deepEqual(waits, [0, 0, 0, 1000, 2000, 4000, 8000, 16_000, 32_000, 60_000]);
  assert.equal(restoreWait(times, 1000 + 60_000 + 10, b), 0);
  assert.equal(times.length, 0, 'the window forgets');
});
