// The real wccpd's WCCP socket: status shows the receive buffer the kernel granted (4 MiB, or net.core.rmem_max where
// that is less), /metrics the kernel's drops on it, and the start log says what was granted.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StatusView } from '../../src/admin/api-types.js';
import { rmemMax, WCCP_RECEIVE_BUFFER_BYTES } from '../../src/control/udp-socket.js';
import { startDaemon } from '../helpers/daemon.js';
import type { RunningDaemon } from '../helpers/daemon.js';

describe("wccpd's WCCP socket", () => {
  let daemon: RunningDaemon;
  before(async () => {
    daemon = await startDaemon();
  });
  after(async () => {
    await daemon?.stop();
  });

  it('has the documented receive buffer, says so at start, and shows the drops in status and /metrics', async () => {
    const granted = Math.min(WCCP_RECEIVE_BUFFER_BYTES, rmemMax() ?? 0);
    const status = (await (await fetch(`${daemon.url}/api/v1/status`)).json()) as StatusView;
    assert.deepEqual(status.wccpSocket, { receiveBufferBytes: granted, kernelDrops: 0 });
    const metrics = await (await fetch(`${daemon.url}/metrics`)).text();
    assert.match(metrics, /^wccpd_wccp_socket_drops_total 0$/m);
    assert.match(daemon.output.join(''), new RegExp(`WCCP socket receive buffer ${granted} bytes`));
  });
});
