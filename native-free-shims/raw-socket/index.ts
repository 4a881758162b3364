// A pure-TypeScript stand-in for the parts of the `raw-socket` package wccpd uses: createSocket({protocol}),
// send(buffer, offset, length, address, before, after), 'message' events (the whole IPv4 datagram and its source),
// setOption/getOption, pauseRecv/resumeRecv, close, and the constants. Datagrams travel over an in-process Wire.
// Protocol 255 (or IP_HDRINCL set) sends the buffer as a whole IPv4 datagram; any other protocol gets an IPv4 header
// built here, with the wire's local address as source.
import { EventEmitter } from 'node:events';
import { isIPv4 } from 'node:net';
import { defaultWire, type Wire } from '../wire.js';

export const AddressFamily = { IPv4: 1, IPv6: 2 } as const;
export const Protocol = { None: 0, ICMP: 1, TCP: 6, UDP: 17, ICMPv6: 58 } as const;
export const SocketLevel = { SOL_SOCKET: 1, IPPROTO_IP: 0, IPPROTO_IPV6: 41 } as const;
export const SocketOption: Record<string, number> = {
  SO_BROADCAST: 6,
  SO_RCVBUF: 8,
  SO_RCVTIMEO: 20,
  SO_SNDBUF: 7,
  SO_SNDTIMEO: 21,
  SO_BINDTODEVICE: 25,
  IP_HDRINCL: 3,
  IP_OPTIONS: 4,
  IP_TOS: 1,
  IP_TTL: 2,
  IPV6_TTL: 16,
  IPV6_UNICAST_HOPS: 16,
  IPV6_V6ONLY: 26,
};

export interface SocketOptions {
  addressFamily?: number;
  protocol?: number;
  bufferSize?: number;
  /** Shim only: the wire to send on (default: the process-wide one). */
  wire?: Wire;
}

/** The internet checksum (RFC 1071) over the given buffers, as the package's createChecksum. */
export function createChecksum(...buffers: Array<Buffer | { buffer: Buffer; offset: number; length: number }>): number {
  let sum = 0;
  for (const b of buffers) {
    const buf = Buffer.isBuffer(b) ? b : b.buffer.subarray(b.offset, b.offset + b.length);
    for (let i = 0; i < buf.length; i += 2) sum += ((buf[i] ?? 0) << 8) + (buf[i + 1] ?? 0);
  }
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

export function writeChecksum(buffer: Buffer, offset: number, checksum: number): Buffer {
  buffer.writeUInt16BE(checksum, offset);
  return buffer;
}

export const htons = (n: number): number => ((n & 0xff) << 8) | ((n >> 8) & 0xff);
export const ntohs = htons;
export const htonl = (n: number): number => Buffer.from(Uint32Array.of(n).buffer).readUInt32BE(0);
export const ntohl = htonl;

let nextId = 1;

export class ShimSocket extends EventEmitter {
  readonly protocol: number;
  private readonly wire: Wire;
  private readonly handle: object;
  private readonly options = new Map<string, number | Buffer>();
  private paused = false;
  private closed = false;

  constructor(options: SocketOptions) {
    super();
    if ((options.addressFamily ?? AddressFamily.IPv4) !== AddressFamily.IPv4) {
      throw new Error('raw-socket shim: only AddressFamily.IPv4 is supported');
    }
    this.protocol = options.protocol ?? 0;
    this.wire = options.wire ?? defaultWire;
    this.handle = this.wire.attachRaw(this.protocol, (packet, source) => {
      if (!this.paused && !this.closed) this.emit('message', packet, source);
    });
  }

  private headerIncluded(): boolean {
    const v = this.options.get(`${SocketLevel.IPPROTO_IP}:${SocketOption.IP_HDRINCL}`);
    return this.protocol === 255 || (typeof v === 'number' && v !== 0);
  }

  send(
    buffer: Buffer,
    offset: number,
    length: number,
    address: string,
    beforeCallback: ((this: ShimSocket) => void) | null,
    afterCallback: (error: Error | null, bytes: number) => void,
  ): this {
    const done = (error: Error | null, bytes: number): void => {
      setImmediate(() => afterCallback.call(this, error, bytes));
    };
    if (this.closed) {
      done(new Error('raw-socket shim: socket is closed'), 0);
      return this;
    }
    if (offset + length > buffer.length) {
      done(
        new Error(
          `Buffer length '${buffer.length}' is not large enough for offset '${offset}' plus length '${length}'`,
        ),
        0,
      );
      return this;
    }
    if (!isIPv4(address)) {
      done(new Error(`Invalid IP address '${address}'`), 0);
      return this;
    }
    beforeCallback?.call(this);
    const payload = buffer.subarray(offset, offset + length);
    const packet = this.headerIncluded() ? Buffer.from(payload) : this.wrap(payload, address);
    this.wire.route(packet, this.handle);
    done(null, length);
    return this;
  }

  private wrap(payload: Buffer, address: string): Buffer {
    const h = Buffer.alloc(20);
    h[0] = 0x45;
    h.writeUInt16BE(20 + payload.length, 2);
    h.writeUInt16BE(nextId++ & 0xffff, 4);
    h.writeUInt16BE(0x4000, 6); // DF, as Linux sets for raw sockets with PMTU discovery
    h[8] = 64;
    h[9] = this.protocol;
    Buffer.from(this.wire.localAddress.split('.').map(Number)).copy(h, 12);
    Buffer.from(address.split('.').map(Number)).copy(h, 16);
    writeChecksum(h, 10, createChecksum(h));
    return Buffer.concat([h, payload]);
  }

  setOption(level: number, option: number, value: number | Buffer, _length?: number): void {
    this.options.set(`${level}:${option}`, value);
  }

  getOption(level: number, option: number, buffer: Buffer, length: number): number {
    const v = this.options.get(`${level}:${option}`);
    if (v === undefined) return 0;
    if (typeof v === 'number') {
      buffer.writeUInt32LE(v >>> 0, 0);
      return Math.min(4, length);
    }
    return v.copy(buffer, 0, 0, Math.min(v.length, length));
  }

  pauseRecv(): this {
    this.paused = true;
    return this;
  }
  resumeRecv(): this {
    this.paused = false;
    return this;
  }

  close(): this {
    if (!this.closed) {
      this.closed = true;
      this.wire.detach(this.handle);
      setImmediate(() => this.emit('close'));
    }
    return this;
  }
}

export function createSocket(options: SocketOptions = {}): ShimSocket {
  return new ShimSocket(options);
}
