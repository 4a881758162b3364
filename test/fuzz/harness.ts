// The real daemon under a hostile host's hands, on loopback: wccpd (data plane none) with an MD5-secured service 0
// and the warm-up broker, two strict engines holding the table (B warming from A), and A's cache played by a fake
// source that answers every ICP query HIT and every relayed request with whatever answer the test queued. Helpers
// send datagrams from ordinary sockets and from a raw socket (any source address and port, 0 included), paced so the
// daemon's counters can be checked against what was sent, and play malformed HTTP exchanges over raw TCP.
// Used by test/fuzz/sockets.test.ts and bench/soak/hostile.ts.
import { createSocket } from 'node:dgram';
import type { Socket } from 'node:dgram';
import { connect, createServer } from 'node:net';
import type { Server, Socket as TcpSocket } from 'node:net';
import { readFileSync } from 'node:fs';
import { decodeIcp, encodeIcp } from '../../src/wire/icp.js';
import type { StatusView } from '../../src/admin/api-types.js';
import { freeTcpPort, freeUdpPort, startDaemon, waitFor } from '../helpers/daemon.js';
import type { RunningDaemon } from '../helpers/daemon.js';
import { RawUdpSender } from '../helpers/raw-udp.js';
import { TestEngine } from '../helpers/wccp-engine.js';

/** The MD5 password of the Squid 5.7 fixture (test/fixtures/squid-5.7-md5): its datagrams are signed with it. */
export const PASSWORD = 'wccpsec1';
/** Engine A holds the table first; B joins after and warms from A. */
export const A = '127.0.0.11';
export const B = '127.0.0.12';
/** Inside engines.allow (127.0.0.0/25), never an engine. */
export const STRANGER = '127.0.0.50';
/** Outside engines.allow. */
export const OUTSIDER = '127.0.0.200';

/** A's cache as the broker sees it: ICP says HIT to everything; HTTP answers with the queued bytes (or a fine 200). */
export class FakeSource {
  private icp: Socket | null = null;
  private http: Server | null = null;
  private readonly sockets = new Set<TcpSocket>();
  /** The answer to a request for a URL (else a fine 200), taken once. */
  readonly answers = new Map<string, Buffer>();
  requests = 0;
  /** Relayed GETs and HEADs that declared a body (the broker must refuse them: issue 30). */
  bodiesRelayed = 0;
  constructor(readonly address: string) {}

  async start(icpPort: number, httpPort: number): Promise<void> {
    const icp = createSocket('udp4');
    icp.on('message', (buf, r) => {
      const d = decodeIcp(buf);
      if (!d.ok || d.value.opcode !== 'QUERY') return;
      const reply = encodeIcp({
        opcode: 'HIT',
        requestNumber: d.value.requestNumber,
        options: 0,
        optionData: 0,
        senderAddress: this.address,
        url: d.value.url,
      });
      icp.send(reply, r.port, r.address);
    });
    await new Promise<void>((r) => icp.bind(icpPort, this.address, () => r()));
    this.icp = icp;
    const http = createServer((socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
      socket.on('error', () => undefined);
      let seen = '';
      socket.on('data', (chunk: Buffer) => {
        seen += chunk.toString('latin1');
        // One answer per request head; the connection is closed after it, so no answer can be read as the next.
        if (!seen.includes('\r\n\r\n')) return;
        const url = /^[A-Z]+ (\S+)/.exec(seen)?.[1] ?? '';
        const head = seen.slice(0, seen.indexOf('\r\n\r\n') + 2);
        if (/^(GET|HEAD) /.test(head) && /\r\n(content-length: *0*[1-9]|transfer-encoding:)/i.test(head))
          this.bodiesRelayed++;
        seen = '';
        this.requests++;
        const answer =
          this.answers.get(url) ?? Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nwarm');
        this.answers.delete(url);
        socket.end(answer);
      });
    });
    await new Promise<void>((r) => http.listen(httpPort, this.address, () => r()));
    this.http = http;
  }

  async stop(): Promise<void> {
    const icp = this.icp;
    this.icp = null;
    if (icp) await new Promise<void>((r) => icp.close(() => r()));
    for (const s of this.sockets) s.destroy();
    const http = this.http;
    this.http = null;
    if (http) await new Promise<void>((r) => http.close(() => r()));
  }
}

