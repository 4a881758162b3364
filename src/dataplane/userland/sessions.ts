// The userland backend's packet sessions: a pcap capture per service and client interface (immediate mode, whole
// super-frames), the pcap sessions that only inject L2 frames, and the two raw sockets it sends with (GRE, protocol 47;
// the direct path, IP_HDRINCL with the guard's mark). A failed send is counted and logged, rate-limited per target.
import type { Log } from '../../log.js';
import type { RateLimitedLog } from '../../rate-limited-log.js';
import { DataplaneError } from '../errors.js';
import type { ServiceRedirect } from '../redirector.js';
import type { UserlandCounters } from './counters.js';
import { USERLAND_MARK } from './guard.js';
import type { CaptureSession, CapturedFrame, PacketIo, RawSocket } from './native.js';
import { captureFilter, closeAll, type Plane } from './plane.js';

const IP_PROTOCOL_GRE = 47;
const IP_PROTOCOL_RAW = 255;
const SO_MARK = 36;
/** Matches nothing wccpd sends: the filter of sessions opened only to inject frames. */
const INJECT_ONLY_FILTER = 'ip proto 253';
/** libpcap's largest snapshot: a GRO/GSO super-frame (up to 64 KiB of IP) must be captured whole to be segmented. */
const SNAP_LENGTH = 262_144;

export interface SessionsOptions {
  /** The packet I/O; throws when start() has not loaded it. */
  readonly packets: () => PacketIo;
  /** What a capture does with each frame it sees. */
  readonly onPacket: (serviceId: number, device: string, frame: CapturedFrame) => void;
  readonly counters: UserlandCounters;
  readonly log: Log;
  readonly limited: RateLimitedLog;
}

export class PacketSessions {
  private readonly injectors = new Map<string, CaptureSession>();
  private greSocket: RawSocket | null = null;
  private directSocket: RawSocket | null = null;

  constructor(private readonly o: SessionsOptions) {}

  sendFailed(what: string, to: string, detail: string): void {
    const sendErrors = ++this.o.counters.counts.sendErrors;
    this.o.limited.warn(
      to,
      `userland-send-failed-${what}`,
      { what, to, error: detail, sendErrors },
      `userland could not send a packet (${what}) to ${to}: ${detail}`,
    );
  }

  afterSend(what: string, to: string): (error: Error | null) => void {
    return (error) => {
      if (error !== null) this.sendFailed(what, to, error.message);
    };
  }

  gre(): RawSocket {
    if (this.greSocket === null) {
      const socket = this.o.packets().rawSocket.createSocket({ protocol: IP_PROTOCOL_GRE });
      this.greSocket = this.onSocketError(socket, 'gre', () => {
        if (this.greSocket === socket) this.greSocket = null;
      });
    }
    return this.greSocket;
  }

  direct(): RawSocket {
    if (this.directSocket === null) {
      const raw = this.o.packets().rawSocket;
      const socket = raw.createSocket({ protocol: IP_PROTOCOL_RAW });
      this.directSocket = this.onSocketError(socket, 'direct', () => {
        if (this.directSocket === socket) this.directSocket = null;
      });
      // The guard's output rule tags the conntrack entry of re-sent packets, so later packets of the flow stay ours.
      this.directSocket.setOption(raw.SocketLevel.SOL_SOCKET, SO_MARK, USERLAND_MARK);
    }
    return this.directSocket;
  }

  /**
   * raw-socket emits a failed receive as 'error' (and closes the socket): with no listener that would end the process.
   * Counted as a send error and closed; the next send opens a new socket.
   */
  private onSocketError(socket: RawSocket, what: string, forget: () => void): RawSocket {
    socket.on('error', (e: Error) => {
      forget();
      this.sendFailed(what, 'its raw socket', e.message);
      try {
        socket.close();
      } catch {
        // closed already
      }
    });
    return socket;
  }

  /** A session to inject L2 frames on a device: a capture already open there, or one that captures nothing. */
  injector(device: string, plane: Plane): CaptureSession {
    for (const st of plane.ordered) {
      const c = st.captures.get(device);
      if (c !== undefined) return c;
    }
    let s = this.injectors.get(device);
    if (s === undefined) {
      s = this.o.packets().pcap.createSession(device, { filter: INJECT_ONLY_FILTER, buffer_timeout: 0 });
      this.injectors.set(device, s);
    }
    return s;
  }

  hasInjector(device: string): boolean {
    return this.injectors.has(device);
  }

  /** Closes the injection-only session on `device` and opens another; false when there was none. */
  reopenInjector(device: string, plane: Plane): boolean {
    const injector = this.injectors.get(device);
    if (injector === undefined) return false;
    this.injectors.delete(device);
    injector.close();
    this.injector(device, plane);
    return true;
  }

  openCapture(s: ServiceRedirect, device: string): CaptureSession {
    const session = this.o.packets().pcap.createSession(device, {
      filter: captureFilter(s),
      buffer_timeout: 0,
      snap_length: SNAP_LENGTH,
    });
    session.on('packet', (frame: CapturedFrame) => this.o.onPacket(s.serviceId, device, frame));
    return session;
  }

  /** A capture on each of the service's client interfaces; none left open when one fails. */
  openCaptures(s: ServiceRedirect): Map<string, CaptureSession> {
    const io = this.o.packets();
    const opened = new Map<string, CaptureSession>();
    const filter = captureFilter(s);
    try {
      for (const device of s.clientInterfaces) {
        opened.set(device, this.openCapture(s, device));
        this.o.log.info(
          { dataplane: 'userland', service: s.serviceId, device, filter, native: io.native },
          `userland captures service ${s.serviceId} on ${device} (${filter})`,
        );
      }
    } catch (e) {
      closeAll(opened.values());
      throw new DataplaneError(
        'command-failed',
        `service ${s.serviceId}: cannot capture on ${s.clientInterfaces.join(', ')}: ${(e as Error).message}`,
      );
    }
    return opened;
  }

  /** Closes the injection sessions and both raw sockets (the captures are the plane's). */
  close(): void {
    closeAll(this.injectors.values());
    this.injectors.clear();
    this.greSocket?.close();
    this.directSocket?.close();
    this.greSocket = this.directSocket = null;
  }
}
