// An engine that moves to another interface while it stays registered (an admin re-cables it, renumbers its segment,
// changes a route), in the real kernel (namespaces named with process.pid, test/dataplane/topology.ts): its
// redirected connections reach it on the new interface without a change of the table, a held connection keeps it,
// and the log says which engine moved from which device to which. An engine that is no longer on-link (now behind a
// router) gets the error its join would get, logged and counted, and the data plane's changes go on meanwhile.
// The ingress backend (`fwd ... device <dev>`), the nft backend (a slot's `default via <engine> dev <dev>`) and the
// userland backend (the device it injects frames on) all name the device; before, all kept the old one (the ingress
// backend for as long as the engine lived, the userland backend until the next change of the table).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { haveCommand, isRoot, need } from '../helpers/require.js';
import { IngressRedirector, NftRedirector, type Redirector } from '../../src/dataplane/index.js';
import { recordingLog } from '../../src/log.js';
import { webCache } from './service-fixture.js';
import { Topology, type ProbeResult } from './topology.js';
import { nativeUserlandGateway } from './userland-gw.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (engines that move)');
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

type Made = Redirector & { restored(): { enginesMoved?: number; failedChecks: number } };

/** New connections until one reaches engine 1 (at most 15: the watch checks within about a second). */
async function untilEngine1(topo: Topology, host: string): Promise<ProbeResult> {
  let res = await topo.probe(host, 80, 1000);
  for (let i = 0; i < 15 && res.data !== 'engine1'; i++) {
    await sleep(250);
    res = await topo.probe(host, 80, 1000);
  }
  return res;
}

for (const backend of ['ingress', 'nft'] as const) {
  describe(
    `${backend} backend: an engine that moves to another interface keeps receiving its traffic`,
    { skip },
    () => {
      const topo = new Topology(backend === 'ingress' ? 'mvi' : 'mvn');
      const log = recordingLog();
      let r: Made;

      before(async () => {
        await topo.up();
        // Only the link, address and route watch brings the engine's new interface (no periodic check, no apply).
        r =
          backend === 'ingress'
            ? new IngressRedirector({ netns: topo.gw, log })
            : new NftRedirector({ netns: topo.gw, log, ipCheckMs: 0 });
        await r.start();
        // Every bucket to engine 1, engine 2 in the group too.
        await r.apply(webCache(() => E1, [E1, E2]));
      });
      after(async () => {
        try {
          await r?.stop();
        } finally {
          await topo.down();
        }
      });

      /**
       * Engine 1's cable to another bridge: its link goes down and up, as a real re-cabling does (the engine then
       * forgets the gateway's MAC on the old segment and asks again).
       */
      const recable = (to: string): string =>
        `ip link set e1 down; ip link set e1 nomaster; ip link set e1 master ${to}; ip link set e1 up`;
      const moveLine = (from: string, to: string, engine = E1): boolean =>
        log.lines.some((l) => l.msg?.startsWith(`engine ${engine} moved from ${from} to ${to}: `) === true);

      test('re-cabled to another bridge with a host route (an `ip route` change): traffic follows it, and back', async () => {
        assert.equal((await topo.probe('198.51.100.1')).data, 'engine1');
        const held = await topo.hold('198.51.100.2');
        assert.equal(held.first, 'engine1');
        topo.inGw(`ip link add br1 type bridge; ip link set br1 up; ${recable('br1')}; ip route add ${E1}/32 dev br1`);
        const res = await untilEngine1(topo, '198.51.100.3');
        assert.equal(res.data, 'engine1', `after the move: ${res.data || String(res.code)}`);
        assert.ok(moveLine('br0', 'br1'), 'the log says engine 1 moved from br0 to br1');
        assert.equal(await held.send('still there?'), 'engine1', 'the held connection kept its engine');
        assert.equal(r.restored().enginesMoved, 1);

        // Back to br0: the host route goes, the cable too.
        topo.inGw(`ip route del ${E1}/32 dev br1; ${recable('br0')}`);
        const back = await untilEngine1(topo, '198.51.100.4');
        assert.equal(back.data, 'engine1', `after the move back: ${back.data || String(back.code)}`);
        assert.ok(moveLine('br1', 'br0'), 'the log says engine 1 moved back');
        assert.equal(r.restored().enginesMoved, 2);
      });

      test("the engines' segment renumbered onto another bridge (its address moves): both engines follow", async () => {
        topo.inGw(
          'ip link add br2 type bridge; ip link set br2 up; ip addr del 192.0.2.1/25 dev br0; ' +
            'ip link set e1 nomaster; ip link set e2 nomaster; ip link set e1 master br2; ip link set e2 master br2; ' +
            'ip addr add 192.0.2.1/25 dev br2',
        );
        const res = await untilEngine1(topo, '198.51.100.5');
        assert.equal(res.data, 'engine1', `after the renumbering: ${res.data || String(res.code)}`);
        assert.ok(moveLine('br0', 'br2'), 'engine 1 moved from br0 to br2');
        // Engine 2 serves no bucket; its move is said all the same (its slot is live: a table change may give it some).
        for (let i = 0; i < 20 && !moveLine('br0', 'br2', E2); i++) await sleep(100);
        assert.ok(moveLine('br0', 'br2', E2), 'engine 2 moved from br0 to br2');
        await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 2, buckets: new Array(256).fill(E2) } }));
        assert.equal((await topo.probe('198.51.100.6')).data, 'engine2');
        await r.apply(webCache(() => E1, [E1, E2], { table: { changeNumber: 3, buckets: new Array(256).fill(E1) } }));
      });

      test('an engine now behind a router: the error its join would get, logged and counted; changes go on', async () => {
        const failed = r.restored().failedChecks;
        // 192.0.2.130 (the origin) as the router towards engine 1.
        topo.inGw(`ip route add ${E1}/32 via 192.0.2.130`);
        for (let i = 0; i < 30 && r.restored().failedChecks === failed; i++) await sleep(100);
        assert.ok(r.restored().failedChecks > failed, 'the check failed and was counted');
        const join = `engine ${E1} is reached via the router 192.0.2.130, not directly: L2 forwarding needs the engine`;
        assert.ok(
          log.lines.some((l) => l.level === 'warn' && /no longer on-link/.test(l.msg ?? '') && l.msg?.includes(join)),
          'the log names the engine and the router, as a join would be refused',
        );
        // A change meanwhile is in force (the engine's slot is kept as it was).
        await r.apply(webCache(() => E2, [E1, E2], { table: { changeNumber: 4, buckets: new Array(256).fill(E2) } }));
        assert.equal((await topo.probe('198.51.100.7')).data, 'engine2');
        // On-link again (on br2, where its slot hands it its packets): engine 1 gets its traffic.
        topo.inGw(`ip route del ${E1}/32 via 192.0.2.130`);
        await r.apply(webCache(() => E1, [E1, E2], { table: { changeNumber: 5, buckets: new Array(256).fill(E1) } }));
        assert.equal((await untilEngine1(topo, '198.51.100.8')).data, 'engine1');
      });
    },
  );
}

