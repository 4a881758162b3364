// Packet I/O for the userland data plane: the native `pcap` and `raw-socket` addons when they load, otherwise the
// pure-TypeScript shims in native-free-shims/ (which never touch the kernel: with them, nothing is redirected on a
// real network). loadPacketIo() says which it chose and why, so the daemon can log it.
import type { EventEmitter } from 'node:events';
import * as pcapShim from '../../../native-free-shims/pcap/index.js';
import * as rawSocketShim from '../../../native-free-shims/raw-socket/index.js';

/** One captured frame: read its length from header (UInt32LE at offset 8); `buf` may be longer (native reuses it). */
export interface CapturedFrame {
  readonly buf: Buffer;
  readonly header: Buffer;
}

export interface CaptureOptions {
  filter?: string;
  /** 0 = immediate mode; the native default (1000 ms) delays packets by up to a second. */
  buffer_timeout?: number;
  buffer_size?: number;
  snap_length?: number;
  promiscuous?: boolean;
}

export interface CaptureSession extends EventEmitter {
  inject(frame: Buffer): void;
  close(): void;
}

export interface PcapApi {
  createSession(device: string, options: CaptureOptions): CaptureSession;
}

export interface RawSocket extends EventEmitter {
  send(
    buffer: Buffer,
    offset: number,
    length: number,
    address: string,
    beforeCallback: (() => void) | null,
    afterCallback: (error: Error | null, bytes: number) => void,
  ): unknown;
  setOption(level: number, option: number, value: number | Buffer, length?: number): void;
  close(): unknown;
}

export interface RawSocketApi {
  createSocket(options: { protocol?: number; addressFamily?: number; bufferSize?: number }): RawSocket;
  readonly SocketLevel: { readonly SOL_SOCKET: number; readonly IPPROTO_IP: number };
  readonly SocketOption: Readonly<Record<string, number>>;
}

export interface PacketIo {
  readonly pcap: PcapApi;
  readonly rawSocket: RawSocketApi;
  /** True when these are the native addons (real packets); false for the in-process shims. */
  readonly native: boolean;
  /** Why this choice, in words for the log. */
  readonly reason: string;
}

export const shimPacketIo = (reason: string): PacketIo => ({
  pcap: pcapShim,
  rawSocket: rawSocketShim,
  native: false,
  reason,
});

// Known limit of the native package: close() only breaks libpcap's loop and the poll handle is released at the next
// dispatch that sees a packet, so a closed idle session keeps Node's event loop alive until a matching packet arrives
// (one more dispatch right after close() returns 0 and does not release it: tried). The daemon exits explicitly.

async function importCommonJs(name: string): Promise<Record<string, unknown>> {
  const m = (await import(name)) as { default?: Record<string, unknown> } & Record<string, unknown>;
  return m.default ?? m;
}

/**
 * The native addons if both load (or `prefer: 'shims'` for tests), the shims otherwise. Never throws.
 */
export async function loadPacketIo(options: { prefer?: 'native' | 'shims' } = {}): Promise<PacketIo> {
  if (options.prefer === 'shims') return shimPacketIo('shims requested');
  const failures: string[] = [];
  let pcap: Record<string, unknown> | null = null;
  let raw: Record<string, unknown> | null = null;
  try {
    pcap = await importCommonJs('pcap');
    if (typeof pcap.createSession !== 'function') {
      failures.push('pcap: no createSession export');
      pcap = null;
    }
  } catch (e) {
    failures.push(`pcap: ${(e as Error).message.split('\n')[0]}`);
  }
  try {
    raw = await importCommonJs('raw-socket');
    if (typeof raw.createSocket !== 'function') {
      failures.push('raw-socket: no createSocket export');
      raw = null;
    }
  } catch (e) {
    failures.push(`raw-socket: ${(e as Error).message.split('\n')[0]}`);
  }
  if (pcap === null || raw === null) {
    return shimPacketIo(
      `native packet I/O unavailable (${failures.join('; ')}); using the in-process shims, ` +
        'which redirect nothing on a real network',
    );
  }
  return {
    pcap: pcap as unknown as PcapApi,
    rawSocket: raw as unknown as RawSocketApi,
    native: true,
    reason: 'native pcap and raw-socket addons loaded',
  };
}
