// The WCCP router's UDP endpoint: receives HERE_I_AM and REDIRECT_ASSIGN, checks the allowlist, decodes, verifies
// MD5, hands the message to the cluster and answers every valid HERE_I_AM at once with a unicast I_SEE_YOU. Sends
// REMOVAL_QUERY when the cluster says one is due. Never throws on input: every drop is counted by kind.
import { createSocket } from 'node:dgram';
import type { RemoteInfo, Socket } from 'node:dgram';
import {
  decodeMessage,
  encodeMessage,
  findComponent,
  verifyMessage,
  formatDecodeError,
  WCCP2_PORT,
} from '../wire/wccp2/index.js';
import type { Wccp2Message } from '../wire/wccp2/index.js';
import { MAX_ENGINES } from '../cluster/index.js';
import type { Cluster, Clock, RemovalQueryPlan } from '../cluster/index.js';
import type { Log } from '../log.js';
import { allowlist } from './allowlist.js';
import type { Allowlist } from './allowlist.js';
import { RateLimitedLog } from '../rate-limited-log.js';
import { rmemMax, udpDrops, WCCP_RECEIVE_BUFFER_BYTES } from './udp-socket.js';
import { iSeeYouMessage, removalQueryMessage, serviceIdOf, toHereIAm, toRedirectAssign } from './translate.js';
import type { Quirk } from '../vocabulary.js';

export interface RouterServiceOptions {
  readonly id: number;
  /** MD5 security password (at most 8 characters); absent = no security. */
  readonly password?: string;
  /** Engine addresses/CIDRs accepted; absent or empty = any. */
  readonly allow?: readonly string[];
  /** Opt-in encodings for broken engines (config `quirks`); never on by default. */
  readonly quirks?: readonly Quirk[];
}

export interface RouterOptions {
  readonly address: string;
  readonly port: number;
  /** Bind address when it differs from the router address (tests). */
  readonly bindAddress?: string;
  readonly services: readonly RouterServiceOptions[];
  readonly cluster: Cluster;
  readonly log: Log;
  readonly clock: Clock;
  /** Called after every datagram the cluster saw, so timers can be re-armed. */
  readonly onActivity?: () => void;
  readonly logIntervalMs?: number;
  /** The socket's receive buffer to ask for (tests); default WCCP_RECEIVE_BUFFER_BYTES. */
  readonly receiveBufferBytes?: number;
  /** Where the socket's drops are read (tests); default PROC_NET_UDP. */
  readonly procNetUdp?: string;
}

export interface RouterCounters {
  readonly received: number;
  readonly sent: number;
  readonly sendErrors: number;
  /** Datagrams dropped, by reason (not-allowed, decode-<reason>, auth-failure, ...). */
  readonly dropped: Readonly<Record<string, number>>;
  readonly byType: Readonly<Record<string, number>>;
}

export class WccpRouter {
  private socket: Socket | null = null;
  private readonly services = new Map<number, { password?: string; allow: Allowlist; quirks: readonly Quirk[] }>();
  private anyAllow: Allowlist[] = [];
  private readonly rateLog: RateLimitedLog;
  /**
   * The source port each engine last used, for REMOVAL_QUERY. Engines that are gone are dropped whenever it reaches
   * portsBound (twice the engines the groups can hold at once), so engines that come and go for weeks, or sources
   * forged inside engines.allow, cannot grow it.
   */
  private readonly enginePorts = new Map<string, number>();
  private portsBound = 0;
  private received = 0;
  private sent = 0;
  private sendErrors = 0;
  /** The last read of the socket's drops failed (logged once). */
  private dropsUnknown = false;
  private readonly dropped: Record<string, number> = {};
  private readonly byType: Record<string, number> = {};

  constructor(private readonly options: RouterOptions) {
    this.setServices(options.services);
    this.rateLog = new RateLimitedLog(options.log, options.clock, options.logIntervalMs ?? 10_000);
  }

