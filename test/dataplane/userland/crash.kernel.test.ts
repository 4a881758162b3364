// The userland data plane after a crash (SIGKILL) of the daemon, in a namespace gateway: its kernel guard stays until
// wccpd-cleanup (the unit's ExecStopPost) removes it; then a fail-open service flows direct and a fail-closed one stays
// refused (table inet wccpd_closed) until `wccpd-cleanup --all`.
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../../helpers/daemon.js';
import { gwSuite, needGwDaemon, startWithEngine, type GwDaemon } from '../gw-daemon.js';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const skip = needGwDaemon();
const DEST = '198.51.100.7';

describe('userland data plane after a crash', { skip }, () => {
  const gw = gwSuite('ulc');
  const topo = gw.topo;
  before(() => {
    topo.inGw('sysctl -qw net.bridge.bridge-nf-call-iptables=0 2>/dev/null || true');
  });

  const cleanup = (all = false): string =>
    topo.inGw(
      `${join(REPO, 'systemd/wccpd-cleanup')} ${all ? '--all ' : ''}--state-dir ${gw.daemon?.stateDir ?? '/nonexistent'}; echo "exit $?"`,
    );
  const answer = async (): Promise<string> => {
    const r = await topo.probe(DEST, 80, 1500);
    return r.ok ? r.data : (r.code ?? 'error');
  };

  async function crashWith(failMode: 'open' | 'closed'): Promise<GwDaemon> {
    const daemon = await startWithEngine(gw, { backend: 'userland', failMode });
    // The table reaches the kernel just after the API shows it: crash once the guard takes the service's traffic.
    await waitFor(
      'the guard dropping what userland captures',
      async () =>
        /tcp dport 80 drop/.test(topo.inGw('nft list table inet wccpd_userland 2>/dev/null || true')) ? true : null,
      10_000,
    );
    process.kill(daemon.pid, 'SIGKILL');
    assert.equal(await daemon.exited, 'SIGKILL');
    await daemon.stopEngine();
    return daemon;
  }

  test("fail open: the guard left by the crash drops the service's new connections until wccpd-cleanup; then they flow direct", async () => {
    await crashWith('open');
    assert.match(topo.inGw('nft list tables'), /table inet wccpd_userland/);
    assert.equal(await answer(), 'TIMEOUT', 'dropped by the guard left behind (nothing captures them any more)');
    assert.match(cleanup(), /exit 0/);
    assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd/);
    assert.equal(await answer(), 'origin');
    await gw.daemon?.close();
    gw.daemon = null;
  });

  test('fail closed: refused before and after wccpd-cleanup, direct only after wccpd-cleanup --all', async () => {
    await crashWith('closed');
    assert.equal(await answer(), 'TIMEOUT', 'dropped by the guard left behind');
    assert.match(cleanup(), /exit 0/);
    assert.match(topo.inGw('nft list tables'), /table inet wccpd_closed/);
    assert.doesNotMatch(topo.inGw('nft list tables'), /wccpd_userland/);
    assert.equal(await answer(), 'ECONNREFUSED', 'the fail-closed service stays closed while wccpd is down');
    assert.match(cleanup(true), /exit 0/);
    assert.equal(await answer(), 'origin');
  });
});
