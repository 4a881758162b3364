// The WCCP socket's receive buffer and the kernel's drops on it, on loopback. The host's net.core.rmem_max is read,
// never changed: the router asks WCCP_RECEIVE_BUFFER_BYTES and the kernel grants at most rmem_max (reporting twice
// what it grants); asked for more than rmem_max, the router warns naming the sysctl. A flood at a small buffer shows
// in the drops the router reads from /proc/net/udp (wccpd_wccp_socket_drops_total).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster } from '../../src/cluster/index.js';
import { WccpRouter } from '../../src/control/index.js';
import { rmemMax, udpDropsIn, WCCP_RECEIVE_BUFFER_BYTES } from '../../src/control/udp-socket.js';
import { ClusterModel } from '../../src/admin/cluster-model.js';
import { createMetrics } from '../../src/admin/metrics.js';
import { recordingLog } from '../../src/log.js';
import { waitFor } from '../helpers/daemon.js';
import { idleDeps } from '../admin/model-fixture.js';
import { fakeClock, serviceConfig } from '../cluster/helpers.js';

const ROUTER = '127.0.0.1';

async function withRouter(
  receiveBufferBytes: number | undefined,
  body: (router: WccpRouter, log: ReturnType<typeof recordingLog>) => Promise<void>,
  procNetUdp?: string,
): Promise<void> {
  const clock = { now: () => Date.now() };
  const cluster = new Cluster({ clock, routerAddress: ROUTER, hereIAmMs: 10_000, services: [] });
  const log = recordingLog();
  const router = new WccpRouter({
    address: ROUTER,
    port: 0,
    services: [],
    cluster,
    log,
    clock,
    ...(receiveBufferBytes === undefined ? {} : { receiveBufferBytes }),
    ...(procNetUdp === undefined ? {} : { procNetUdp }),
  });
  await router.start();
  try {
    await body(router, log);
  } finally {
    await router.stop();
  }
}

const bufferLines = (log: ReturnType<typeof recordingLog>) =>
  log.lines.filter((l) => l.msg?.startsWith('WCCP socket receive buffer'));

test('the router asks for WCCP_RECEIVE_BUFFER_BYTES and says what the kernel granted: all of it, or what rmem_max allows', async () => {
  const max = rmemMax();
  assert.ok(max !== null, 'net.core.rmem_max is readable');
  await withRouter(undefined, async (router, log) => {
    assert.equal(router.receiveBuffer(), 2 * Math.min(WCCP_RECEIVE_BUFFER_BYTES, max));
    const lines = bufferLines(log);
    assert.equal(lines.length, 1);
    if (max >= WCCP_RECEIVE_BUFFER_BYTES) {
      assert.equal(lines[0]?.level, 'info');
      assert.equal(lines[0]?.msg, `WCCP socket receive buffer ${WCCP_RECEIVE_BUFFER_BYTES} bytes`);
    } else {
      assert.equal(lines[0]?.level, 'warn');
      assert.match(lines[0]?.msg ?? '', /net\.core\.rmem_max/);
    }
  });
});

test('asked for more than net.core.rmem_max, the router warns naming the sysctl and what it was given', async () => {
  const max = rmemMax() ?? 0;
  const asked = max + 1024 * 1024;
  await withRouter(asked, async (router, log) => {
    assert.equal(router.receiveBuffer(), 2 * max, 'the kernel caps SO_RCVBUF at rmem_max');
    const lines = bufferLines(log);
    assert.equal(lines.length, 1);
    assert.equal(lines[0]?.level, 'warn');
    assert.equal(
      lines[0]?.msg,
      `WCCP socket receive buffer ${max} bytes, not the ${asked} asked: net.core.rmem_max (${max}) caps it, and a ` +
        'flood of datagrams overflows it sooner (the kernel drops them: wccpd_wccp_socket_drops_total); raise it ' +
        `with sysctl net.core.rmem_max=${asked}`,
    );
  });
});

