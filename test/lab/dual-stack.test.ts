// The dual-stack lab (createLab({ ipv6: true })): the client reaches the origin over IPv6 and IPv4 through the
// gateway, the origin answers on the addresses of 2001:db8:5100::/64, and Debian's Squid 5.7 intercepts IPv6 with
// `http_port 3129 intercept` and the engine's ip6 NAT rule (docs/squid.md) when a static IPv6 policy route hands it
// the client's port-80 packets, as it does IPv4. Needs root, squid, nft and curl (skips on a dev box, fails in CI).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { haveCommand, isRoot, need } from '../helpers/require.js';
import { bucketOf } from '../../src/buckets/hash.js';
import {
  bucketOf6,
  CLIENT_ADDRESS,
  CLIENT_ADDRESS6,
  createLab,
  originAddress6,
  originAddresses6,
  urlHost,
  type Lab,
} from './lab.js';

const skip = need(
  isRoot && haveCommand('squid') && haveCommand('nft') && haveCommand('curl'),
  'root with squid, nft and curl (dual-stack network-namespace lab)',
);

interface OriginAnswer {
  local: string;
  remote: string;
  path: string;
}

describe('dual-stack lab', { skip }, () => {
  let lab: Lab;
  const runTag = `${process.pid}-${Date.now()}`;

  before(async () => {
    const t0 = performance.now();
    lab = await createLab({ engines: 2, name: 'dual', ipv6: true });
    await lab.startOrigin();
    console.log(`dual-stack lab up (5 namespaces + origin): ${(performance.now() - t0).toFixed(0)} ms`);
  });
  after(async () => {
    await lab?.destroy();
  });

  it('the client reaches the origin over IPv6 and IPv4, and the origin sees the client address of each', async () => {
    for (const [addr, client] of [
      [originAddress6(0x80), CLIENT_ADDRESS6],
      [originAddress6(0xffff), CLIENT_ADDRESS6],
      ['198.51.100.80', CLIENT_ADDRESS],
    ] as const) {
      const path = `/direct/${runTag}/${addr}`;
      const r = await lab.curl(`http://${urlHost(addr)}${path}`, { timeoutMs: 3000 });
      assert.equal(r.status, 200, `${addr}: ${r.error ?? ''}`);
      assert.equal(r.engine, undefined, 'no Squid on the direct path');
      const o = r.json as OriginAnswer;
      assert.deepEqual([o.local, o.remote, o.path], [addr, client, path]);
    }
  });

  it('the origin answers on 256 addresses of 2001:db8:5100::/64, one per WCCP bucket', async () => {
    const addrs = originAddresses6();
    // The lab's own reading of docs/buckets.md's fold, and wccpd's.
    assert.deepEqual(
      addrs.map(bucketOf6),
      Array.from({ length: 256 }, (_, b) => b),
    );
    assert.deepEqual(
      addrs.map((a) => bucketOf(a)),
      Array.from({ length: 256 }, (_, b) => b),
    );
    const rs = await lab.curlMany(
      addrs.map((a) => `http://${urlHost(a)}/all/${runTag}`),
      { timeoutMs: 3000 },
    );
    const answered = new Set(
      rs.filter((r) => r.status === 200 && r.originRemote === CLIENT_ADDRESS6).map((r) => r.originLocal),
    );
    assert.equal(answered.size, 256, `missing: ${addrs.filter((a) => !answered.has(a)).join(' ')}`);
  });

  it('each engine is an IPv6 neighbour of the gateway, by the MAC of its IPv4 neighbour entry', async () => {
    for (const i of [1, 2]) {
      const mac = async (addr: string): Promise<string | undefined> =>
        /lladdr (\S+)/.exec((await lab.exec(lab.ns.gw, 'ip', ['neigh', 'show', addr, 'dev', 'br-eng'])).stdout)?.[1];
      await lab.exec(lab.engineNs(i), 'curl', ['-s', '--max-time', '3', 'http://192.0.2.1:9/'], { allowFail: true });
      const v4 = await mac(lab.engineAddress(i));
      assert.ok(v4 !== undefined, `engine ${i} has no IPv4 neighbour entry`);
      assert.equal(await mac(lab.engineAddress6(i)), v4, `engine ${i}'s IPv6 neighbour entry`);
    }
  });

  it("Squid intercepts IPv6: a static IPv6 policy route sends the client's port 80 through engine 1", async () => {
    await Promise.all([lab.startSquid(1), lab.startSquid(2)]);
    const addr = originAddress6(0x80);
    const viaPath = `/via-engine1/${runTag}`;
    const undo = await lab.staticRedirect6(1);
    let r;
    let many;
    try {
      r = await lab.curl(`http://${urlHost(addr)}${viaPath}`, { timeoutMs: 5000 });
      many = await lab.curlMany(
        [3, 0x130, 0xffff].map((n) => `http://${urlHost(originAddress6(n))}/many/${runTag}`),
        { timeoutMs: 5000 },
      );
    } finally {
      await undo();
    }
    assert.equal(r.status, 200, `${r.error ?? ''} ${r.headers['x-squid-error'] ?? ''}`);
    assert.equal(r.engine, 'engine1');
    const o = r.json as OriginAnswer;
    assert.equal(o.remote, lab.engineAddress6(1), 'the origin was fetched by engine 1 over IPv6');
    assert.equal(o.local, addr);
    const logged = lab.squidAccessLog(1).filter((e) => e.url === `http://[${addr}]${viaPath}`);
    assert.equal(logged.length, 1, `engine 1's access.log: ${JSON.stringify(lab.squidAccessLog(1).slice(-3))}`);
    assert.equal(logged[0]?.client, CLIENT_ADDRESS6);
    assert.equal(logged[0]?.hierarchy, 'ORIGINAL_DST');
    assert.equal(logged[0]?.peer, addr);
    assert.deepEqual(
      many.map((m) => [m.status, m.engine, m.originRemote]),
      Array(3).fill([200, 'engine1', lab.engineAddress6(1)]),
    );
    assert.equal(
      lab.squidAccessLog(2).some((e) => e.url.includes(runTag)),
      false,
      'engine 2 saw nothing',
    );
    const direct = await lab.curl(`http://${urlHost(addr)}/after-undo/${runTag}`, { timeoutMs: 3000 });
    assert.equal(direct.status, 200, direct.error);
    assert.equal(direct.engine, undefined);
    assert.equal((direct.json as OriginAnswer).remote, CLIENT_ADDRESS6);
  });

  it('the same engines intercept IPv4 as in the IPv4 lab', async () => {
    const undo = await lab.staticRedirect(2);
    let r;
    try {
      r = await lab.curl(`http://198.51.100.80/v4-engine2/${runTag}`, { timeoutMs: 5000 });
    } finally {
      await undo();
    }
    assert.equal(r.status, 200, r.error);
    assert.equal(r.engine, 'engine2');
    assert.equal((r.json as OriginAnswer).remote, lab.engineAddress(2));
  });
});
