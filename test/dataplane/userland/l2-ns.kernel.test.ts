// L2 forwarding by the userland backend with the REAL pcap and raw-socket addons, end to end (root):
//   client ns 203.0.113.10 eth0 --- c0 203.0.113.1   gw ns (userland backend)   e0 192.0.2.1 --- eth0 192.0.2.11 engine
//                                                                                o0 192.0.2.129 --- eth0 192.0.2.130
// origin
// The gateway routes 198.51.100.0/24 to the origin, so only userland can bring the client's traffic to the engine
// (which intercepts TCP 80 to :3129 and 5201 to its own iperf3 with nft `redirect`, as a WCCP engine does). Bulk TCP
// from the client arrives on c0 as GSO super-frames larger than the MTU: they must be segmented to cross e0.
// The gateway side runs in its own process inside the gw namespace (test/dataplane/bin/userland-gw.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { need, isRoot, haveCommand } from '../../helpers/require.js';
import { webCache } from '../service-fixture.js';
import { deleteNamespaces, nsx, sh, startUserlandGateway, stopProcess, type UserlandGateway } from '../userland-gw.js';

const ENGINE = '192.0.2.11';
const ORIGIN = '198.51.100.80';
const SERVICE_ID = 91;
const BIG = 2 * 1024 * 1024;
const UPLOAD = 8 * 1024 * 1024;

/** An HTTP server naming itself in X-Served-By: GET -> `size` bytes of a pattern; POST -> {bytes, sha256} of the body.
 * */
const SERVER = `
const http = require('node:http'); const crypto = require('node:crypto');
const [name, port, size] = process.argv.slice(1);
const body = Buffer.alloc(Number(size), 'wccpd-');
http.createServer((req, res) => {
  res.setHeader('X-Served-By', name);
  if (req.method === 'POST') {
    const h = crypto.createHash('sha256'); let n = 0;
    req.on('data', (d) => { h.update(d); n += d.length; });
    req.on('end', () => res.end(JSON.stringify({ bytes: n, sha256: h.digest('hex') })));
    return;
  }
  res.end(body);
}).listen(Number(port), () => console.log('listening'));
`;

function startServer(ns: string, name: string, port: number): Promise<ChildProcess> {
  const p = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', SERVER, name, String(port), String(BIG)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server ${name} in ${ns} did not start`)), 10_000);
    p.stdout?.once('data', () => {
      clearTimeout(timer);
      resolve(p);
    });
    p.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server ${name} exited ${code}`));
    });
  });
}

/** GET with curl from the client: who served it (X-Served-By) and how many body bytes arrived. */
function curl(ns: string): { servedBy: string; size: number } {
  const out = nsx(
    ns,
    ['curl', '-sS', '--max-time', '60', '-D', '-', '-o', '/dev/null', '-w', '\n%{size_download}', `http://${ORIGIN}/`],
    90_000,
  );
  const servedBy = /x-served-by: (\S+)/i.exec(out)?.[1] ?? '(none)';
  const size = Number(out.trim().split('\n').at(-1));
  return { servedBy, size };
}

