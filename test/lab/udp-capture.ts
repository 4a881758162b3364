// A UDP listener inside a namespace (a tiny node script), recording every datagram: who sent it and its bytes.
// Used to see HERE_I_AMs reach the router address before wccpd exists, and by tests that watch the wire.
import type { LabProcess } from './process.js';
import { sleep } from './proc.js';
import { LabError } from './errors.js';

export interface Datagram {
  from: string;
  port: number;
  hex: string;
  /** Receive time, ms since the epoch (the listener's clock). */
  at: number;
}

export interface UdpCapture {
  readonly process: LabProcess;
  /** Everything received so far. */
  datagrams(): Datagram[];
  /** Resolves once some received datagram matches (polls, bounded); rejects with what was seen after timeoutMs. */
  waitFor(match: (d: Datagram) => boolean, timeoutMs: number): Promise<Datagram>;
  stop(): Promise<void>;
}

const SCRIPT = `
const s = require('node:dgram').createSocket('udp4');
s.on('message', (m, r) => process.stdout.write(JSON.stringify({ from: r.address, port: r.port, hex: m.toString('hex'), at: Date.now() }) + '\\n'));
s.on('error', (e) => { process.stderr.write(String(e) + '\\n'); process.exit(2); });
s.bind(Number(process.argv[2]), process.argv[1], () => process.stdout.write('bound\\n'));
process.on('SIGTERM', () => process.exit(0));
`;

type Spawn = (ns: string, cmd: string, args: readonly string[]) => LabProcess;

export async function captureUdp(spawn: Spawn, ns: string, address: string, port: number): Promise<UdpCapture> {
  const p = spawn(ns, process.execPath, ['-e', SCRIPT, address, String(port)]);
  await p.waitForLine((l) => l === 'bound', 5000);
  const datagrams = (): Datagram[] =>
    p
      .lines()
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Datagram);
  return {
    process: p,
    datagrams,
    async waitFor(match, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const hit = datagrams().find(match);
        if (hit) return hit;
        if (Date.now() >= deadline) {
          const seen = datagrams()
            .map((d) => `${d.from}:${d.port} ${d.hex.slice(0, 16)}...`)
            .join('\n');
          throw new LabError(
            `no matching datagram on ${address}:${port} in ${ns} within ${timeoutMs} ms; got ${datagrams().length}:\n${seen}`,
          );
        }
        await sleep(25);
      }
    },
    stop: () => p.stop(1000),
  };
}