export interface Table {
  readonly changeNumber: number;
  readonly buckets: readonly (string | null)[];
}

/** Every datagram each UDP endpoint has seen, as its counters tell (see HostileGateway.seen). */
export interface Seen {
  readonly router: number;
  readonly broker: number;
}

export class HostileGateway {
  private readonly udp = new Map<string, Socket>();
  private raw: RawUdpSender | null = null;
  /** HERE_I_AMs the engines sent (they are counted by the router beside the drops). */
  hereIAmsSent = 0;
  private lastKeepAlive = 0;

  private constructor(
    readonly daemon: RunningDaemon,
    readonly engines: readonly TestEngine[],
    readonly source: FakeSource,
    readonly icpPort: number,
    readonly httpPort: number,
    readonly pid: number,
  ) {}

  /** Starts it all; B holds buckets gained from A and is warming when this resolves. */
  static async start(): Promise<HostileGateway> {
    const sourceIcp = await freeUdpPort();
    const sourceHttp = await freeTcpPort();
    const icpPort = await freeUdpPort();
    const httpPort = await freeTcpPort();
    const source = new FakeSource(A);
    await source.start(sourceIcp, sourceHttp);
    let daemon: RunningDaemon | null = null;
    const engines: TestEngine[] = [];
    try {
      daemon = await startDaemon(
        [`password: ${PASSWORD}`, 'warmup: { duration: 1h, peerTimeout: 500ms, minSourceHold: 0s, minHitRatio: 0 }'],
        {
          allow: '[127.0.0.0/25]',
          top: ['warmup:', '  listen: 127.0.0.1', `  icpPort: ${icpPort}`, `  httpPort: ${httpPort}`],
          health: [`icp: { port: ${sourceIcp} }`, `http: { enabled: false, port: ${sourceHttp} }`],
        },
      );
      const d = daemon;
      const g = new HostileGateway(d, engines, source, icpPort, httpPort, d.child.pid ?? 0);
      for (const address of [A, B]) {
        const e = new TestEngine({ address, router: { address: '127.0.0.1', port: d.udpPort }, password: PASSWORD });
        await e.start();
        engines.push(e);
        await g.keepAlive(true);
        await g.keepAlive(true);
        await waitFor(`${address} holding buckets`, async () =>
          (await g.table()).buckets.includes(address) ? true : null,
        );
      }
      await waitFor('B warming', async () => {
        const v = (await g.get('services/0/engines')) as {
          engines: { address: string; flags: { warming?: boolean } }[];
        };
        return v.engines.find((e) => e.address === B)?.flags.warming === true ? true : null;
      });
      return g;
    } catch (e) {
      for (const x of engines) await x.stop();
      await daemon?.stop();
      await source.stop();
      throw e;
    }
  }

  async stop(): Promise<void> {
    for (const s of this.udp.values()) await new Promise<void>((r) => s.close(() => r()));
    this.udp.clear();
    this.raw?.close();
    this.raw = null;
    for (const e of this.engines) await e.stop();
    await this.daemon.stop();
    await this.source.stop();
  }

  async get(path: string): Promise<unknown> {
    const res = await fetch(`${this.daemon.url}/api/v1/${path}`);
    if (!res.ok) throw new Error(`GET ${path}: ${res.status}`);
    return res.json();
  }

  async status(): Promise<StatusView> {
    return (await this.get('status')) as StatusView;
  }

  async table(): Promise<Table> {
    const t = (await this.get('services/0/buckets')) as Table;
    return { changeNumber: t.changeNumber, buckets: t.buckets };
  }

  /**
   * Each engine's HERE_I_AM, at most every 3 s (HERE_I_AM_T is 10 s) unless `now`: a test that runs for minutes keeps
   * its engines registered between its bursts. Returns how many were sent.
   */
  async keepAlive(now = false): Promise<number> {
    if (!now && Date.now() - this.lastKeepAlive < 3000) return 0;
    this.lastKeepAlive = Date.now();
    for (const e of this.engines) {
      this.hereIAmsSent++;
      await e.hereIAm({ timeoutMs: 2000 });
    }
    return this.engines.length;
  }

