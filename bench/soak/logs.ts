// Soak: a spoofed flood. 20,000 datagrams from 20,000 random loopback sources (127.x.y.z, never a foreign address)
// to a real wccpd: random bytes, truncated HERE_I_AMs, HERE_I_AMs for a service that is not configured, and
// HERE_I_AMs naming another engine's identity. Prints how many the router counted and dropped, by reason, and how
// many log lines the daemon wrote meanwhile, beside the bound reasons x (1 + elapsed / 10 s).
//   npx tsx bench/soak/logs.ts [--count 20000]
import { createSocket } from 'node:dgram';
import { startDaemon } from '../../test/helpers/daemon.js';
import { TestEngine } from '../../test/helpers/wccp-engine.js';
import { seededUint32 } from '../../test/helpers/seeded.js';
import type { StatusView } from '../../src/admin/api-types.js';
import { checkArgs, orExit } from '../cli.js';

const CLI = {
  name: 'bench/soak/logs',
  usage: `usage: npx tsx bench/soak/logs.ts [--count 20000]
A spoofed flood of --count datagrams (default 20,000) from random loopback sources to a real wccpd; prints what the
router counted and dropped by reason, and the log lines written beside their bound.`,
  values: ['--count'],
};
const args = orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));
const count = Number(args[args.indexOf('--count') + 1] ?? 20_000) || 20_000;
const LOG_INTERVAL_S = 10;

const daemon = await startDaemon([], { allow: '[127.0.0.0/8]' });
// Same draws as before: mulberry32's 32-bit output scaled to [0, 1).
const draw = seededUint32(20261201);
const rand = (): number => draw() / 4294967296;
try {
  const router = { address: '127.0.0.1', port: daemon.udpPort };
  const template = new TestEngine({ address: '127.0.0.11', router });
  const otherService = new TestEngine({ address: '127.0.0.11', router, serviceId: 7 });
  const hereIAm = template.hereIAmBytes();
  const unknown = otherService.hereIAmBytes();
  const sources = new Set<string>();
  const datagram = (i: number): Buffer => {
    switch (i % 4) {
      case 0:
        return Buffer.from(Array.from({ length: 1 + Math.floor(rand() * 120) }, () => Math.floor(rand() * 256)));
      case 1:
        return hereIAm.subarray(0, 8 + Math.floor(rand() * (hereIAm.length - 8)));
      case 2:
        return unknown;
      default:
        return hereIAm; // identity 127.0.0.11, from another source: identity-mismatch
    }
  };
  const before = (await (await fetch(`${daemon.url}/api/v1/status`)).json()) as StatusView;
  const logStart = daemon.output.join('').split('\n').length;
  const started = Date.now();
  const BATCH = 100;
  for (let sent = 0; sent < count; sent += BATCH) {
    await Promise.all(
      Array.from({ length: Math.min(BATCH, count - sent) }, async (_, k) => {
        let source: string;
        do source = `127.${1 + Math.floor(rand() * 254)}.${Math.floor(rand() * 256)}.${1 + Math.floor(rand() * 254)}`;
        while (sources.has(source));
        sources.add(source);
        const s = createSocket('udp4');
        await new Promise<void>((r, j) => {
          s.once('error', j);
          s.bind(0, source, () => r());
        });
        await new Promise<void>((r) => s.send(datagram(sent + k), router.port, router.address, () => r()));
        await new Promise<void>((r) => s.close(() => r()));
      }),
    );
    // Let the daemon catch up now and then (bounded), so the socket buffer is not what is measured.
    if ((sent / BATCH) % 10 === 9) {
      for (let wait = 0, last = -1; wait < 40; wait++) {
        const s = (await (await fetch(`${daemon.url}/api/v1/status`)).json()) as StatusView;
        const n = [...Object.values(s.dropped), ...Object.values(s.decodeErrors)].reduce((a, b) => a + b, 0);
        if (n === last) break;
        last = n;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }
  const elapsedS = (Date.now() - started) / 1000;
  await new Promise((r) => setTimeout(r, 500));
  const after = (await (await fetch(`${daemon.url}/api/v1/status`)).json()) as StatusView;
  const diff = (
    a: Readonly<Record<string, number>>,
    b: Readonly<Record<string, number>>,
    prefix = '',
  ): [string, number][] =>
    Object.entries(a)
      .map(([k, v]): [string, number] => [`${prefix}${k}`, v - (b[k] ?? 0)])
      .filter(([, v]) => v > 0);
  const dropped: Record<string, number> = Object.fromEntries([
    ...diff(after.dropped, before.dropped),
    ...diff(after.decodeErrors, before.decodeErrors, 'decode-'),
  ]);
  const total = Object.values(dropped).reduce((a, b) => a + b, 0);
  const lines = daemon.output
    .join('')
    .split('\n')
    .slice(logStart - 1)
    .filter((l) => l.startsWith('{'));
  const reasons = Object.keys(dropped).length;
  const bound = reasons * (1 + Math.ceil(elapsedS / LOG_INTERVAL_S));
  console.log(`logs: ${count} datagrams from ${sources.size} distinct loopback sources in ${elapsedS.toFixed(1)} s`);
  console.log(
    `  dropped and counted        ${total}   (${count - total} never reached the daemon: socket buffer) by reason: ${JSON.stringify(dropped)}`,
  );
  console.log(
    `  log lines emitted          ${lines.length}   (keyed per source this was one per datagram: ${count}; ratio ${(lines.length / count).toFixed(5)})`,
  );
  console.log(
    `  bound                      ${bound}   = ${reasons} reasons x (1 + ${Math.ceil(elapsedS / LOG_INTERVAL_S)} intervals of ${LOG_INTERVAL_S} s)`,
  );
} finally {
  await daemon.stop();
}
