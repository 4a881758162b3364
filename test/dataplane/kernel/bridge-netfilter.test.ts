// br_netfilter: wccpd says, in one warning line with the fix, when frames bridged on a client interface or an engine's
// segment run the IP hooks, and shows it in status and /metrics; it says so again only when that changes.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { checkBridgeNetfilter } from '../../../src/dataplane/kernel/bridge-netfilter.js';
import type { Exec } from '../../../src/dataplane/kernel/exec.js';
import { waitFor } from '../../helpers/daemon.js';
import { startGwDaemon, type GwDaemon, needGwDaemon } from '../gw-daemon.js';
import { Topology } from '../topology.js';

/** `ip -j -4 addr show type bridge` as the kernel prints it: br-eng holds the engines' /25, docker0 nothing of ours. */
function bridges(calls: string[]): Exec {
  return (cmd, args) => {
    calls.push(`${cmd} ${args.join(' ')}`);
    return Promise.resolve(
      JSON.stringify([
        { ifname: 'br-eng', addr_info: [{ family: 'inet', local: '192.0.2.1', prefixlen: 25 }] },
        { ifname: 'docker0', addr_info: [{ family: 'inet', local: '172.17.0.1', prefixlen: 16 }] },
        { ifname: 'br-lan' },
      ]),
    );
  };
}

test("br_netfilter counts only when loaded, switched on, and a bridge is in the data plane's path", async () => {
  const calls: string[] = [];
  const exec = bridges(calls);
  const engines = ['192.0.2.11'];
  const check = (value: string | null, over: { engines?: string[]; clientInterfaces?: string[] } = {}) =>
    checkBridgeNetfilter({
      exec,
      clientInterfaces: ['c0'],
      engines,
      readSysctl: () => Promise.resolve(value),
      ...over,
    });

  assert.deepEqual(await check(null), { loaded: false, callIptables: false, bridges: [], active: false });
  assert.deepEqual(await check('0'), { loaded: true, callIptables: false, bridges: [], active: false });
  assert.deepEqual(calls, [], 'no process at all unless the sysctl is on');
  assert.deepEqual(await check('1'), { loaded: true, callIptables: true, bridges: ['br-eng'], active: true });
  // Only docker0 and a bridge without address: not ours to warn about.
  assert.equal((await check('1', { engines: ['198.51.100.7'] })).active, false);
  // A client interface that is a bridge counts whatever the engines.
  assert.deepEqual((await check('1', { engines: [], clientInterfaces: ['br-lan'] })).bridges, ['br-lan']);
  assert.deepEqual(calls, Array(3).fill('ip -j -4 addr show type bridge'));
});

const skip = needGwDaemon();

describe('br_netfilter with the daemon in a namespace gateway', { skip }, () => {
  // The gateway's engines sit on bridge br0 (topology.ts); a new namespace starts with bridge-nf-call-iptables=1
  // where br_netfilter is loaded (it is on this machine); the test sets it either way so it holds everywhere.
  const topo = new Topology('bnf', 1);
  let d: GwDaemon;
  const loaded = existsSync('/proc/sys/net/bridge/bridge-nf-call-iptables');
  const warnings = (): string[] =>
    d.output
      .join('')
      .split('\n')
      .filter((l) => /br_netfilter is loaded/.test(l));

  before(() => topo.up());
  after(() => topo.downAfter(() => d?.close()));

  test(
    'one warning line with the fix, a status and metrics flag; cleared when the sysctl is set to 0',
    { skip: !loaded && 'br_netfilter is not loaded on this machine' },
    async () => {
      topo.inGw('sysctl -qw net.bridge.bridge-nf-call-iptables=1');
      d = startGwDaemon(topo, { backend: 'nft' });
      d.startEngine();
      const status = () =>
        JSON.parse(d.api('/api/v1/status') || '{}') as {
          dataplane?: { bridgeNetfilter?: { active: boolean; bridges: string[] } | null };
        };
      const flagged = await waitFor(
        'status shows br_netfilter on br0',
        async () => {
          const s = status().dataplane?.bridgeNetfilter;
          return s?.active === true ? s : null;
        },
        60_000,
      ).catch((e: Error) => {
        throw new Error(`${e.message}\n${d.output.join('')}`);
      });
      assert.deepEqual(flagged.bridges, ['br0']);
      assert.match(d.api('/metrics'), /^wccpd_dataplane_bridge_netfilter 1$/m);
      const lines = await waitFor('the warning line', async () => (warnings().length > 0 ? warnings() : null), 10_000);
      assert.equal(lines.length, 1, lines.join('\n'));
      assert.match(lines[0] ?? '', /frames bridged on br0 .*net\.bridge\.bridge-nf-call-iptables=0/);
      assert.match(lines[0] ?? '', /"level":"?(warn|40)/);

      // The admin fixes it; the next change wccpd applies (here: the engine drained) finds it fixed.
      topo.inGw('sysctl -qw net.bridge.bridge-nf-call-iptables=0');
      topo.inGw(
        `curl -s --max-time 10 -X POST -H 'Authorization: Bearer t' http://127.0.0.1:8080/api/v1/services/0/engines/192.0.2.11/drain`,
      );
      await waitFor(
        'status clears the flag',
        async () => (status().dataplane?.bridgeNetfilter?.active === false ? true : null),
        30_000,
      ).catch((e: Error) => {
        throw new Error(`${e.message}\n${d.output.join('')}`);
      });
      assert.match(d.api('/metrics'), /^wccpd_dataplane_bridge_netfilter 0$/m);
      // The line reaches this process through the daemon's stdout pipe, maybe after the API's answer.
      await waitFor(
        'the info line saying so',
        async () =>
          /br_netfilter no longer sends bridged frames through the IP hooks/.test(d.output.join('')) ? true : null,
        10_000,
      );
      assert.equal(warnings().length, 1, 'still the one warning line');
    },
  );
});
