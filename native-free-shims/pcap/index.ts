// A pure-TypeScript stand-in for the parts of the `pcap` package wccpd uses: createSession(device, options) returning
// an EventEmitter that emits 'packet' with {buf, header, link_type}, inject(frame), close(), stats().
// Frames travel over an in-process Wire (see ../wire.ts), never the kernel. For tests and for machines where the
// native addon cannot be built; it never sees real traffic.
import { EventEmitter } from 'node:events';
import { compileFilter, type FramePredicate } from './filter.js';
import { defaultWire, type Wire } from '../wire.js';

export { ShimFilterError, compileFilter } from './filter.js';

export type LinkType = 'LINKTYPE_ETHERNET';

export interface PacketWithHeader {
  /** The frame bytes; as with native pcap, read the captured length from header (UInt32LE at offset 8). */
  readonly buf: Buffer;
  /** 16 bytes, as libpcap's pcap_pkthdr on 64-bit Linux as the package exposes it: tv_sec, tv_usec, caplen, len (LE).
   * */
  readonly header: Buffer;
  readonly link_type: LinkType;
}

export interface SessionOptions {
  filter?: string;
  /** Accepted for compatibility; the shim always delivers at once (as immediate mode, buffer_timeout 0). */
  buffer_timeout?: number;
  buffer_size?: number;
  snap_length?: number;
  promiscuous?: boolean;
  monitor?: boolean;
  /** Shim only: the wire to attach to (default: the process-wide one). */
  wire?: Wire;
}

export class ShimPcapSession extends EventEmitter {
  readonly link_type: LinkType = 'LINKTYPE_ETHERNET';
  readonly device_name: string;
  opened = true;
  private readonly wire: Wire;
  private readonly handle: object;
  private readonly snap: number;
  private readonly matches: FramePredicate;
  private received = 0;

  constructor(device: string, options: SessionOptions) {
    super();
    if (device === '') throw new Error('pcap shim: a device name is required (the shim has no default device)');
    this.device_name = device;
    this.wire = options.wire ?? defaultWire;
    this.snap = options.snap_length ?? 65535;
    this.matches = compileFilter(options.filter ?? '');
    this.handle = this.wire.attach(device, (frame) => this.deliver(frame));
  }

  private deliver(frame: Buffer): void {
    if (!this.opened || !this.matches(frame)) return;
    this.received++;
    const caplen = Math.min(frame.length, this.snap);
    const header = Buffer.alloc(16);
    const now = Date.now();
    header.writeUInt32LE(Math.floor(now / 1000), 0);
    header.writeUInt32LE((now % 1000) * 1000, 4);
    header.writeUInt32LE(caplen, 8);
    header.writeUInt32LE(frame.length, 12);
    const packet: PacketWithHeader = { buf: frame.subarray(0, caplen), header, link_type: this.link_type };
    this.emit('packet', packet);
  }

  /** Puts a frame on the device; other sessions on it see it, this one does not (as on Linux). */
  inject(frame: Buffer): void {
    if (!this.opened) throw new Error(`pcap shim: inject on closed session for ${this.device_name}`);
    this.wire.transmit(this.device_name, frame, this.handle);
  }

  stats(): { ps_recv: number; ps_drop: number; ps_ifdrop: number } {
    return { ps_recv: this.received, ps_drop: 0, ps_ifdrop: 0 };
  }

  close(): void {
    this.opened = false;
    this.removeAllListeners();
    this.wire.detach(this.handle);
  }
}

export function createSession(device: string, options: SessionOptions = {}): ShimPcapSession {
  return new ShimPcapSession(device, options);
}
