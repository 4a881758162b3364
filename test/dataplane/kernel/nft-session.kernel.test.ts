// The persistent `nft -i` session against the real nft and kernel, in a namespace this test creates: a transaction
// the kernel refuses (or that ends in a syntax error) applies nothing, an admin's nft command meanwhile is seen by the
// next transaction, thousands of transactions leak no file, descriptor or process, and stop() leaves nothing.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { DataplaneError } from '../../../src/dataplane/index.js';
import { createNftReader, createNftSession } from '../../../src/dataplane/kernel/nft-session.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (nft session kernel test)');
const NS = `wnses-${process.pid}`;
const nft = (...args: string[]): string =>
  execFileSync('ip', ['netns', 'exec', NS, 'nft', ...args], { encoding: 'utf8' });
const fds = (): number => readdirSync('/proc/self/fd').length;
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('nft session in the kernel', { skip }, () => {
  let parentDir = '';
  before(() => {
    execFileSync('ip', ['netns', 'add', NS]);
    parentDir = mkdtempSync(join(tmpdir(), 'wccpd-session-k-'));
  });
  after(() => {
    execFileSync('ip', ['netns', 'del', NS]);
    rmSync(parentDir, { recursive: true, force: true });
  });

  test('a refused transaction applies nothing; an admin change meanwhile is seen; 2,000 transactions leak nothing', async () => {
    const s = createNftSession({ netns: NS, parentDir });
    await s.run('add table inet wtest\nadd chain inet wtest c\n');
    const pid = s.pid();
    assert.ok(pid !== undefined && alive(pid));
    // The kernel refuses the last command (no such chain): the chain added before it is not there either.
    await assert.rejects(
      s.run('add chain inet wtest d\ndelete chain inet wtest nosuch\n'),
      (e: unknown) =>
        e instanceof DataplaneError && e.reason === 'command-failed' && /No such file or directory/.test(e.message),
    );
    // A syntax error in the last line: nothing of the file is applied.
    await assert.rejects(s.run('add chain inet wtest e\nadd rule inet wtest e foo bar\n'), /Error:/);
    assert.doesNotMatch(nft('list', 'table', 'inet', 'wtest'), /chain (d|e) /);
    // An admin's own command between two transactions: the session's cache is refetched, its chain is seen.
    nft('add', 'chain', 'inet', 'wtest', 'admin');
    await s.run('add rule inet wtest admin counter\n');
    assert.match(nft('list', 'chain', 'inet', 'wtest', 'admin'), /counter packets 0/);

    const before = fds();
    for (let i = 0; i < 2000; i++)
      await s.run(`flush chain inet wtest c\nadd rule inet wtest c meta mark ${i} accept\n`);
    assert.match(nft('list', 'chain', 'inet', 'wtest', 'c'), /meta mark 0x000007cf accept/);
    assert.equal(s.pid(), pid, 'one nft process throughout');
    assert.ok(fds() <= before + 2, `descriptors: ${before} before, ${fds()} after`);
    assert.deepEqual(readdirSync(parentDir), [], 'no transaction file or directory left');

    await s.stop();
    assert.equal(alive(pid), false, 'stop() ends nft');
    // Started again by the next transaction.
    await s.run('delete table inet wtest\n');
    assert.notEqual(s.pid(), pid);
    await s.stop();
    assert.deepEqual(readdirSync(parentDir), []);
  });

  test('the reader sees every counter change from one long-lived nft -j -i: no stale cache, errors, stop', async () => {
    const s = createNftSession({ netns: NS, parentDir });
    await s.run(
      'add table inet wread\nadd counter inet wread udp_out\n' +
        'add chain inet wread out { type filter hook output priority 0; }\n' +
        'add rule inet wread out meta l4proto udp counter name udp_out\n',
    );
    execFileSync('ip', ['-n', NS, 'link', 'set', 'lo', 'up']);
    const reader = createNftReader({ netns: NS });
    const packets = async (): Promise<number> => {
      const j = JSON.parse(await reader.list(['list', 'counters', 'table', 'inet', 'wread'])) as {
        nftables: { counter?: { name: string; packets: number } }[];
      };
      const c = j.nftables.find((x) => x.counter?.name === 'udp_out')?.counter;
      assert.ok(c !== undefined, 'the counter is listed');
      return c.packets;
    };
    assert.equal(await packets(), 0);
    const pid = reader.pid();
    // Traffic changes the counter and not the ruleset's generation: the reader must list it anew.
    execFileSync('ip', ['netns', 'exec', NS, 'bash', '-c', 'for i in 1 2 3; do echo x > /dev/udp/127.0.0.1/9; done']);
    assert.equal(await packets(), 3);
    nft('reset', 'counter', 'inet', 'wread', 'udp_out');
    assert.equal(await packets(), 0, 'a reset by an admin is seen too');
    await assert.rejects(
      reader.list(['list', 'set', 'inet', 'wread', 'nosuch']),
      (e: unknown) => e instanceof DataplaneError && /No such file or directory/.test(e.message),
    );
    assert.equal(await packets(), 0, 'an error does not end the reader');
    assert.equal(reader.pid(), pid, 'one nft process throughout');
    assert.ok(pid !== undefined);
    await reader.stop();
    assert.equal(alive(pid), false, 'stop() ends nft');
    await s.run('delete table inet wread\n');
    await s.stop();
  });
});
