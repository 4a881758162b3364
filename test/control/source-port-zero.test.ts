// Issue 30, item 2: a HERE_I_AM from UDP source port 0 (only a raw socket can send one) against the real daemon.
// wccpd remembered the port and, at 2.5 x HERE_I_AM_T, sent the REMOVAL_QUERY to port 0 from a timer callback:
// ERR_SOCKET_BAD_PORT, uncaught, the daemon gone. Now such a datagram is dropped and counted (source-port-0), since
// nothing can be answered on port 0; the engine never joins and the daemon lives on.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RawUdpSender } from '../helpers/raw-udp.js';
import { startDaemon, waitFor } from '../helpers/daemon.js';
import type { RunningDaemon } from '../helpers/daemon.js';
import { isRoot, need } from '../helpers/require.js';
import { TestEngine } from '../helpers/wccp-engine.js';

const skip = need(isRoot, 'root (a raw socket sends from source port 0)');
const ENGINE = '127.0.0.5';

async function metric(daemon: RunningDaemon, line: RegExp): Promise<number | null> {
  const text = await (await fetch(`${daemon.url}/metrics`)).text();
  const m = line.exec(text);
  return m ? Number(m[1]) : null;
}

describe('a HERE_I_AM from source port 0', { skip }, () => {
  let daemon: RunningDaemon;
  let raw: RawUdpSender;
  before(async () => {
    daemon = await startDaemon([], { hereIAm: '1s' });
    raw = new RawUdpSender();
  });
  after(async () => {
    raw?.close();
    await daemon?.stop();
  });

  it('is dropped and counted, and the daemon is still running after the removal query time', async () => {
    const engine = new TestEngine({ address: ENGINE, router: { address: '127.0.0.1', port: daemon.udpPort } });
    const payload = engine.hereIAmBytes();
    // Twice: with lenientReceiveId 2 the old code made the engine usable, so its removal query was surely due.
    for (let i = 0; i < 2; i++)
      await raw.send({
        source: ENGINE,
        sourcePort: 0,
        destination: '127.0.0.1',
        destinationPort: daemon.udpPort,
        payload,
      });
    // 2.5 x HERE_I_AM_T is when the old code sent the REMOVAL_QUERY to port 0; 3 x when it removed the engine.
    await new Promise((r) => setTimeout(r, 3_500));
    assert.equal(daemon.child.exitCode, null, `wccpd exited; output:\n${daemon.output.join('').slice(-2000)}`);
    assert.equal(daemon.child.signalCode, null);
    const dropped = await waitFor('the source-port-0 drop counter', () =>
      metric(daemon, /^wccpd_datagrams_dropped_total\{reason="source-port-0"\} (\d+)$/m),
    );
    assert.equal(dropped, 2);
    const view = (await (await fetch(`${daemon.url}/api/v1/services/0/engines`)).json()) as { engines: unknown[] };
    assert.deepEqual(view.engines, [], 'an engine that cannot be answered never joins');
    assert.match(daemon.output.join(''), /WCCP datagram from 127\.0\.0\.5 dropped: source-port-0/);
  });
});
