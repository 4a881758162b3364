// The in-process "network" the shims share: frames sent on a device name reach every pcap shim session on that device
// (except the one that injected them, as AF_PACKET does), and IPv4 datagrams sent by a raw-socket shim reach every
// other raw-socket shim of that protocol. Nothing here touches the kernel.

export type FrameListener = (frame: Buffer) => void;
export type DatagramListener = (packet: Buffer, source: string) => void;

export interface WireOptions {
  /** The source address raw-socket shims put in the IPv4 header they build (protocols other than 255). */
  readonly localAddress?: string;
}

interface Tap {
  readonly device: string;
  readonly listener: FrameListener;
}

interface RawTap {
  readonly protocol: number;
  readonly listener: DatagramListener;
}

export class Wire {
  readonly localAddress: string;
  private readonly taps = new Set<Tap>();
  private readonly rawTaps = new Set<RawTap>();

  constructor(options: WireOptions = {}) {
    this.localAddress = options.localAddress ?? '192.0.2.1';
  }

  /** Listens for frames on a device; returns the handle to pass to transmit()/detach(). */
  attach(device: string, listener: FrameListener): object {
    const tap: Tap = { device, listener };
    this.taps.add(tap);
    return tap;
  }

  detach(handle: object): void {
    this.taps.delete(handle as Tap);
    this.rawTaps.delete(handle as RawTap);
  }

  /** Puts a frame on a device: every tap on it except `from` gets its own copy. */
  transmit(device: string, frame: Buffer, from?: object): number {
    let delivered = 0;
    for (const tap of [...this.taps]) {
      if (tap === from || tap.device !== device) continue;
      tap.listener(Buffer.from(frame));
      delivered++;
    }
    return delivered;
  }

  /** Listens for IPv4 datagrams of one IP protocol (255 = all), as a raw socket does. */
  attachRaw(protocol: number, listener: DatagramListener): object {
    const tap: RawTap = { protocol, listener };
    this.rawTaps.add(tap);
    return tap;
  }

  /** Delivers a whole IPv4 datagram to every raw tap of its protocol except `from`. */
  route(packet: Buffer, from?: object): number {
    const protocol = packet[9] ?? -1;
    const source = packet.length >= 20 ? [12, 13, 14, 15].map((i) => packet[i]).join('.') : '0.0.0.0';
    let delivered = 0;
    for (const tap of [...this.rawTaps]) {
      if (tap === from || (tap.protocol !== protocol && tap.protocol !== 255)) continue;
      tap.listener(Buffer.from(packet), source);
      delivered++;
    }
    return delivered;
  }

  /** Number of live taps (sessions and sockets): tests use it to check that everything was closed. */
  get openTaps(): number {
    return this.taps.size + this.rawTaps.size;
  }
}

/** The wire the shims use when none is given: one per process. */
export const defaultWire = new Wire();