{
  const skip = need(
    isRoot && haveCommand('curl') && haveCommand('iperf3') && haveCommand('nft'),
    'root, curl, iperf3 and nft (userland L2 forwarding in network namespaces)',
  );
  test(
    'userland L2 with the native addons: 2 MB download, 8 MB upload and iperf3 through the engine',
    { skip, timeout: 180_000 },
    async () => {
      const tag = `wl2${process.pid}`;
      const ns = { client: `${tag}-c`, gw: `${tag}-g`, engine: `${tag}-e`, origin: `${tag}-o` };
      const dir = mkdtempSync(join(tmpdir(), `wccpd-userland-l2-${process.pid}-`));
      const procs: ChildProcess[] = [];
      let gw: UserlandGateway | undefined;
      try {
        for (const n of Object.values(ns)) {
          sh(['ip', 'netns', 'add', n]);
          nsx(n, ['ip', 'link', 'set', 'lo', 'up']);
        }
        const veth = (a: string, aNs: string, aAddr: string, bNs: string, bAddr: string): void => {
          sh(['ip', 'link', 'add', a, 'netns', aNs, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', bNs]);
          nsx(aNs, ['ip', 'addr', 'add', aAddr, 'dev', a]);
          nsx(aNs, ['ip', 'link', 'set', a, 'up']);
          nsx(bNs, ['ip', 'addr', 'add', bAddr, 'dev', 'eth0']);
          nsx(bNs, ['ip', 'link', 'set', 'eth0', 'up']);
        };
        veth('c0', ns.gw, '203.0.113.1/24', ns.client, '203.0.113.10/24');
        veth('e0', ns.gw, '192.0.2.1/25', ns.engine, `${ENGINE}/25`);
        veth('o0', ns.gw, '192.0.2.129/30', ns.origin, '192.0.2.130/30');
        nsx(ns.client, ['ip', 'route', 'add', 'default', 'via', '203.0.113.1']);
        nsx(ns.engine, ['ip', 'route', 'add', 'default', 'via', '192.0.2.1']);
        nsx(ns.origin, ['ip', 'route', 'add', 'default', 'via', '192.0.2.129']);
        nsx(ns.origin, ['ip', 'route', 'add', 'local', '198.51.100.0/24', 'dev', 'lo']);
        nsx(ns.gw, ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
        nsx(ns.gw, ['ip', 'route', 'add', '198.51.100.0/24', 'via', '192.0.2.130']);
        const ruleset = join(dir, 'engine.nft');
        writeFileSync(
          ruleset,
          `table ip eng {
  chain pre { type nat hook prerouting priority dstnat;
    iifname "eth0" ip saddr != 192.0.2.0/25 tcp dport 80 redirect to :3129
    iifname "eth0" ip saddr != 192.0.2.0/25 tcp dport 5201 redirect to :5201
  }
}\n`,
        );
        nsx(ns.engine, ['nft', '-f', ruleset]);
        procs.push(await startServer(ns.engine, 'engine', 3129));
        procs.push(await startServer(ns.origin, 'origin', 80));
        procs.push(spawn('ip', ['netns', 'exec', ns.engine, 'iperf3', '-s', '-1', '-p', '5201'], { stdio: 'ignore' }));

        // Before wccpd: the origin answers.
        assert.equal(curl(ns.client).servedBy, 'origin');

        const service = webCache(() => ENGINE, [ENGINE], { serviceId: SERVICE_ID, ports: [80, 5201] });
        gw = await startUserlandGateway(ns.gw, service);
        assert.equal(gw.ready.native, true, `native packet I/O: ${String(gw.ready.reason)}`);

        const started = Date.now();
        const download = curl(ns.client);
        const downloadMs = Date.now() - started;
        assert.equal(download.servedBy, 'engine', 'the engine served the download');
        assert.equal(download.size, BIG, 'the whole 2 MB object arrived');

        const upload = Buffer.alloc(UPLOAD);
        for (let i = 0; i < upload.length; i++) upload[i] = (i * 131 + (i >> 12)) & 0xff;
        const uploadFile = join(dir, 'upload.bin');
        writeFileSync(uploadFile, upload);
        const posted = nsx(
          ns.client,
          ['curl', '-sS', '--max-time', '90', '-H', 'Expect:', '--data-binary', `@${uploadFile}`, `http://${ORIGIN}/`],
          120_000,
        );
        assert.deepEqual(
          JSON.parse(posted),
          { bytes: UPLOAD, sha256: createHash('sha256').update(upload).digest('hex') },
          'the engine received the 8 MB upload intact',
        );

        const iperf = JSON.parse(nsx(ns.client, ['iperf3', '-c', ORIGIN, '-p', '5201', '-t', '3', '-J'], 60_000)) as {
          end?: { sum_received?: { bits_per_second?: number; bytes?: number }; sum_sent?: { retransmits?: number } };
        };
        const mbits = (iperf.end?.sum_received?.bits_per_second ?? 0) / 1e6;
        assert.ok((iperf.end?.sum_received?.bytes ?? 0) > 0, 'iperf3 moved data through the engine');

        const result = await gw.stop();
        const stats = result.stats as {
          segmented: number;
          segments: number;
          sendErrors: number;
          oversizeDropped: Record<string, number>;
        };
        const engines = result.engines as Record<string, { packets: number; bytes: number }>;
        console.log(
          `# userland L2: 2 MB download ${downloadMs} ms; iperf3 1 flow ${mbits.toFixed(1)} Mbit/s, ` +
            `${iperf.end?.sum_sent?.retransmits ?? '?'} retransmits; engine packets ${engines[ENGINE]?.packets}; ` +
            `super-frames segmented ${stats.segmented} into ${stats.segments}; send errors ${stats.sendErrors}; ` +
            `oversize dropped ${JSON.stringify(stats.oversizeDropped)}; load ${sh(['cat', '/proc/loadavg']).trim()}`,
        );
        assert.ok(stats.segmented > 0, 'bulk TCP arrived as super-frames and was segmented');
        assert.ok((engines[ENGINE]?.packets ?? 0) >= UPLOAD / 1500, 'the upload went to the engine through userland');
        assert.deepEqual(stats.oversizeDropped, {
          'not-tcp': 0,
          'ip-fragment': 0,
          'syn-or-rst': 0,
          'headers-exceed-mtu': 0,
        });
      } finally {
        await stopProcess(gw?.proc);
        for (const p of procs) await stopProcess(p);
        deleteNamespaces(Object.values(ns));
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
}
