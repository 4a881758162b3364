// The userland backend with the REAL pcap and raw-socket addons in network namespaces (root):
//   client ns 203.0.113.10 eth0 --- c0 203.0.113.1  gw ns (userland backend)  e0 192.0.2.1 --- eth0 192.0.2.11 engine
// ns
// The client opens TCP connections to origin addresses; tcpdump in the engine ns must see GRE 0x883E with the right
// service id and bucket around exactly the packets the client sent, and tshark must decode them without complaint.
// The gateway side runs in its own process inside the gw namespace (test/dataplane/bin/userland-gw.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { need, isRoot, haveCommand } from '../../helpers/require.js';
import { tsharkFile, field, complaints } from '../../helpers/tshark.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { webCache } from '../service-fixture.js';
import { deleteNamespaces, nsx, sh, startUserlandGateway, stopProcess, type UserlandGateway } from '../userland-gw.js';

const ENGINE = '192.0.2.11';
const SERVICE_ID = 90;

interface PcapRecord {
  readonly data: Buffer;
}

/** The records of a classic pcap file (Ethernet). */
function readPcap(path: string): PcapRecord[] {
  const b = readFileSync(path);
  const out: PcapRecord[] = [];
  let o = 24;
  while (o + 16 <= b.length) {
    const caplen = b.readUInt32LE(o + 8);
    out.push({ data: b.subarray(o + 16, o + 16 + caplen) });
    o += 16 + caplen;
  }
  return out;
}

function startCapture(ns: string, device: string, file: string, filter: string): Promise<ChildProcess> {
  const p = spawn('ip', ['netns', 'exec', ns, 'tcpdump', '-i', device, '-U', '--immediate-mode', '-w', file, filter], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`tcpdump in ${ns} did not start: ${err}`)), 5000);
    p.stderr?.on('data', (d: Buffer) => {
      err += d.toString();
      if (err.includes('listening on')) {
        clearTimeout(timer);
        resolve(p);
      }
    });
    p.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`tcpdump exited ${code}: ${err}`));
    });
  });
}

