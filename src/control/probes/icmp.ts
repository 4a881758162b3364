// ICMP echo probe over one raw socket (the native raw-socket package; needs root or CAP_NET_RAW). Passing proves
// the engine's host is up and routable, nothing about the cache. Where raw sockets are unavailable the caller gets
// the reason and disables ICMP probing.
import { formatDuration } from '../../duration.js';
import type { Socket as RawSocket } from 'raw-socket';
import type { ProbeOutcome } from '../../cluster/index.js';
import { probeDeadline } from './types.js';
import type { Prober } from './types.js';

const IPPROTO_ICMP = 1;
const ECHO_REQUEST = 8;
const ECHO_REPLY = 0;
const PAYLOAD = Buffer.from('wccpd health probe');

/** The part of the native raw-socket package used here (its types: types/raw-socket.d.ts). */
type RawSocketModule = Pick<typeof import('raw-socket'), 'createSocket'>;

/** The Internet checksum (RFC 1071) over an ICMP message. */
export function icmpChecksum(buf: Uint8Array): number {
  let sum = 0;
  for (let i = 0; i + 1 < buf.length; i += 2) sum += ((buf[i] ?? 0) << 8) | (buf[i + 1] ?? 0);
  if (buf.length % 2 === 1) sum += (buf[buf.length - 1] ?? 0) << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

export function echoRequest(identifier: number, sequence: number): Buffer {
  const b = Buffer.alloc(8 + PAYLOAD.length);
  b.writeUInt8(ECHO_REQUEST, 0);
  b.writeUInt16BE(identifier, 4);
  b.writeUInt16BE(sequence, 6);
  PAYLOAD.copy(b, 8);
  b.writeUInt16BE(icmpChecksum(b), 2);
  return b;
}

export interface IcmpProber {
  readonly probe: Prober;
  close(): void;
}

export type IcmpProberResult =
  { readonly ok: true; readonly prober: IcmpProber } | { readonly ok: false; readonly reason: string };

/**
 * Opens the raw ICMP socket; never throws: without the package or the privilege it says why. `load` is the package
 * (tests pass a stand-in).
 */
export async function openIcmpProber(load: () => Promise<RawSocketModule> = loadRawSocket): Promise<IcmpProberResult> {
  let raw: RawSocketModule;
  try {
    raw = await load();
  } catch (e) {
    return { ok: false, reason: `the raw-socket package does not load: ${(e as Error).message.split('\n')[0]}` };
  }
  const identifier = process.pid & 0xffff;
  let sequence = 0;
  const pending = new Map<number, { engine: string; started: number; done: (o: ProbeOutcome) => void }>();
  const open = (): RawSocket => {
    const s = raw.createSocket({ protocol: IPPROTO_ICMP });
    s.on('message', (buf: Buffer, source: string) => {
      // IPv4 raw sockets deliver the IP header first.
      const ihl = ((buf[0] ?? 0) & 0x0f) * 4;
      if (buf.length < ihl + 8 || buf[ihl] !== ECHO_REPLY || buf.readUInt16BE(ihl + 4) !== identifier) return;
      const p = pending.get(buf.readUInt16BE(ihl + 6));
      if (p && p.engine === source) p.done({ kind: 'icmp', ok: true, rttMs: performance.now() - p.started });
    });
    // raw-socket emits a failed receive as 'error' and closes the socket: the next probe opens another (kept, every
    // later echo request would fail and every engine turn suspect). Per-probe errors come through send's callback.
    s.on('error', () => {
      if (socket === s) socket = null;
    });
    return s;
  };
  let socket: RawSocket | null;
  try {
    socket = open();
  } catch (e) {
    return { ok: false, reason: `cannot open a raw ICMP socket (needs root or CAP_NET_RAW): ${(e as Error).message}` };
  }
  const probe: Prober = (engine, timeoutMs) =>
    new Promise<ProbeOutcome>((resolve) => {
      sequence = (sequence + 1) & 0xffff;
      const seq = sequence;
      let settled = false;
      const done = (o: ProbeOutcome): void => {
        if (settled) return;
        settled = true;
        disarm();
        pending.delete(seq);
        resolve(o);
      };
      const disarm = probeDeadline(timeoutMs, () =>
        done({ kind: 'icmp', ok: false, detail: `no echo reply in ${formatDuration(timeoutMs)}` }),
      );
      pending.set(seq, { engine, started: performance.now(), done });
      const req = echoRequest(identifier, seq);
      try {
        socket ??= open();
        socket.send(req, 0, req.length, engine, null, (err) => {
          if (err) done({ kind: 'icmp', ok: false, detail: `echo request not sent: ${err.message}` });
        });
      } catch (e) {
        done({ kind: 'icmp', ok: false, detail: `echo request not sent: ${(e as Error).message}` });
      }
    });
  return {
    ok: true,
    prober: {
      probe,
      close: () => {
        for (const p of [...pending.values()]) p.done({ kind: 'icmp', ok: false, detail: 'prober closed' });
        socket?.close();
        socket = null;
      },
    },
  };
}

async function loadRawSocket(): Promise<RawSocketModule> {
  const m = (await import('raw-socket')) as { default?: RawSocketModule } & Partial<RawSocketModule>;
  return m.default ?? (m as RawSocketModule);
}
