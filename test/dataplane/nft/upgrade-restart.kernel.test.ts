// The package's upgrade restart with the nft backend (docs/operations.md, "Upgrade"): the built daemon, as the unit's
// user, in namespaces this test creates, two engines holding the table and live connections redirected to each. The
// restart is done the way systemd does it on `try-restart` (systemd/wccpd.service): SIGTERM, ExecStopPost
// `wccpd-cleanup` as root (the package installs systemd/wccpd-cleanup as /usr/sbin/wccpd-cleanup and the unit runs it
// without arguments, i.e. on /var/lib/wccpd, the shipped config's stateDir: here the test's stateDir), ExecStartPre
// `check-config` as the unit's user, then the daemon again on the same state directory.
//
// What it shows: each connection's conntrack mark names the same engine slot before and after, the restarted daemon
// gives each engine the same slot (the slot is derived from service, forwarding and address), and data sent after the
// restart reaches the engine that had the connection, with no reset; 0 buckets move. In the gap (wccpd stopped, its
// table and ip rules removed by the cleanup) traffic goes direct: a new connection reaches the origin, and a segment
// of a redirected connection reaches the origin too, which has no such connection and resets it. An idle connection
// sends nothing then and is unaffected. After the new daemon starts, a redirected connection whose engine has not
// said HERE_I_AM yet (Squid says it every 10 s) still reaches that engine: its slot is live for the engines the
// restart grace awaits.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { waitFor } from '../../helpers/daemon.js';
import type { BucketsView } from '../../../src/admin/api-types.js';
import { asUnitArgs, needGwDaemon, startGwDaemon, type GwDaemon } from '../gw-daemon.js';
import { Topology } from '../topology.js';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const skip =
  need(
    isRoot && ['nft', 'ip', 'conntrack'].every(haveCommand),
    'root with nft, ip and conntrack (nft backend kernel tests)',
  ) || needGwDaemon();
const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const NAME: Record<string, string> = { [E1]: 'engine1', [E2]: 'engine2' };
const SLOT_SHIFT = 19;
const TABLE_BASE = 2048000000;

type Held = Awaited<ReturnType<Topology['hold']>> & { dest: string; engine: string; port: number };

