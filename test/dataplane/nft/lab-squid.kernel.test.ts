// End to end with the project lab: two Debian Squid engines behind the gateway, the table applied by the nft
// backend. Every connection must reach the engine the table names, and after stop() traffic must go direct.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { NftRedirector, explain } from '../../../src/dataplane/index.js';
import { createLab, originAddresses, type Lab } from '../../lab/lab.js';
import { webCache } from '../service-fixture.js';

const skip = need(
  isRoot && haveCommand('squid') && haveCommand('nft') && haveCommand('curl'),
  'root with squid, nft and curl (data plane end to end in the lab)',
);
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const nameOf = (e: string | null): string | undefined => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : undefined);

describe('nft data plane with Squid engines', { skip }, () => {
  let lab: Lab;
  let r: NftRedirector;
  const tag = `${process.pid}-${Date.now()}`;

  before(async () => {
    lab = await createLab({ engines: 2, name: 'dp' });
    await lab.startOrigin();
    await Promise.all([lab.startSquid(1), lab.startSquid(2)]);
    r = new NftRedirector({ netns: lab.ns.gw });
    await r.start();
  });
  after(async () => {
    try {
      await r?.stop();
    } finally {
      await lab?.destroy();
    }
  });

  test('256 origin addresses each reach the engine the table names (0 mismatches); after stop() they go direct', async () => {
    // An uneven split, so a wrong engine cannot pass by symmetry; a few buckets unassigned (forward normally).
    const svc = webCache((b) => (b % 5 === 0 ? E2 : b % 17 === 0 ? null : E1), [E1, E2], { clientInterfaces: ['c0'] });
    await r.apply(svc);
    const addrs = originAddresses();
    const results = await lab.curlMany(
      addrs.map((a) => `http://${a}/dp/${tag}/${a}`),
      { timeoutMs: 5000 },
    );
    assert.equal(results.length, 256);
    const mismatches = results.flatMap((res, i) => {
      const want = nameOf(explain(svc, addrs[i] ?? '').engine);
      return res.status === 200 && res.engine === want && res.fromOrigin
        ? []
        : [
            `${addrs[i]}: want ${want ?? 'direct'}, got ${res.engine ?? 'direct'} (status ${res.status} ${res.error ?? ''})`,
          ];
    });
    assert.deepEqual(mismatches, []);
    const served = new Set(results.map((x) => x.engine ?? 'direct'));
    assert.deepEqual([...served].sort(), ['direct', 'engine1', 'engine2']);

    await r.stop();
    const direct = await lab.curlMany(
      addrs.slice(0, 16).map((a) => `http://${a}/dp-after/${tag}/${a}`),
      { timeoutMs: 5000 },
    );
    assert.deepEqual(
      direct.map((x) => [x.status, x.engine, x.originRemote]),
      Array(16).fill([200, undefined, '203.0.113.10']),
    );
  });
});