  /**
   * What the counters say each endpoint saw. The router: every drop by reason (decode errors among them) plus the
   * valid HERE_I_AMs; the broker: icp-received, counted before anything else.
   */
  seenIn(s: StatusView): Seen {
    const sum = (r: Readonly<Record<string, number>>) => Object.values(r).reduce((a, b) => a + b, 0);
    return {
      router: sum(s.dropped) + sum(s.decodeErrors) + s.services.reduce((a, x) => a + x.counters.hereIAmReceived, 0),
      broker: s.warmup?.['icp-received'] ?? 0,
    };
  }

  async seen(): Promise<Seen> {
    return this.seenIn(await this.status());
  }

  /** Whether the process the test started runs still (same PID, not a zombie) and answers the API. */
  async alive(): Promise<boolean> {
    if (this.daemon.child.exitCode !== null || this.daemon.child.signalCode !== null) return false;
    try {
      if (/\) Z /.test(readFileSync(`/proc/${this.pid}/stat`, 'utf8'))) return false;
      await this.status();
      return true;
    } catch {
      return false;
    }
  }

  /** The daemon's output since `from` characters, its last `lines` lines (for a report). */
  lastOutput(lines = 15): string {
    return this.daemon.output.join('').trimEnd().split('\n').slice(-lines).join('\n');
  }

  /** Sends from an ordinary socket bound to `from` (an ephemeral port). */
  async sendFrom(from: string, port: number, payload: Buffer): Promise<void> {
    let s = this.udp.get(from);
    if (s === undefined) {
      const sock = createSocket('udp4');
      sock.on('error', () => undefined);
      sock.on('message', () => undefined);
      await new Promise<void>((r) => sock.bind(0, from, () => r()));
      this.udp.set(from, sock);
      s = sock;
    }
    const socket = s;
    await new Promise<void>((resolve, reject) =>
      socket.send(payload, port, '127.0.0.1', (e) => (e ? reject(e) : resolve())),
    );
  }

  /** An ICP query from `from` (an ordinary socket of its own): the opcode of the broker's answer, or null. */
  async askIcp(from: string, query: Buffer, timeoutMs = 2000): Promise<string | null> {
    const sock = createSocket('udp4');
    sock.on('error', () => undefined);
    await new Promise<void>((r) => sock.bind(0, from, () => r()));
    try {
      return await new Promise<string | null>((resolve) => {
        const timer = setTimeout(() => resolve(null), timeoutMs);
        sock.on('message', (buf) => {
          clearTimeout(timer);
          const d = decodeIcp(buf);
          resolve(d.ok ? d.value.opcode : 'bad');
        });
        sock.send(query, this.icpPort, '127.0.0.1');
      });
    } finally {
      sock.close();
    }
  }

  /** Sends with any source address and port (a raw socket; root). */
  async sendRaw(source: string, sourcePort: number, port: number, payload: Buffer): Promise<void> {
    this.raw ??= new RawUdpSender();
    await this.raw.send({ source, sourcePort, destination: '127.0.0.1', destinationPort: port, payload });
  }
}

/** The kernel's count of UDP datagrams dropped for a full receive buffer (this network namespace). */
export function udpReceiveBufferErrors(): number {
  const lines = readFileSync('/proc/net/snmp', 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('Udp:'));
  const names = lines[0]?.split(/\s+/) ?? [];
  const values = lines[1]?.split(/\s+/) ?? [];
  return Number(values[names.indexOf('RcvbufErrors')] ?? 0);
}

/** Roughly what a datagram of `n` bytes takes of a receive buffer on loopback (its sk_buff's truesize). */
function truesize(n: number): number {
  return 2 ** Math.ceil(Math.log2(n + 400)) + 768;
}
/** Well under the default receive buffer (net.core.rmem_default, 212,992 bytes). */
const BUFFER_BUDGET = 96 * 1024;

/**
 * Sends `total` datagrams (`make(i)` builds one, `send` sends it) in windows of at most `window` datagrams and
 * BUFFER_BUDGET bytes of receive buffer, waiting after each until `seen()` has risen by all that was sent: nothing
 * queues past the daemon's socket buffer, so its counters must account for every datagram. Throws, naming how far it
 * got (and the kernel's receive-buffer drops meanwhile), when a window is not accounted for within `waitMs`.
 */
