// What the nft backend owns in the kernel for IPv6, and nothing more (issue 36), in a dual-stack topology of its own
// (names carry process.pid): with a service redirecting both families, 1,024 engine slots joining and leaving leave
// the gateway's IPv6 local and main tables, an admin's ip6 rule (priority 10000, fwmark 0x5) and its table 100, and
// the same of IPv4, byte-identical at every step and after wccpd-cleanup; and an IPv6 connection is redirected.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { NftRedirector } from '../../../src/dataplane/index.js';
import { webCache } from '../service-fixture.js';
import { Topology, TOPOLOGY6 } from '../topology.js';

const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip') && haveCommand('curl'),
  'root with nft, ip and curl (nft backend kernel tests, dual stack)',
);
const BOTH = { families: ['ipv4', 'ipv6'] } as const;
/** 110 made-up engines on the engine segment, each with a MAC of its own in both families' neighbour tables. */
const POOL = Array.from({ length: 110 }, (_, i) => ({
  v4: `192.0.2.${16 + i}`,
  v6: `2001:db8:e::1:${(16 + i).toString(16)}`,
  mac: `02:00:00:00:01:${(16 + i).toString(16).padStart(2, '0')}`,
}));

describe('the nft backend touches only what is its own, IPv6 included', { skip }, () => {
  const topo = new Topology('own6', 2, { ipv6: true });
  let stateDir = '';
  const cleanup = (...args: string[]) => topo.cleanup(stateDir, ...args);
  /** Both families' rules and the local, main, default and 100 tables, as an admin would list them. */
  const foreign = (): string =>
    topo.inGw(
      'for f in -4 -6; do echo "family $f"; ip $f rule show; for t in local main default 100; do ' +
        'echo "table $t"; ip $f route show table $t; done; done',
    );
  /** Our rules (the slots' at 2048, the guard pair at 2047 and 2049) of one family. */
  const ours = (listing: string, family: '-4' | '-6'): string[] =>
    (listing.split('family -6')[family === '-4' ? 0 : 1] ?? '').split('\n').filter((l) => /^204[789]:/.test(l));
  const withoutOurs = (listing: string): string =>
    listing
      .split('\n')
      .filter((l) => !/^204[789]:/.test(l))
      .join('\n');

  before(async () => {
    stateDir = mkdtempSync(join(tmpdir(), 'wccpd-own6-'));
    await topo.up();
    // Another tool's policy routing in both families: its rule at priority 10000 with its own fwmark, its table 100,
    // a route in the (otherwise empty) default table; and the made-up engines as neighbours on br0.
    topo.inGw(
      'ip route add default via 192.0.2.130 dev o0 table 100; ip rule add priority 10000 fwmark 0x5 lookup 100; ' +
        'ip route add unreachable 203.0.113.128/25 table default; ' +
        `ip -6 route add default via ${TOPOLOGY6.origin} dev o0 table 100; ` +
        'ip -6 rule add priority 10000 fwmark 0x5 lookup 100; ' +
        'ip -6 route add unreachable 2001:db8:dead::/48 table default; ' +
        POOL.map(
          (e) =>
            `ip neigh replace ${e.v4} lladdr ${e.mac} dev br0 nud permanent; ` +
            `ip -6 neigh replace ${e.v6} lladdr ${e.mac} dev br0 nud permanent`,
        ).join('; '),
    );
  });
  after(() => topo.downAfter(async () => rmSync(stateDir, { recursive: true, force: true })));

  test("an IPv6 connection goes to the engine of its bucket, by the engine's IPv6 neighbour", async () => {
    const r = new NftRedirector({ netns: topo.gw, stateDir });
    await r.start();
    const [e1, e2] = [topo.engineAddress(0), topo.engineAddress(1)];
    try {
      await r.apply(webCache((b) => (b % 2 === 0 ? e1 : e2), [e1, e2], BOTH));
      // Even buckets to engine 1, odd to engine 2: 2001:db8:5100::80 is bucket 0x45 (the XOR of its 16 bytes).
      const served = async (to: string): Promise<[string, string]> => [
        (await topo.probe(to)).data,
        bucketOf(to) % 2 === 0 ? 'engine1' : 'engine2',
      ];
      assert.equal(bucketOf('2001:db8:5100::80'), 0x45);
      for (const to of ['2001:db8:5100::80', '2001:db8:5100::81', '2001:db8:6400::1', '198.51.100.80'])
        assert.deepEqual(...(await served(to)), to);
      assert.equal((await topo.probe('2001:db8:5100::80', 8080)).data, 'origin', 'other ports flow direct');
    } finally {
      await r.stop();
    }
  });

  test("1,024 engine slots join and leave: the kernel's and the admin's rules and tables never change", async () => {
    const baseline = foreign();
    assert.match(baseline, /family -6\n[\s\S]*^10000:\s+from all fwmark 0x5 lookup 100$/m);
    assert.match(baseline, /table 100\ndefault via 2001:db8:f::2 dev o0/);
    const r = new NftRedirector({ netns: topo.gw, stateDir });
    await r.start();
    const steps = 32;
    for (let step = 0; step < steps; step++) {
      // 32 engines (a group's maximum) at a time, all replaced each step.
      const engines = Array.from({ length: 32 }, (_, i) => POOL[(step * 32 + i) % POOL.length]?.v4 ?? '');
      await r.apply(webCache((b) => engines[b % 32] ?? null, engines, BOTH));
      const now = foreign();
      const parked = r.parkedSlots().size;
      const inUse = [...r.slotsInUse().values()].sort((a, b) => a - b);
      assert.equal(inUse.length, 32);
      // In each family a rule for every slot in use (IPv4: and every parked one), and the guard pair: IPv6 is really
      // redirected.
      for (const family of ['-4', '-6'] as const) {
        const mine = ours(now, family);
        const slots = mine.flatMap((l) => {
          const table = /^2048:.* lookup (\d+)$/.exec(l)?.[1];
          return table === undefined ? [] : [Number(table) - 2048000000];
        });
        assert.deepEqual(
          inUse.filter((s) => !slots.includes(s)),
          [],
          `step ${step} ${family}: slots in use without a rule`,
        );
        assert.ok(slots.length <= 32 + parked, `step ${step} ${family}: ${slots.length} rules, 32 + ${parked} slots`);
        if (family === '-4') assert.equal(slots.length, 32 + parked, `step ${step}: IPv4 rules of parked slots`);
        assert.deepEqual(
          mine.filter((l) => /^204[79]:/.test(l)),
          ['2047:\tfrom all fwmark 0/0xfff80000 goto 2049', '2049:\tfrom all fwmark 0/0xfff80000 nop'],
          `step ${step} ${family}`,
        );
      }
      assert.equal(withoutOurs(now), withoutOurs(baseline), `step ${step}`);
    }
    // A crash, then ExecStopPost: exactly ours goes, in both families.
    assert.deepEqual(cleanup(), { status: 0, stderr: '' });
    assert.equal(foreign(), baseline);
    assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd/);
    for (const family of ['-4', '-6'])
      assert.equal(topo.inGw(`ip ${family} route show table all | grep -c "table 20480" || true`).trim(), '0');
  });
});