describe('nft backend across the upgrade restart (SIGTERM, wccpd-cleanup, check-config, start)', { skip }, () => {
  const topo = new Topology('up');
  let d: GwDaemon | undefined;

  before(() => topo.up());
  after(() => topo.downAfter(() => d?.close()));

  const buckets = (): BucketsView | null => {
    const text = d!.api('/api/v1/services/0/buckets');
    return text === '' ? null : (JSON.parse(text) as BucketsView);
  };
  /** The table with both engines, once the data plane has it in force. */
  const bothInForce = async (what: string): Promise<BucketsView> =>
    waitFor(
      what,
      async () => {
        const t = buckets();
        return t !== null &&
          t.buckets.includes(E1) &&
          t.buckets.includes(E2) &&
          t.inForce?.changeNumber === t.changeNumber
          ? t
          : null;
      },
      30_000,
    );
  const which = (dest: string): string =>
    (JSON.parse(d!.api(`/api/v1/services/0/which?ip=${dest}`)) as { engine: string | null }).engine ?? 'none';
  /** Engine -> slot, from the slots' ip rules (priority 2048, table 2048000000 + slot) and their tables' routes. */
  const slots = (): Map<string, number> => {
    const out = new Map<string, number>();
    for (const m of topo.inGw('ip -4 rule show priority 2048').matchAll(/lookup (\d+)/g)) {
      const slot = Number(m[1]) - TABLE_BASE;
      const via = /default via (\S+)/.exec(topo.inGw(`ip -4 route show table ${m[1]}`))?.[1];
      if (via !== undefined) out.set(via, slot);
    }
    return out;
  };
  /** The slot in a connection's conntrack mark (bits 19-31), by its client port; null when untracked. */
  const markedSlot = (port: number): number | null => {
    const line = topo.inGw(`conntrack -L -p tcp --orig-port-src ${port} 2>/dev/null || true`);
    const mark = /mark=(\d+)/.exec(line)?.[1];
    return mark === undefined ? null : Number(mark) >>> SLOT_SHIFT;
  };
  const gwHas = (what: string): boolean => {
    try {
      topo.inGw(what);
      return true;
    } catch {
      return false;
    }
  };

  test('live connections keep their engine, no reset, 0 buckets moved; in the gap traffic goes direct', async (t) => {
    try {
      d = startGwDaemon(topo, { backend: 'nft', asUnitUser: true });
      d.startEngine(600, 0);
      d.startEngine(600, 1);
      const before = await bothInForce('both engines holding buckets, the table in force');
      const slotsBefore = slots();
      assert.deepEqual([...slotsBefore.keys()].sort(), [E1, E2]);

      // Connections from the client, each to an origin address whose bucket the table gives to one engine:
      // per engine two that stay idle across the restart, one of engine1's that sends in the gap, and one of
      // engine2's that sends after the restart before engine2 is heard again.
      const held: Held[] = [];
      const want = { idle1: [E1, E1], idle2: [E2, E2], gap: [E1], early: [E2] };
      const roles = new Map<string, Held[]>();
      let port = 41000;
      for (let i = 1; i < 200 && Object.values(want).some((w) => w.length > 0); i++) {
        const dest = `198.51.100.${i}`;
        const engine = which(dest);
        const role = Object.entries(want).find(([, w]) => w[0] === engine)?.[0];
        if (role === undefined) continue;
        want[role as keyof typeof want].shift();
        const h = await topo.hold(dest, 80, ++port);
        assert.equal(h.first, NAME[engine], `${dest} (bucket of ${engine}) is answered by its engine`);
        const c = { ...h, dest, engine, port };
        held.push(c);
        roles.set(role, [...(roles.get(role) ?? []), c]);
      }
      assert.equal(held.length, 6);
      for (const h of held) assert.equal(markedSlot(h.port), slotsBefore.get(h.engine), `${h.dest}'s conntrack mark`);
      const of = (role: string): Held[] => roles.get(role) ?? assert.fail(`no connection for ${role}`);
      const gap = of('gap')[0] ?? assert.fail('no gap connection');
      const early = of('early')[0] ?? assert.fail('no early connection');
      const idle = [...of('idle1'), ...of('idle2')];
      // The state is saved 250 ms after a change (debounced); SIGTERM saves it too.
      await new Promise((r) => setTimeout(r, 500));

      // systemctl stop: SIGTERM, the daemon ends; ExecStopPost runs the cleanup as root.
      const stopAt = Date.now();
      process.kill(d.pid, 'SIGTERM');
      assert.equal(await d.exited, 0, 'wccpd ends with 0 on SIGTERM');
      // engine2's next HERE_I_AM comes late (Squid's come every 10 s): its WCCP process is stopped for now; its
      // proxy (the server the connections reach) keeps running.
      await d.stopEngine(1);
      const cleanup = execFileSync(
        'ip',
        ['netns', 'exec', topo.gw, 'sh', `${REPO}systemd/wccpd-cleanup`, '--state-dir', d.stateDir],
        { encoding: 'utf8' },
      );
      assert.equal(cleanup, '');
      assert.equal(gwHas('nft list table inet wccpd'), false, 'no table of ours in the gap');
      assert.equal(topo.inGw('ip -4 rule show priority 2048'), '', 'no slot rule in the gap');

      // The gap. A new connection goes direct, to the origin.
      assert.equal((await topo.probe('198.51.100.200')).data, 'origin');
      // A segment of a redirected connection goes direct too: the origin has no such connection and resets it.
      assert.match(await gap.send('in the gap'), /^(error ECONNRESET|end)$/, 'a line sent in the gap');
      // Idle connections sent nothing: their conntrack entries, marks included, are still there.
      for (const h of [...idle, early]) assert.equal(markedSlot(h.port), slotsBefore.get(h.engine));

      // ExecStartPre: check-config as the unit's user; ExecStart: the daemon on the same config and state directory.
      const wccpd = `${process.execPath} ${REPO}bin/wccpd.js`;
      const check = execFileSync('ip', asUnitArgs(topo.gw, `${wccpd} check-config ${d.config}`), {
        encoding: 'utf8',
      });
      assert.match(check, /^ok: /);
      d.start();
      await waitFor('the restarted daemon with its data plane loaded', async () => (buckets() !== null ? true : null));
      const gapMs = Date.now() - stopAt;
      // engine2 has not said HERE_I_AM to this daemon: its connection still reaches it, its slot the same.
      assert.ok(!buckets()!.buckets.includes(E2), 'engine2 is not back yet');
      assert.equal(await early.send('before engine2 is back'), 'engine2', 'reaches engine2, not reset');
      assert.equal(slots().get(E2), slotsBefore.get(E2), "engine2's slot is live before it is heard again");
      d.startEngine(600, 1);

      const after = await bothInForce('both engines back, the table in force');
      const moved = after.buckets.filter((b, i) => b !== before.buckets[i]).length;
      assert.equal(moved, 0, 'buckets moved across the restart');
      assert.deepEqual(slots(), slotsBefore, 'each engine has the slot it had');
      for (const h of [...idle, early]) {
        assert.equal(await h.send('after the restart'), NAME[h.engine], `${h.dest} reaches ${h.engine}, no reset`);
        assert.equal(markedSlot(h.port), slotsBefore.get(h.engine), `${h.dest}'s conntrack mark`);
      }
      // New connections follow the table as before.
      for (const h of held) assert.equal((await topo.probe(h.dest)).data, NAME[h.engine]);
      t.diagnostic(
        `stop to the new data plane: ${gapMs} ms; slots ${JSON.stringify([...slotsBefore])}; ` +
          `${idle.length} idle connections and 1 early kept their engine; the one that sent in the gap was reset`,
      );
    } catch (e) {
      throw new Error(`${(e as Error).message}\n${d?.output.join('').slice(-4000)}`);
    }
  });
});