export async function paced(
  what: string,
  total: number,
  window: number,
  make: (i: number) => { send: () => Promise<void>; bytes: number },
  seen: () => Promise<number>,
  between: () => Promise<number> = async () => 0,
  waitMs = 5000,
): Promise<void> {
  const kernelDropsBefore = udpReceiveBufferErrors();
  let expected = await seen();
  for (let i = 0; i < total;) {
    expected += await between();
    let budget = BUFFER_BUDGET;
    for (let k = 0; k < window && i < total; k++) {
      const one = make(i);
      budget -= truesize(one.bytes);
      if (budget < 0 && k > 0) break;
      await one.send();
      i++;
      expected++;
    }
    const deadline = Date.now() + waitMs;
    let last = -1;
    for (;;) {
      try {
        last = await seen();
      } catch (e) {
        last = -1;
        if (Date.now() > deadline) throw new Error(`${what}: after ${i} of ${total}: ${(e as Error).message}`);
      }
      if (last >= expected) break;
      if (Date.now() > deadline)
        throw new Error(
          `${what}: the counters account for ${last} datagrams, not the ${expected} sent (${i} of ${total} in this ` +
            `phase); the kernel dropped ${udpReceiveBufferErrors() - kernelDropsBefore} for a full receive buffer meanwhile`,
        );
      await new Promise((r) => setTimeout(r, 1));
    }
    if (last > expected) throw new Error(`${what}: counted ${last}, more than the ${expected} sent`);
  }
}

/** What a malformed HTTP exchange got back: the status of every response read, and how it ended. */
export interface Exchange {
  readonly statuses: readonly number[];
  /** Node's own answers to requests its parser refused (400, 408, 413, 431 ...: no header but Connection: close). */
  readonly parserAnswers: number;
  /** Still open after `timeoutMs` (the server waits for more of a body, say): closed by us. */
  readonly timedOut: boolean;
  readonly ms: number;
}

/**
 * Connects from `from`, writes the pieces (pausing between them) and then `last` (a request with Connection: close,
 * so that a server that parsed everything before answers it all and closes), and reads until the server closes, or
 * until `timeoutMs` (then closes it itself).
 */
export function exchange(
  port: number,
  from: string,
  pieces: readonly Buffer[],
  pauseMs: number,
  last: string,
  timeoutMs = 3000,
): Promise<Exchange> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress: from });
    const chunks: Buffer[] = [];
    const started = Date.now();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      socket.destroy();
    }, timeoutMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const statuses: number[] = [];
      let parserAnswers = 0;
      for (const m of text.matchAll(/HTTP\/1\.1 (\d{3})[^\r\n]*\r\n((?:[^\r\n]+\r\n)*)\r\n/g)) {
        statuses.push(Number(m[1]));
        if (/^connection: close\r\n$/i.test(m[2] ?? '')) parserAnswers++;
      }
      resolve({ statuses, parserAnswers, timedOut, ms: Date.now() - started });
    });
    socket.once('connect', () => {
      void (async () => {
        for (const piece of pieces) {
          if (socket.destroyed) return;
          socket.write(piece);
          if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
        }
        if (!socket.destroyed) socket.write(last);
      })();
    });
  });
}

/** Holds `count` connections from `from` open with an unfinished request head; close() ends them. */
export async function holdOpen(
  port: number,
  from: string,
  count: number,
): Promise<{ closedByServer: () => number; close: () => void }> {
  const sockets: TcpSocket[] = [];
  let closed = 0;
  await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<void>((resolve) => {
          const s = connect({ host: '127.0.0.1', port, localAddress: from });
          s.on('error', () => undefined);
          s.resume(); // read the server's answer, or its end is never seen
          s.on('close', () => {
            closed++;
            resolve();
          });
          s.once('connect', () => {
            s.write('GET http://198.51.100.1/ HTTP/1.1\r\nHost: x\r\n');
            resolve();
          });
          sockets.push(s);
        }),
    ),
  );
  return { closedByServer: () => closed, close: () => sockets.forEach((s) => s.destroy()) };
}
