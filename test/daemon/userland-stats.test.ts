// The userland data plane as the daemon runs it, on the in-process shims: its send failures reach the daemon's log
// (rate-limited), and its counters show on /metrics and in GET status next to the engine counters.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { UserlandRedirector } from '../../src/dataplane/index.js';
import { recordingLog } from '../../src/log.js';
import type { StatusView } from '../../src/admin/api-types.js';
import { Wire } from '../../native-free-shims/wire.js';
import * as pcap from '../../native-free-shims/pcap/index.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { waitFor, writeLoopbackConfig } from '../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import { RecordingGuard, failingSends, shimIo, tcpFrame, tick } from '../shims/harness.js';

const ENGINE = '127.0.0.11';

test('send failures of the userland data plane are logged by the daemon and counted on /metrics and in status', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-userland-stats-${process.pid}-`));
  const {
    path: configPath,
    udpPort: udp,
    httpPort: adminPort,
  } = await writeLoopbackConfig(dir, {
    backend: 'userland',
    hereIAm: '1s',
    service: ['forwarding: gre', 'clientInterfaces: [c0]'],
    lenientReceiveId: 0,
  });
  const log = recordingLog();
  const wire = new Wire({ localAddress: '127.0.0.1' });
  const redirector = new UserlandRedirector({ io: failingSends(shimIo(wire)), guard: new RecordingGuard(), log });
  const daemon = new Daemon({ config: await loadConfig(configPath), log, redirector });
  const client = pcap.createSession('c0', { wire });
  // GRE forwarding (1), hash assignment (1), L2 return (2).
  const engine = new TestEngine({
    address: ENGINE,
    router: { address: '127.0.0.1', port: udp },
    capabilities: { forwarding: 1, assignment: 1, return: 2 },
  });
  const url = `http://127.0.0.1:${adminPort}`;
  try {
    await daemon.start();
    await engine.start();
    assert.ok(await engine.hereIAm({ timeoutMs: 2000 }));
    assert.ok(await engine.hereIAm({ timeoutMs: 2000 }));
    await waitFor('the engine to hold the buckets', async () => {
      const s = (await (await fetch(`${url}/api/v1/services/0/buckets`)).json()) as { buckets: (string | null)[] };
      return s.buckets.every((b) => b === ENGINE) ? true : null;
    });
    await waitFor('the userland capture', async () =>
      log.lines.some((l) => /userland captures service 0 on c0/.test(l.msg ?? '')) ? true : null,
    );
    for (let i = 0; i < 3; i++)
      client.inject(tcpFrame({ src: '203.0.113.10', dst: '198.51.100.80', srcPort: 4000 + i, dstPort: 80 }).frame);
    await tick();
    await tick();
    const failures = log.lines.filter((l) =>
      /userland could not send a packet \(gre\) to 127\.0\.0\.11: ENOBUFS/.test(l.msg ?? ''),
    );
    assert.equal(failures.length, 1, 'one line for three failures within 10 s');
    const { samples } = parsePrometheusText(await (await fetch(`${url}/metrics`)).text());
    assert.equal(sampleValue(samples, 'wccpd_userland_packets_total', { kind: 'sendErrors' }), 3);
    assert.equal(
      sampleValue(samples, 'wccpd_userland_packets_total', { kind: 'bypassed' }),
      undefined,
      'no sample for 0',
    );
    assert.equal(sampleValue(samples, 'wccpd_userland_flows', { service: '0' }), 3);
    const status = (await (await fetch(`${url}/api/v1/status`)).json()) as StatusView;
    assert.equal(status.dataplane.backend, 'userland');
    assert.equal(status.dataplane.detail, 'native-free shims: test wire');
    assert.equal(status.dataplane.userland?.sendErrors, 3);
    assert.deepEqual(status.dataplane.userland?.flows, [{ service: 0, flows: 3 }]);
  } finally {
    client.close();
    await engine.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
