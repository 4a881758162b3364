// Test helpers: packet I/O bound to a private shim Wire, Ethernet frames around B's IPv4/TCP builder, a recording
// guard.
import { Wire } from '../../native-free-shims/wire.js';
import * as pcapShim from '../../native-free-shims/pcap/index.js';
import * as rawShim from '../../native-free-shims/raw-socket/index.js';
import type { PacketIo } from '../../src/dataplane/userland/native.js';
import type { GuardedService, KernelGuard } from '../../src/dataplane/userland/guard.js';
import { encodeIpv4Tcp, type Ipv4TcpOptions } from '../../src/wire/gre.js';

export function shimIo(wire: Wire): PacketIo {
  return {
    pcap: { createSession: (device, options) => pcapShim.createSession(device, { ...options, wire }) },
    rawSocket: {
      SocketLevel: rawShim.SocketLevel,
      SocketOption: rawShim.SocketOption,
      createSocket: (options) => rawShim.createSocket({ ...options, wire }),
    },
    native: false,
    reason: 'test wire',
  };
}

/** `io` whose raw-socket sends all fail (ENOBUFS, as a full socket buffer makes them), after the send returns. */
export function failingSends(io: PacketIo): PacketIo {
  return {
    ...io,
    rawSocket: {
      ...io.rawSocket,
      createSocket: (o) =>
        Object.assign(io.rawSocket.createSocket(o), {
          send: (
            _b: Buffer,
            _o: number,
            _l: number,
            _a: string,
            _before: unknown,
            after: (e: Error | null, n: number) => void,
          ) => setImmediate(() => after(new Error('ENOBUFS: no buffer space available'), 0)),
        }),
    },
  };
}

export const CLIENT_MAC = '02:00:00:00:00:0a';
export const GW_MAC = '02:00:00:00:00:01';

export function macBytes(mac: string): Buffer {
  return Buffer.from(mac.split(':').map((x) => parseInt(x, 16)));
}

export function ethernet(ip: Buffer, dst = GW_MAC, src = CLIENT_MAC): Buffer {
  const h = Buffer.alloc(14);
  macBytes(dst).copy(h, 0);
  macBytes(src).copy(h, 6);
  h.writeUInt16BE(0x0800, 12);
  return Buffer.concat([h, ip]);
}

export const tcpFrame = (o: Ipv4TcpOptions): { frame: Buffer; ip: Buffer } => {
  const ip = encodeIpv4Tcp(o);
  return { frame: ethernet(ip), ip };
};

export class RecordingGuard implements KernelGuard {
  installs: GuardedService[][] = [];
  removed = 0;
  failNext = false;
  async install(services: readonly GuardedService[]): Promise<void> {
    if (this.failNext) {
      this.failNext = false;
      throw new Error('nft: simulated failure');
    }
    this.installs.push([...services]);
  }
  async remove(): Promise<void> {
    this.removed++;
  }
  /** The mode of a service in the last install, or 'absent'. */
  modeOf(serviceId: number): string {
    const last = this.installs.at(-1) ?? [];
    return last.find((g) => g.service.serviceId === serviceId)?.mode ?? 'absent';
  }
}

/** Lets setImmediate callbacks (shim send completions) run. */
export const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