  /**
   * The services' passwords, allowlists and quirks: the config's, then a reload's. The next datagram is checked by
   * them; a service no longer listed is dropped as unknown to the cluster.
   */
  setServices(services: readonly RouterServiceOptions[]): void {
    this.services.clear();
    for (const s of services) {
      this.services.set(s.id, {
        ...(s.password ? { password: s.password } : {}),
        allow: allowlist(s.allow),
        quirks: s.quirks ?? [],
      });
    }
    this.anyAllow = [...this.services.values()].map((s) => s.allow);
    this.portsBound = 2 * MAX_ENGINES * Math.max(1, this.services.size);
  }

  /** Binds the UDP socket; rejects with the OS error (e.g. EADDRINUSE) naming the address. */
  async start(): Promise<void> {
    const asked = this.options.receiveBufferBytes ?? WCCP_RECEIVE_BUFFER_BYTES;
    const socket = createSocket({ type: 'udp4', reuseAddr: false, recvBufferSize: asked });
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) =>
        reject(new Error(`cannot bind WCCP UDP ${this.bindAddress()}:${this.options.port}: ${err.message}`));
      socket.once('error', onError);
      socket.bind(this.options.port, this.bindAddress(), () => {
        socket.off('error', onError);
        resolve();
      });
    });
    socket.on('error', (err) => this.options.log.error({ err: err.message }, 'WCCP socket error'));
    socket.on('message', (buf, rinfo) => this.handle(buf, rinfo));
    this.socket = socket;
    this.logReceiveBuffer(asked, socket.getRecvBufferSize());
  }

  /** Linux reports twice the size asked (the other half is its bookkeeping); less means net.core.rmem_max capped it. */
  private logReceiveBuffer(asked: number, reported: number): void {
    const { log } = this.options;
    if (reported >= 2 * asked) {
      log.info({ receiveBuffer: asked, reported }, `WCCP socket receive buffer ${asked} bytes`);
      return;
    }
    const max = rmemMax();
    log.warn(
      { receiveBuffer: reported / 2, asked, rmemMax: max },
      `WCCP socket receive buffer ${reported / 2} bytes, not the ${asked} asked: net.core.rmem_max ` +
        `(${max ?? 'unreadable'}) caps it, and a flood of datagrams overflows it sooner (the kernel drops them: ` +
        `wccpd_wccp_socket_drops_total); raise it with sysctl net.core.rmem_max=${asked}`,
    );
  }

  /** The receive buffer the kernel reports for the socket (twice what it keeps for data), or null before start. */
  receiveBuffer(): number | null {
    return this.socket?.getRecvBufferSize() ?? null;
  }

  /**
   * Datagrams the kernel dropped on this socket (its receive buffer full), from /proc/net/udp; null if unknown (before
   * start, or the file unreadable: logged once until it reads again, and no sample in /metrics rather than a 0).
   */
  socketDrops(): number | null {
    if (!this.socket) return null;
    const d = udpDrops(this.bindAddress(), this.port(), this.options.procNetUdp);
    if (typeof d === 'number') {
      this.dropsUnknown = false;
      return d;
    }
    if (!this.dropsUnknown)
      this.options.log.warn(
        { err: d.unknown },
        `the kernel's drops on the WCCP socket cannot be read (${d.unknown}): wccpd_wccp_socket_drops_total is left ` +
          'out of /metrics and status shows kernelDrops null until they can',
      );
    this.dropsUnknown = true;
    return null;
  }

  private bindAddress(): string {
    return this.options.bindAddress ?? this.options.address;
  }

  /** The bound port (useful with port 0). */
  port(): number {
    return this.socket?.address().port ?? this.options.port;
  }

  async stop(): Promise<void> {
    const s = this.socket;
    this.socket = null;
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  counters(): RouterCounters {
    return {
      received: this.received,
      sent: this.sent,
      sendErrors: this.sendErrors,
      dropped: { ...this.dropped },
      byType: { ...this.byType },
    };
  }

  private drop(source: string, reason: string, detail: string, extra: object = {}): void {
    this.dropped[reason] = (this.dropped[reason] ?? 0) + 1;
    this.rateLog.warn(source, reason, { detail, ...extra }, `WCCP datagram from ${source} dropped: ${reason}`);
  }

  /** Handles one datagram. Public so tests can drive it without a socket. */
  handle(buf: Buffer, rinfo: Pick<RemoteInfo, 'address' | 'port'>): void {
    this.received++;
    const source = rinfo.address;
    try {
      // Nothing can be sent to port 0 (an I_SEE_YOU or REMOVAL_QUERY would throw), and engines send from 2048.
      if (!validPort(rinfo.port))
        return this.drop(source, 'source-port-0', `UDP source port ${rinfo.port} cannot be answered`);
      if (!this.anyAllow.some((a) => a.allows(source)))
        return this.drop(source, 'not-allowed', "source is outside every service's engines.allow");
      const decoded = decodeMessage(buf);
      if (!decoded.ok) return this.drop(source, `decode-${decoded.error.reason}`, formatDecodeError(decoded.error));
      const msg = decoded.value;
      this.byType[msg.type] = (this.byType[msg.type] ?? 0) + 1;
      const serviceId = serviceIdOf(msg);
      const service = serviceId === null ? undefined : this.services.get(serviceId);
      if (serviceId === null || !service)
        return this.drop(source, 'unknown-service', `service ${serviceId ?? '?'} is not configured`);
      if (!service.allow.allows(source))
        return this.drop(source, 'not-allowed', `source is outside engines.allow of service ${serviceId}`);
      if (!this.authentic(msg, buf, service.password, serviceId, source)) return;
      if (msg.type === 'HERE_I_AM') this.hereIAm(msg, rinfo, serviceId, service.password);
      else if (msg.type === 'REDIRECT_ASSIGN') this.redirectAssign(msg, source);
      else this.drop(source, 'unexpected-message', `${msg.type} is sent by routers, not to them`);
      this.options.onActivity?.();
    } catch (err) {
      this.drop(source, 'internal-error', err instanceof Error ? err.message : String(err));
    }
  }

  private authentic(
    msg: Wccp2Message,
    buf: Buffer,
    password: string | undefined,
    serviceId: number,
    source: string,
  ): boolean {
    const security = findComponent(msg, 'security');
    if (password === undefined) {
      if (security?.option === 'md5') {
        this.drop(source, 'security-mismatch', `service ${serviceId} has no password but the message is MD5-signed`);
        return false;
      }
      return true;
    }
    if (security?.option !== 'md5' || !verifyMessage(buf, password)) {
      this.options.cluster.authFailure(serviceId);
      this.drop(
        source,
        'auth-failure',
        security?.option !== 'md5'
          ? `service ${serviceId} requires MD5 security; the message has none`
          : `MD5 digest does not match the password of service ${serviceId}`,
      );
      return false;
    }
    return true;
  }

  private hereIAm(
    msg: Wccp2Message,
    rinfo: Pick<RemoteInfo, 'address' | 'port'>,
    serviceId: number,
    password: string | undefined,
  ): void {
    const t = toHereIAm(msg, this.options.address);
    if (!t.ok) return this.drop(rinfo.address, t.reason, t.detail);
    if (t.value.engine !== rinfo.address) {
      return this.drop(
        rinfo.address,
        'identity-mismatch',
        `Web-Cache Identity says ${t.value.engine} but the datagram came from ${rinfo.address}`,
      );
    }
    const outcome = this.options.cluster.hereIAm(t.value);
    if (outcome.kind === 'stale') {
      this.drop(rinfo.address, 'stale-receive-id', outcome.reason, { service: serviceId });
      if (!outcome.answer) return;
      const plan = this.options.cluster.iSeeYou(serviceId, t.value.engine, 'stale');
      if (plan)
        this.send(
          iSeeYouMessage(plan, { md5: password !== undefined, quirks: this.services.get(serviceId)?.quirks ?? [] }),
          password,
          rinfo.address,
          rinfo.port,
        );
      return;
    }
    if (outcome.kind === 'refused') {
      this.rateLog.warn(
        rinfo.address,
        outcome.counter,
        { service: serviceId, detail: outcome.reason },
        `HERE_I_AM from ${rinfo.address} refused: ${outcome.reason}`,
      );
      if (!outcome.answer) {
        this.dropped[outcome.counter] = (this.dropped[outcome.counter] ?? 0) + 1;
        return;
      }
    }
    this.rememberPort(rinfo.address, rinfo.port);
    const plan = this.options.cluster.iSeeYou(serviceId, t.value.engine);
    if (!plan) return;
    const reply = iSeeYouMessage(plan, {
      md5: password !== undefined,
      shutdownResponse: outcome.kind === 'answer' && outcome.shutdownResponse,
      quirks: this.services.get(serviceId)?.quirks ?? [],
    });
    this.send(reply, password, rinfo.address, rinfo.port);
  }

  private rememberPort(engine: string, port: number): void {
    if (!this.enginePorts.has(engine) && this.enginePorts.size >= this.portsBound) {
      const present = new Set(this.options.cluster.probeTargets());
      for (const known of this.enginePorts.keys()) if (!present.has(known)) this.enginePorts.delete(known);
    }
    this.enginePorts.set(engine, port);
  }

  /** How many engines' source ports are remembered (bounded: see enginePorts). */
  trackedEngines(): number {
    return this.enginePorts.size;
  }

  private redirectAssign(msg: Wccp2Message, source: string): void {
    const t = toRedirectAssign(msg, source);
    if (!t.ok) return this.drop(source, t.reason, t.detail);
    const verdict = this.options.cluster.redirectAssign(t.value);
    if (!verdict.accepted)
      this.rateLog.warn(
        source,
        'redirect-assign-ignored',
        { service: t.value.serviceId, detail: verdict.reason },
        `REDIRECT_ASSIGN from ${source} ignored: ${verdict.reason}`,
      );
  }

  /** Sends the REMOVAL_QUERYs the cluster's timers produced. */
  sendRemovalQueries(plans: readonly RemovalQueryPlan[]): void {
    for (const plan of plans) {
      const password = this.services.get(plan.service.id)?.password;
      this.send(
        removalQueryMessage(plan, { md5: password !== undefined }),
        password,
        plan.engine,
        this.enginePorts.get(plan.engine) ?? WCCP2_PORT,
      );
      this.options.log.info({ service: plan.service.id, engine: plan.engine }, `REMOVAL_QUERY sent to ${plan.engine}`);
    }
  }

  /** Never throws: runs from the socket's and the timers' callbacks, where a throw would end the process. */
  private send(msg: Wccp2Message, password: string | undefined, address: string, port: number): void {
    const s = this.socket;
    if (!s) return;
    const failed = (err: unknown): void => {
      this.sendErrors++;
      const detail = err instanceof Error ? err.message : String(err);
      this.rateLog.warn(address, 'send-error', { err: detail }, `cannot send ${msg.type} to ${address}:${port}`);
    };
    try {
      if (!validPort(port)) throw new Error(`port ${port} is not a UDP port a message can be sent to`);
      const bytes = encodeMessage(msg, password !== undefined ? { password } : {});
      s.send(bytes, port, address, (err) => {
        if (err) failed(err);
        else this.sent++;
      });
    } catch (err) {
      failed(err);
    }
  }
}

function validPort(port: number): boolean {
  return Number.isInteger(port) && port > 0 && port <= 0xffff;
}
