// The persistent `ip -batch` against the real ip and kernel, in a namespace this test creates: route answers and
// failed lines per batch, 2,000 batches on one process with no descriptor leaked, and nothing left after stop().
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { createIpSession } from '../../../src/dataplane/kernel/ip-session.js';

const skip = need(isRoot && haveCommand('ip') && haveCommand('stdbuf'), 'root with ip and stdbuf (ip session test)');
const NS = `wipses-${process.pid}`;
const inNs = (cmd: string): string => execFileSync('sh', ['-c', `ip netns exec ${NS} ${cmd}`], { encoding: 'utf8' });
const fds = (): number => readdirSync('/proc/self/fd').length;

describe('ip session in the kernel', { skip }, () => {
  before(() => {
    execFileSync('sh', [
      '-c',
      `ip netns add ${NS} && ip -n ${NS} link add e0 type veth peer name e0p && ` +
        `ip -n ${NS} addr add 192.0.2.1/24 dev e0 && ip -n ${NS} link set e0 up && ip -n ${NS} link set e0p up`,
    ]);
  });
  after(() => {
    execFileSync('ip', ['netns', 'del', NS]);
  });

  test('answers and failures per batch; 2,000 batches on one process; stop() ends it', async () => {
    const s = createIpSession({ netns: NS });
    const rule = 'priority 2048 fwmark 0x80000/0xfff80000 lookup 2048000001';
    const a = await s.run([
      'route get 192.0.2.11',
      `rule del ${rule}`,
      'route replace default via 192.0.2.11 table 2048000001',
      `rule add ${rule}`,
      'route replace default via 198.51.100.7 table 2048000002',
    ]);
    assert.equal((JSON.parse(a.out) as { dev?: string }[])[0]?.dev, 'e0');
    assert.deepEqual([...a.failed.keys()], [2, 5], 'the absent rule, and the engine that is not on-link');
    assert.match(a.failed.get(5) ?? '', /Nexthop has invalid gateway/);
    assert.match(inNs('ip rule'), /2048:\s+from all fwmark 0x80000\/0xfff80000 lookup 2048000001/);
    const before = fds();
    for (let i = 0; i < 2000; i++) {
      const b = await s.run([
        `rule add ${rule}`,
        `route replace default via 192.0.2.${11 + (i % 50)} table 2048000001`,
      ]);
      assert.deepEqual([...b.failed.keys()], [1], 'File exists: the same rule');
    }
    assert.match(inNs('ip route show table 2048000001'), /default via 192\.0\.2\.60 dev e0/);
    assert.ok(fds() <= before + 2, `descriptors: ${before} before, ${fds()} after`);
    const pids = execFileSync('ip', ['netns', 'pids', NS], { encoding: 'utf8' }).trim();
    assert.equal(pids.split('\n').filter((p) => p !== '').length, 1, 'one ip process');
    await s.stop();
    assert.equal(execFileSync('ip', ['netns', 'pids', NS], { encoding: 'utf8' }).trim(), '', 'stop() ends it');
  });
});