test("a flood at a small receive buffer shows in the kernel's drops for the router's socket", async () => {
  await withRouter(4096, async (router) => {
    assert.equal(router.socketDrops(), 0, 'a fresh socket has dropped nothing');
    const sender = createSocket('udp4');
    await new Promise<void>((r) => sender.bind(0, ROUTER, r));
    sender.connect(router.port(), ROUTER);
    await new Promise<void>((r) => sender.once('connect', r));
    try {
      // All sent before the router's event loop reads one: a 4 KB buffer holds a few of them.
      const junk = Buffer.alloc(200, 0xab);
      for (let i = 0; i < 500; i++) sender.send(junk);
      const drops = await waitFor('the kernel dropped some', async () => {
        const d = router.socketDrops() ?? 0;
        return d > 0 ? d : null;
      });
      assert.ok(drops > 0 && drops < 500, `${drops} dropped`);
      assert.ok(router.counters().received + drops <= 500);
    } finally {
      sender.close();
    }
  });
});

test('/proc/net/udp: the drops column of the socket bound to the address and port, in host byte order', () => {
  const text =
    '   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n' +
    '  415: 0100007F:0800 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 90881 2 0000000000000000 17\n' +
    '  416: 0200007F:0800 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 90882 2 0000000000000000 3\n';
  assert.equal(udpDropsIn(text, '127.0.0.1', 2048), 17);
  assert.equal(udpDropsIn(text, '127.0.0.2', 2048), 3);
  assert.equal(udpDropsIn(text, '127.0.0.1', 2049), null);
});

test("the kernel's drops reach status and /metrics; where they cannot be read, status says null", async () => {
  const model = (kernelDrops: number | null) => {
    const clock = fakeClock();
    return new ClusterModel({
      cluster: new Cluster({ clock, routerAddress: '192.0.2.1', hereIAmMs: 10_000, services: [serviceConfig()] }),
      clock,
      dataplane: () => ({ backend: 'nft', detail: '', bridgeNetfilter: null }),
      ...idleDeps,
      traffic: () => Promise.resolve({ engines: new Map() }),
      wccpSocket: () => ({ receiveBufferBytes: WCCP_RECEIVE_BUFFER_BYTES, kernelDrops }),
    });
  };
  const counted = model(12);
  assert.deepEqual(counted.status().wccpSocket, { receiveBufferBytes: WCCP_RECEIVE_BUFFER_BYTES, kernelDrops: 12 });
  assert.match(await createMetrics(counted).render(), /^wccpd_wccp_socket_drops_total 12$/m);
  assert.match(await createMetrics(model(0)).render(), /^wccpd_wccp_socket_drops_total 0$/m, 'a 0 read is shown');
  const unknown = model(null);
  assert.equal(unknown.status().wccpSocket?.kernelDrops, null);
  // Not read: no sample (prom-client would give a counter without labels a 0), its HELP and TYPE stay.
  const text = await createMetrics(unknown).render();
  assert.doesNotMatch(text, /^wccpd_wccp_socket_drops_total /m);
  assert.match(text, /^# TYPE wccpd_wccp_socket_drops_total counter$/m);
});

test('/proc/net/udp unreadable: the router says null and logs it once, until it reads again', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-udp-'));
  const file = join(dir, 'udp');
  try {
    await withRouter(
      undefined,
      async (router, log) => {
        const unreadable = () => log.lines.filter((l) => l.msg?.startsWith("the kernel's drops on the WCCP socket"));
        assert.equal(router.socketDrops(), null);
        assert.equal(router.socketDrops(), null);
        assert.equal(unreadable().length, 1, 'logged once');
        assert.equal(unreadable()[0]?.level, 'warn');
        assert.match(unreadable()[0]?.msg ?? '', /ENOENT.*wccpd_wccp_socket_drops_total is left out of \/metrics/);
        writeFileSync(file, readFileSync('/proc/net/udp', 'utf8'));
        assert.equal(router.socketDrops(), 0, 'read again');
        rmSync(file);
        assert.equal(router.socketDrops(), null);
        assert.equal(unreadable().length, 2, 'a new failure after a good read is logged again');
      },
      file,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