describe(
  'userland backend (native addons): an engine that moves to another interface keeps receiving its traffic',
  { skip },
  () => {
    const topo = new Topology('mvu');
    // Every bucket to engine 1: without redirection the origin would answer.
    const gw = nativeUserlandGateway(
      topo,
      webCache(() => E1, [E1, E2]),
    );

    test('re-cabled to another bridge with a host route: its frames go out there, said and counted; and back', async () => {
      assert.equal((await topo.probe('198.51.100.1')).data, 'engine1');
      const held = await topo.hold('198.51.100.2');
      assert.equal(held.first, 'engine1');
      topo.inGw(
        'ip link add br1 type bridge; ip link set br1 up; ip link set e1 down; ip link set e1 nomaster; ' +
          `ip link set e1 master br1; ip link set e1 up; ip route add ${E1}/32 dev br1`,
      );
      const res = await untilEngine1(topo, '198.51.100.3');
      assert.equal(res.data, 'engine1', `after the move: ${res.data || String(res.code)}`);
      assert.ok(
        (await gw().log()).some((l) => l.startsWith(`warn engine ${E1} moved from br0 to br1: `)),
        'the log says engine 1 moved from br0 to br1',
      );
      assert.equal(await held.send('still there?'), 'engine1', 'the held connection kept its engine');
      assert.equal((await gw().restored()).enginesMoved, 1);
      topo.inGw(
        `ip route del ${E1}/32 dev br1; ip link set e1 down; ip link set e1 nomaster; ip link set e1 master br0; ` +
          'ip link set e1 up',
      );
      const back = await untilEngine1(topo, '198.51.100.4');
      assert.equal(back.data, 'engine1', `after the move back: ${back.data || String(back.code)}`);
      assert.equal((await gw().restored()).enginesMoved, 2);
    });
  },
);
