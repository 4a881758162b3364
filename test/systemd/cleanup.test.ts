// The cleanup script in a namespace of its own: it removes our nft tables, ip rules and routing tables, leaves
// everything else, and succeeds when there is nothing to do.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { haveCommand, isRoot, need } from '../helpers/require.js';

const CLEANUP = fileURLToPath(new URL('../../systemd/wccpd-cleanup', import.meta.url));
const NS = `wccpd-cleanup-${process.pid}`;
const skip = need(isRoot && haveCommand('ip') && haveCommand('nft'), 'root, ip and nft (network namespaces)');

function inNs(...args: string[]): string {
  return execFileSync('ip', ['netns', 'exec', NS, ...args], { encoding: 'utf8' });
}

function runCleanup(): { status: number | null; stderr: string } {
  const r = spawnSync('ip', ['netns', 'exec', NS, 'sh', CLEANUP], { encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr };
}

describe('systemd/wccpd-cleanup', { skip }, () => {
  before(() => {
    execFileSync('ip', ['netns', 'add', NS]);
    inNs('ip', 'link', 'set', 'lo', 'up');
    inNs('ip', 'link', 'add', 'v0', 'type', 'veth', 'peer', 'name', 'v1');
    inNs('ip', 'addr', 'add', '192.0.2.1/24', 'dev', 'v0');
    inNs('ip', 'link', 'set', 'v0', 'up');
    inNs('ip', 'link', 'set', 'v1', 'up');
  });
  after(() => {
    spawnSync('ip', ['netns', 'del', NS]);
  });

  it('removes our table, rules and routes, and nothing else', () => {
    // Ours, as the nft data plane makes them (src/dataplane/names.ts): slots 1 and 255.
    inNs('nft', 'add', 'table', 'inet', 'wccpd');
    inNs('nft', 'add', 'table', 'inet', 'wccpd_userland');
    inNs('ip', 'route', 'add', 'default', 'via', '192.0.2.11', 'dev', 'v0', 'table', '101');
    inNs('ip', 'rule', 'add', 'priority', '10001', 'fwmark', '0x101', 'lookup', '101');
    inNs('ip', 'route', 'add', 'unreachable', 'default', 'table', '355');
    inNs('ip', 'rule', 'add', 'priority', '10255', 'fwmark', '0x1ff', 'lookup', '355');
    // Not ours: another table, a rule in our priority range without our fwmark, our fwmark at another priority.
    inNs('nft', 'add', 'table', 'inet', 'other');
    inNs('ip', 'route', 'add', 'default', 'via', '192.0.2.12', 'dev', 'v0', 'table', '99');
    inNs('ip', 'rule', 'add', 'priority', '10005', 'fwmark', '0x5', 'lookup', '99');
    inNs('ip', 'rule', 'add', 'priority', '20000', 'fwmark', '0x101', 'lookup', '99');

    const r = runCleanup();
    assert.equal(r.stderr, '');
    assert.equal(r.status, 0);

    const tables = inNs('nft', 'list', 'tables');
    assert.doesNotMatch(tables, /table inet wccpd\b/);
    assert.doesNotMatch(tables, /wccpd_userland/);
    assert.match(tables, /table inet other/);
    const rules = inNs('ip', '-4', 'rule', 'show');
    assert.doesNotMatch(rules, /^10001:/m);
    assert.doesNotMatch(rules, /^10255:/m);
    assert.match(rules, /^10005:.*fwmark 0x5 lookup 99/m);
    assert.match(rules, /^20000:.*fwmark 0x101 lookup 99/m);
    assert.equal(inNs('ip', '-4', 'route', 'show', 'table', '101'), '');
    assert.equal(inNs('ip', '-4', 'route', 'show', 'table', '355'), '');
    assert.match(inNs('ip', '-4', 'route', 'show', 'table', '99'), /default via 192.0.2.12 dev v0/);
  });

  it('exits 0 and says nothing when there is nothing to remove (idempotent)', () => {
    const again = runCleanup();
    assert.equal(again.stderr, '');
    assert.equal(again.status, 0);
  });
});
