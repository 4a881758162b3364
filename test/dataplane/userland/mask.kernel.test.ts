// Mask assignment through the userland backend with the native pcap and raw-socket addons (root, namespaces this test
// creates, test/dataplane/topology.ts): each of 256 destinations reaches the engine Squid's mask 0x1741 names (by the
// draft's lookup, src/buckets/mask.ts matchMask), values without an engine reach the origin, and none follows the
// bucket table, which names the other engine for everything.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { ipv4ToNumber } from '../../../src/address.js';
import { SQUID_MASK, matchMask } from '../../../src/buckets/mask.js';
import type { MaskValueSet } from '../../../src/buckets/mask.js';
import type { EngineAddress } from '../../../src/buckets/table.js';
import type { ServiceRedirect } from '../../../src/dataplane/index.js';
import { maskSet, webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';
import { nativeUserlandGateway } from '../userland-gw.js';

const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip'),
  'root with nft and ip (userland mask assignment in namespaces)',
);
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const CLIENT = '203.0.113.10';
const name = (e: EngineAddress | null): string => (e === E1 ? 'engine1' : e === E2 ? 'engine2' : 'origin');

/** Value i of Squid's mask: E1 for even, E2 for odd, none for every 7th from 3 (forwarded normally). */
const squidSet = (): MaskValueSet => maskSet(SQUID_MASK, (i) => (i % 7 === 3 ? null : i % 2 === 0 ? E1 : E2));

describe('userland mask assignment with the native addons', { skip }, () => {
  const topo = new Topology('umask');
  // The bucket table says "everything to E2": a data plane that redirected by hash would fail most checks.
  const service: ServiceRedirect = webCache(() => E2, [E1, E2], { maskSets: [squidSet()] });
  const gw = nativeUserlandGateway(topo, service);

  test("each of 256 destinations reaches the engine Squid's mask names; values without an engine reach the origin", async () => {
    const bad: string[] = [];
    const served = new Map<string, number>();
    for (let i = 0; i < 256; i++) {
      const d = `198.51.100.${i}`;
      const e = matchMask(service.maskSets ?? [], {
        sourceIp: ipv4ToNumber(CLIENT) ?? 0,
        destinationIp: ipv4ToNumber(d) ?? 0,
        sourcePort: 0,
        destinationPort: 80,
      });
      const res = await topo.probe(d, 80, 1500);
      if (res.data !== name(e)) bad.push(`${d}: want ${name(e)}, got ${res.data || res.code}`);
      served.set(res.data, (served.get(res.data) ?? 0) + 1);
    }
    assert.deepEqual(bad, []);
    assert.deepEqual([...served.keys()].sort(), ['engine1', 'engine2', 'origin']);
    const stopped = await gw().stop();
    const engines = stopped.engines as Record<string, { packets: number }>;
    assert.ok((engines[E1]?.packets ?? 0) > 0 && (engines[E2]?.packets ?? 0) > 0, JSON.stringify(engines));
    assert.equal(
      (stopped.buckets as number[]).reduce((a, b) => a + b, 0),
      0,
      'no bucket counts for a mask service',
    );
    assert.ok(
      (stopped.stats as { bypassed: number }).bypassed >= (served.get('origin') ?? 0),
      'values without an engine went direct',
    );
  });
});
