// What the nft backend owns in the kernel, and nothing more, in namespaces this test creates (names carry process.pid):
// another tool's conntrack and packet mark bits survive redirection; a crashed fail-closed service stays closed after
// wccpd-cleanup until `--all`; 1,024 engine slots joining and leaving leave the kernel's tables and an admin's rule
// and table byte-identical at every step and after wccpd-cleanup.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { MAX_SLOT, MIN_SLOT, NftRedirector } from '../../../src/dataplane/index.js';
import { homeSlot } from '../../../src/dataplane/kernel/engine-slots.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (nft backend kernel tests)');
const E1 = '192.0.2.11';

describe('the nft backend touches only what is its own', { skip }, () => {
  const topo = new Topology('own');
  let stateDir = '';
  const cleanup = (...args: string[]) => topo.cleanup(stateDir, ...args);
  /** The kernel's tables, an admin's table 100 and every rule, as an admin would list them. */
  const foreign = (): string =>
    topo.inGw('ip rule show; for t in local main default 100; do echo "table $t"; ' + 'ip route show table $t; done');

  before(async () => {
    stateDir = mkdtempSync(join(tmpdir(), 'wccpd-own-'));
    await topo.up();
    // Another tool's policy routing: its rule at priority 10000 with its own fwmark, its table 100; a route in the
    // (otherwise empty) default table so it can be listed.
    topo.inGw(
      'ip route add default via 192.0.2.130 dev o0 table 100; ip rule add priority 10000 fwmark 0x5 lookup 100; ' +
        'ip route add unreachable 203.0.113.128/25 table default',
    );
  });
  after(() => topo.downAfter(async () => rmSync(stateDir, { recursive: true, force: true })));

  test("another tool's conntrack and packet mark bits survive redirection", async () => {
    const r = new NftRedirector({ netns: topo.gw, stateDir });
    await r.start();
    // Another tool marks every new connection (ct mark bit 0x1, before wccpd's chain, and 0x4000 after it) and each
    // packet (mark 0x2); a counter after both sees what is left once wccpd has classified the connection.
    topo.inGw(`nft -f - <<'EOF'
table inet other {
  chain early { type filter hook prerouting priority mangle - 5; policy accept;
    iifname "c0" ct state new ct mark set ct mark or 0x1
    iifname "c0" meta mark set meta mark or 0x2
  }
  chain late { type filter hook prerouting priority mangle + 5; policy accept;
    iifname "c0" ct state new ct mark set ct mark or 0x4000
  }
  chain seen { type filter hook forward priority filter + 20; policy accept;
    iifname "c0" tcp dport 80 ct mark & 0x4001 == 0x4001 meta mark & 0x2 == 0x2 ct mark & 0xfff80000 != 0 counter
    iifname "c0" tcp dport 80 counter
  }
}
EOF`);
    try {
      await r.apply(webCache(() => E1, [E1]));
      const held = await topo.hold('198.51.100.80');
      assert.equal(held.first, 'engine1', "redirected with the other tool's bits set");
      assert.equal(await held.send('ping'), 'engine1');
      const counts = [...topo.inGw('nft list chain inet other seen').matchAll(/counter packets (\d+)/g)].map((m) =>
        Number(m[1]),
      );
      assert.equal(counts.length, 2);
      assert.ok((counts[1] ?? 0) >= 3, `client packets seen: ${counts[1]}`);
      assert.equal(
        counts[0],
        counts[1],
        "every client packet still carries ct mark 0x4001 and mark 0x2 beside wccpd's field",
      );
    } finally {
      topo.inGw('nft delete table inet other');
      await r.stop();
    }
  });

  test('a crashed fail-closed service stays closed after wccpd-cleanup, until --all or wccpd is back', async () => {
    // A crashed run watches nothing.
    const crashed = new NftRedirector({ netns: topo.gw, stateDir, watchTables: false });
    await crashed.start();
    await crashed.apply(webCache(() => null, [], { failMode: 'closed' }));
    assert.equal((await topo.probe('198.51.100.80')).code, 'ECONNREFUSED');
    // A crash (the process is gone without stop()), then systemd's ExecStopPost.
    assert.deepEqual(cleanup(), { status: 0, stderr: '' });
    assert.doesNotMatch(topo.inGw('nft list tables'), /table inet wccpd\n/);
    assert.equal((await topo.probe('198.51.100.80')).code, 'ECONNREFUSED', 'still refused while wccpd is down');
    assert.equal((await topo.probe('198.51.100.80', 8080)).data, 'origin', 'other traffic flows');

    // wccpd is back: refused until the service is applied, then served by its engine.
    const back = new NftRedirector({ netns: topo.gw, stateDir, configuredServices: [0] });
    await back.start();
    assert.equal(
      (await topo.probe('198.51.100.80')).code,
      'ECONNREFUSED',
      'closed until wccpd has applied the service',
    );
    await back.apply(webCache(() => E1, [E1], { failMode: 'closed' }));
    assert.equal((await topo.probe('198.51.100.80')).data, 'engine1');
    // Unassigned buckets of a fail-closed service with a usable engine flow direct, the closed table notwithstanding.
    await back.apply(webCache((b) => (b === bucketOf('198.51.100.80') ? null : E1), [E1], { failMode: 'closed' }));
    assert.equal((await topo.probe('198.51.100.80')).data, 'origin');
    await back.stop();
    assert.equal((await topo.probe('198.51.100.80')).code, 'ECONNREFUSED', 'a clean stop keeps it closed too');

    assert.deepEqual(cleanup('--all'), { status: 0, stderr: '' });
    assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd/);
    assert.equal((await topo.probe('198.51.100.80')).data, 'origin', 'an admin removed it on purpose: direct');
  });

  test("1,024 engine slots join and leave: the kernel's and the admin's rules and tables never change", async () => {
    const baseline = foreign();
    assert.match(baseline, /^10000:\s+from all fwmark 0x5 lookup 100$/m);
    assert.match(baseline, /table 100\ndefault via 192\.0\.2\.130 dev o0/);
    const r = new NftRedirector({ netns: topo.gw, stateDir });
    await r.start();
    // 32 engines (a group's maximum) at a time from 192.0.2.16-125 (on the engine segment), all replaced each step.
    const pool = Array.from({ length: 110 }, (_, i) => `192.0.2.${16 + i}`);
    const seen = new Set<number>();
    const steps = 32;
    for (let step = 0; step < steps; step++) {
      const engines = Array.from({ length: 32 }, (_, i) => pool[(step * 32 + i) % pool.length] ?? E1);
      await r.apply(webCache((b) => engines[b % 32] ?? null, engines));
      const inUse = [...r.slotsInUse().values()];
      for (const s of inUse) seen.add(s);
      assert.equal(inUse.length, 32);
      const now = foreign();
      const ours = now.split('\n').filter((l) => /^2048:/.test(l));
      // Engines that left are parked (their rule kept for a quick return), at most 64 of them.
      const parked = r.parkedSlots().size;
      assert.ok(parked <= 64, `step ${step}: ${parked} parked`);
      assert.equal(ours.length, 32 + parked, `step ${step}: one rule per engine in use or parked`);
      // With any slot, the guard pair around them: packets with an empty field skip the slots' rules.
      assert.deepEqual(
        now.split('\n').filter((l) => /^204[79]:/.test(l)),
        ['2047:\tfrom all fwmark 0/0xfff80000 goto 2049', '2049:\tfrom all fwmark 0/0xfff80000 nop'],
        `step ${step}`,
      );
      assert.equal(
        now
          .split('\n')
          .filter((l) => !/^204[789]:/.test(l))
          .join('\n'),
        baseline,
        `step ${step}`,
      );
    }
    // Every engine got its home slot (from its address: the same on every gateway), all within the range.
    assert.equal(seen.size, pool.length);
    assert.deepEqual(
      [...seen].sort((a, b) => a - b),
      pool
        .map((engine) => homeSlot({ serviceId: 0, engine, forwarding: 'l2' }, { min: MIN_SLOT, max: MAX_SLOT }))
        .sort((a, b) => a - b),
    );
    assert.ok(Math.max(...seen) <= MAX_SLOT);
    // 110 engines through 32 places: 78 left and not back, of which the 64 newest stay parked.
    assert.equal(r.parkedSlots().size, 64);
    const record = readFileSync(join(stateDir, 'kernel-objects'), 'utf8');
    assert.equal(
      record.split('\n').filter((l) => l.startsWith('rule 2048 ')).length,
      32 + r.parkedSlots().size,
      'the record lists what exists',
    );

    // A crash, then ExecStopPost: exactly ours goes.
    assert.deepEqual(cleanup(), { status: 0, stderr: '' });
    assert.equal(foreign(), baseline);
    assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd/);
    assert.equal(topo.inGw('ip route show table all | grep -c "table 20480" || true').trim(), '0');
  });
});
