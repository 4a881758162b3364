// Sends UDP datagrams with a source address and port of the test's choosing, source port 0 and a spoofed engine's
// address included, through an IPPROTO_RAW socket (the IP header is ours) of the native `raw-socket` package. Needs
// root. For tests that play a hostile host on loopback or in a namespace the test made.
import { createRequire } from 'node:module';
import { isIPv4 } from 'node:net';

interface RawSocket {
  send(
    buffer: Buffer,
    offset: number,
    length: number,
    address: string,
    after: (error: Error | null, bytes: number) => void,
  ): void;
  close(): void;
  on(event: 'error', listener: (e: Error) => void): void;
}
interface RawSocketModule {
  createSocket(options: { protocol: number }): RawSocket;
}

/** IPPROTO_RAW: the kernel takes our IP header as it is (IP_HDRINCL), filling in the checksum and total length. */
const IPPROTO_RAW = 255;
const IPPROTO_UDP = 17;

export interface RawDatagram {
  readonly source: string;
  /** 0..65535; 0 is what an ordinary socket can never send from. */
  readonly sourcePort: number;
  readonly destination: string;
  readonly destinationPort: number;
  readonly payload: Buffer;
}

/** IPv4 header + UDP header (checksum 0: none, which IPv4 allows) + payload. */
export function rawUdpPacket(d: RawDatagram): Buffer {
  if (!isIPv4(d.source) || !isIPv4(d.destination))
    throw new Error(`raw-udp: IPv4 only (${d.source} -> ${d.destination})`);
  const udpLength = 8 + d.payload.length;
  if (udpLength > 65_507) throw new Error(`raw-udp: payload of ${d.payload.length} bytes does not fit a datagram`);
  const packet = Buffer.alloc(20 + udpLength);
  packet[0] = 0x45; // version 4, 5 words of header
  packet.writeUInt16BE(20 + udpLength, 2);
  packet[8] = 64; // TTL
  packet[9] = IPPROTO_UDP;
  d.source.split('.').forEach((o, i) => (packet[12 + i] = Number(o)));
  d.destination.split('.').forEach((o, i) => (packet[16 + i] = Number(o)));
  packet.writeUInt16BE(d.sourcePort, 20);
  packet.writeUInt16BE(d.destinationPort, 22);
  packet.writeUInt16BE(udpLength, 24);
  d.payload.copy(packet, 28);
  return packet;
}

/** One raw socket for many datagrams; close() when done. Throws at open when the addon or root is missing. */
export class RawUdpSender {
  private readonly socket: RawSocket;
  private failure: Error | null = null;

  constructor() {
    const raw = createRequire(import.meta.url)('raw-socket') as RawSocketModule;
    this.socket = raw.createSocket({ protocol: IPPROTO_RAW });
    this.socket.on('error', (e) => (this.failure = e));
  }

  /** Resolves once the kernel took the packet; rejects with the send's error. */
  send(d: RawDatagram): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const packet = rawUdpPacket(d);
    return new Promise((resolve, reject) => {
      this.socket.send(packet, 0, packet.length, d.destination, (error) => (error ? reject(error) : resolve()));
    });
  }

  close(): void {
    this.socket.close();
  }
}
