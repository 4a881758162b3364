// The daemon's userland data plane end to end in a bridged namespace gateway (engines on br0, test/dataplane/
// topology.ts), as root: a test engine registers, and a client's connections reach it through userland capture and
// L2 injection; the origin answers when the engine is gone.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { waitFor } from '../../helpers/daemon.js';
import { gwSuite, needGwDaemon, startWithEngine } from '../gw-daemon.js';

const skip = needGwDaemon();

describe('the daemon redirects through the userland data plane in a bridged gateway', { skip }, () => {
  const gw = gwSuite('uld');
  const topo = gw.topo;

  test('client connections reach the engine on br0 through wccpd (backend userland)', async () => {
    const daemon = await startWithEngine(gw, { backend: 'userland' });
    let last: unknown = null;
    await waitFor(
      'a client connection answered by the engine',
      async () => {
        const r = await topo.probe('198.51.100.7', 80, 2000);
        last = r;
        return r.data === 'engine1' ? r : null;
      },
      20_000,
    ).catch((e: Error) => {
      throw new Error(
        `${e.message}; last probe ${JSON.stringify(last)}; status ${daemon.api('/api/v1/status')}\n` +
          `${topo.inGw('nft list table inet wccpd_userland 2>&1 || true')}\n${daemon.output.join('').slice(-4000)}`,
      );
    });
    const answers = [];
    for (let i = 0; i < 20; i++) answers.push((await topo.probe(`198.51.100.${10 + i}`, 80, 2000)).data);
    assert.deepEqual(new Set(answers), new Set(['engine1']), "every bucket is the engine's");
    const status = JSON.parse(daemon.api('/api/v1/status')) as {
      dataplane: { detail: string; userland?: { sendErrors: number } };
    };
    assert.match(status.dataplane.detail, /native pcap and raw-socket/);
    assert.equal(status.dataplane.userland?.sendErrors, 0);
    assert.match(daemon.api('/metrics'), /^wccpd_userland_flows\{service="0"\} [1-9]/m);
  });
});
