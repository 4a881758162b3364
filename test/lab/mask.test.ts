// Mask assignment end to end with Debian's Squid 5.7 (`wccp2_assignment_method mask`): two Squids negotiate mask
// assignment with wccpd (nft backend), and each of 256 origin addresses reaches the engine the mask table that wccpd
// sends them names (API `services/0/buckets`, `mask`), by the draft's lookup, not the engine the hash would pick.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createLab, originAddresses, type Lab } from './lab.js';
import { getJson, skipE2e, startDaemon, waitUntil, writeLabConfig } from '../e2e/harness.js';
import { ipv4ToNumber } from '../../src/address.js';
import { matchMask } from '../../src/buckets/mask.js';
import type { BucketsView, EnginesView } from '../../src/admin/api-types.js';

describe('lab: mask assignment with Squid 5.7', { skip: skipE2e }, () => {
  let lab: Lab;
  const tag = `${process.pid}`;
  const nameOf = (e: string | null): string | undefined =>
    e === null ? undefined : [1, 2].map((i) => (lab.engineAddress(i) === e ? `engine${i}` : undefined)).find(Boolean);
  const view = () => getJson<BucketsView>(lab, 'services/0/buckets').catch(() => null);
  const valuesOf = (v: BucketsView | null, engine: string): number =>
    (v?.mask ?? []).reduce((n, s) => n + s.values.filter((x) => x.engine === engine).length, 0);

  before(async () => {
    lab = await createLab({ engines: 2, name: 'mask' });
    await lab.startOrigin();
    // consistent: the four values the origin addresses reach (198.51.100.x & 0.0.23.65) go to both engines, where
    // balance's halves would give them all to one.
    const config = writeLabConfig(lab, 'wccpd', {
      services: [
        '  - id: 0',
        '    assignment: mask',
        '    mode: consistent',
        '    clientInterfaces: [c0]',
        '    engines:',
        '      allow: [192.0.2.0/24]',
      ],
    });
    await startDaemon(lab, config);
    await Promise.all([1, 2].map((i) => lab.startSquid(i, { assignment: 'mask' })));
  });
  after(async () => {
    await lab?.destroy();
  });

  it('each of 256 destinations reaches the engine the mask table names; an engine leaving gives its values to the other', async () => {
    const [e1, e2] = [lab.engineAddress(1), lab.engineAddress(2)];
    const both = await waitUntil(view, (v) => valuesOf(v, e1) === 32 && valuesOf(v, e2) === 32, {
      timeoutMs: 60_000,
      intervalMs: 250,
      what: 'two Squids sharing the 64 mask values',
    });
    const sets = both.value?.mask ?? [];
    assert.equal(sets.length, 1);
    assert.deepEqual(
      sets[0]?.mask,
      { sourceAddressMask: 0, destinationAddressMask: 0x1741, sourcePortMask: 0, destinationPortMask: 0 },
      "Squid's mask on the destination address",
    );
    const engines = await getJson<EnginesView>(lab, 'services/0/engines');
    assert.deepEqual(
      engines.engines.map((e) => e.state),
      ['usable', 'usable'],
    );

    const addrs = originAddresses();
    const check = async (round: string, tableSets: typeof sets): Promise<Set<string>> => {
      const results = await lab.curlMany(
        addrs.map((a) => `http://${a}/mask/${tag}/${round}/${a}`),
        { timeoutMs: 10_000 },
      );
      assert.equal(results.length, 256);
      const mismatches = results.flatMap((res, i) => {
        const a = addrs[i] ?? '';
        const want = nameOf(
          matchMask(tableSets, { sourceIp: 0, destinationIp: ipv4ToNumber(a) ?? 0, sourcePort: 0, destinationPort: 0 }),
        );
        return res.status === 200 && res.engine === want && res.fromOrigin
          ? []
          : [`${a}: want ${want ?? 'direct'}, got ${res.engine ?? 'direct'} (status ${res.status} ${res.error ?? ''})`];
      });
      assert.deepEqual(mismatches, []);
      return new Set(results.map((r) => r.engine ?? 'direct'));
    };
    // TEST-NET origins cover few of the 64 values (the mask reads bits of the last two bytes): both engines serve.
    assert.deepEqual([...(await check('both', sets))].sort(), ['engine1', 'engine2']);
    // Not what the hash would pick: the bucket table names another engine for many of these addresses.
    const byHash = addrs.filter(
      (a, b) =>
        both.value?.buckets[b] !==
        matchMask(sets, { sourceIp: 0, destinationIp: ipv4ToNumber(a) ?? 0, sourcePort: 0, destinationPort: 0 }),
    );
    assert.ok(
      byHash.length > 0,
      'the bucket table and the mask table agree everywhere: the test could not tell them apart',
    );

    // Engine 2 stops (Squid sends nothing): after 3 x HERE_I_AM_T its values go to engine 1.
    await lab.stopSquid(2, { kill: true });
    const alone = await waitUntil(view, (v) => valuesOf(v, e1) === 64, {
      timeoutMs: 60_000,
      intervalMs: 500,
      what: 'engine 1 holding all 64 values',
    });
    assert.deepEqual([...(await check('alone', alone.value?.mask ?? []))], ['engine1']);
  });
});