{
  const skip = need(
    isRoot && haveCommand('tcpdump') && haveCommand('tshark') && haveCommand('curl'),
    'root, tcpdump, tshark and curl (the userland data plane in network namespaces)',
  );
  test(
    'userland GRE with the native addons: the engine receives 0x883E with the right service, bucket and packet',
    { skip, timeout: 60_000 },
    async () => {
      const tag = `wu${process.pid}`;
      const ns = { client: `${tag}-c`, gw: `${tag}-g`, engine: `${tag}-e` };
      const dir = mkdtempSync(join(tmpdir(), `wccpd-userland-${process.pid}-`));
      const procs: ChildProcess[] = [];
      let gw: UserlandGateway | undefined;
      try {
        for (const n of Object.values(ns)) sh(['ip', 'netns', 'add', n]);
        sh(['ip', 'link', 'add', 'c0', 'netns', ns.gw, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.client]);
        sh(['ip', 'link', 'add', 'e0', 'netns', ns.gw, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.engine]);
        const up = (n: string, dev: string, addr: string): void => {
          nsx(n, ['ip', 'addr', 'add', addr, 'dev', dev]);
          nsx(n, ['ip', 'link', 'set', dev, 'up']);
          nsx(n, ['ip', 'link', 'set', 'lo', 'up']);
        };
        up(ns.client, 'eth0', '203.0.113.10/24');
        up(ns.gw, 'c0', '203.0.113.1/24');
        up(ns.gw, 'e0', '192.0.2.1/24');
        up(ns.engine, 'eth0', `${ENGINE}/24`);
        nsx(ns.client, ['ip', 'route', 'add', 'default', 'via', '203.0.113.1']);
        nsx(ns.engine, ['ip', 'route', 'add', 'default', 'via', '192.0.2.1']);
        nsx(ns.gw, ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
        // The origin is "behind the engine segment": without the guard the kernel would forward these SYNs too.
        nsx(ns.gw, ['ip', 'route', 'add', '198.51.100.0/24', 'via', ENGINE]);

        const service = webCache(() => ENGINE, [ENGINE], { serviceId: SERVICE_ID, forwarding: 'gre' });
        const engineFile = join(dir, 'engine.pcap');
        const clientFile = join(dir, 'client.pcap');
        procs.push(await startCapture(ns.engine, 'eth0', engineFile, 'ip proto 47 or tcp port 80'));
        procs.push(await startCapture(ns.client, 'eth0', clientFile, 'tcp dst port 80'));

        gw = await startUserlandGateway(ns.gw, service);
        assert.equal(gw.ready.native, true, `native packet I/O: ${String(gw.ready.reason)}`);
        assert.match(nsx(ns.gw, ['nft', 'list', 'table', 'inet', 'wccpd_userland']), /drop/);

        const destinations = ['198.51.100.7', '198.51.100.80', '198.51.100.201'];
        for (const d of destinations) {
          try {
            nsx(ns.client, ['curl', '-s', '--connect-timeout', '1', `http://${d}/`]);
          } catch {
            /* no origin answers: only the SYNs matter */
          }
        }
        const result = await gw.stop();
        for (const p of procs) await stopProcess(p);
        assert.throws(() => nsx(ns.gw, ['nft', 'list', 'table', 'inet', 'wccpd_userland']), 'stop() removed the rule');

        const sent = readPcap(clientFile).map((r) => r.data.subarray(14));
        assert.ok(sent.length >= destinations.length, `the client sent ${sent.length} SYNs`);
        const greFrames = readPcap(engineFile).filter((r) => r.data[14 + 9] === 47);
        const leaked = readPcap(engineFile).filter((r) => r.data[14 + 9] === 6);
        assert.equal(leaked.length, 0, 'the kernel forwarded none of what userland took over');
        assert.equal(greFrames.length, sent.length, 'one GRE packet per client packet');
        // veth checksum offload: the client's capture holds a partial TCP checksum, which the kernel (and userland)
        // completes on the way out. Every other byte must be what the client sent; tshark checks the checksums below.
        const tcpChecksumMasked = (ip: Buffer): string => {
          const c = Buffer.from(ip);
          c.writeUInt16BE(0, ((c[0] ?? 0) & 0x0f) * 4 + 16);
          return c.toString('hex');
        };
        const innerOf = (frame: Buffer): Buffer => frame.subarray(14 + ((frame[14] ?? 0) & 0x0f) * 4 + 8);
        const inners = greFrames.map((r) => tcpChecksumMasked(innerOf(r.data))).sort();
        assert.deepEqual(inners, sent.map(tcpChecksumMasked).sort(), 'inner packets equal what the client sent');

        const decoded = tsharkFile(engineFile).filter((p) => p.protocols.includes('gre'));
        assert.equal(decoded.length, greFrames.length);
        for (const p of decoded) {
          assert.equal(complaints(p), 'none');
          assert.equal(field(p, 'gre.proto'), '0x883e');
          assert.equal(Number(field(p, 'gre.wccp.service_id')), SERVICE_ID);
          const dst = p.fields.get('ip.dst')?.[1];
          assert.ok(dst !== undefined && destinations.includes(dst), `inner destination ${dst}`);
          assert.equal(Number(field(p, 'gre.wccp.primary_bucket')), bucketOf(dst));
          assert.equal(p.fields.get('ip.dst')?.[0], ENGINE);
        }
        const engines = result.engines as Record<string, { packets: number }>;
        assert.equal(engines[ENGINE]?.packets, greFrames.length, 'engine counter = GRE packets seen by the engine');
      } finally {
        await stopProcess(gw?.proc);
        for (const p of procs) await stopProcess(p);
        deleteNamespaces(Object.values(ns));
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
}
