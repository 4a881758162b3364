// The warm-up broker: an ICP responder and an HTTP relay on the router's address, which the engines' Squid uses as
// an ordinary sibling (docs/warmup.md). For an engine's ICP_QUERY about a URL in a bucket it gained recently, the
// broker asks the bucket's previous owner by ICP and answers HIT only if it says HIT; the engine then fetches the
// URL from the broker, which relays it from that source's proxy port with `Cache-Control: only-if-cached`.
// The broker never fetches from an origin and serves member engines only (ICP DENIED, HTTP 403 to anyone else).
// The HTTP connections are taken in here and handed to the relay process (relay-child.ts), which parses their
// requests and moves the bytes; every decision about a connection or a request is still made here.
import { createSocket } from 'node:dgram';
import type { RemoteInfo, Socket } from 'node:dgram';
import { createServer } from 'node:net';
import type { Server, Socket as TcpSocket } from 'node:net';
import { wccpHash } from '../buckets/hash.js';
import { ServiceFlag } from '../vocabulary.js';
import type { Clock } from '../cluster/types.js';
import { decodeIcp, ICP_HEADER_LENGTH, ICP_OPCODES, ICP_VERSION } from '../wire/icp.js';
import type { Log } from '../log.js';
import { RateLimitedLog } from '../rate-limited-log.js';
import { MemberBudget, ReplyBudget } from './budget.js';
import type { BudgetTicket } from './budget.js';
import { DestinationResolver, ipv4Value, urlTarget } from './destination.js';
import type { Lookup } from './destination.js';
import { IcpAsker } from './icp-client.js';
import type { AskOutcome } from './icp-client.js';
import type { WarmupPolicy } from './policy.js';
import { VIA } from './relay.js';
import { DEFAULT_RELAY_BUDGETS } from './relay-messages.js';
import type { FromChild, RelaySettings, RequestDecision } from './relay-messages.js';
import { RelayProcess } from './relay-process.js';

export interface RelayLimits {
  /** Request and response header bytes, each. */
  readonly maxHeaderBytes: number;
  /** From connecting to the source until its response headers. */
  readonly headersTimeoutMs: number;
  /** A whole relayed response, headers to last byte. */
  readonly totalTimeoutMs: number;
  /** A larger object is not relayed (by Content-Length) or is cut off (while streaming). */
  readonly maxObjectBytes: number;
  /** How long a HIT the broker answered lets the engine fetch that URL through it. */
  readonly hitMemoryMs: number;
  readonly maxHitMemory: number;
  /** Member queries being worked on at once (resolving or waiting for a source); more are answered MISS at once. */
  readonly maxPendingQueries: number;
  /**
   * A member engine's ICP queries per second (budget.ts): past it, its queries that second are answered MISS at once
   * and none of its queries of that second or the ones right before and after count towards its warm-up.
   */
  readonly memberQueriesPerSecond: number;
  /** ICP_DENIED replies per second to one address and in all (each also the burst); more are not sent. */
  readonly deniedPerSourcePerSecond: number;
  readonly deniedPerSecond: number;
  /** Open HTTP connections from member engines, in all and from one address; more are closed at once. */
  readonly maxConnections: number;
  readonly maxConnectionsPerAddress: number;
  /** Open HTTP connections from other addresses (each gets its 403, then is closed), in all: a pool of their own. */
  readonly maxOtherConnections: number;
  /**
   * How long an idle keep-alive connection stays open after a response. Longer than Squid keeps an idle connection to
   * a peer (server_idle_pconn_timeout, 60 s by default), so Squid always closes first: a request Squid sends on a
   * connection the broker is closing gets a reset, and Squid answers it with an error (Node's default was 5 s).
   */
  readonly idleKeepAliveMs: number;
  /**
   * How long the broker keeps an idle connection to a source's proxy port for reuse. Shorter than Squid keeps an idle
   * client connection (client_idle_pconn_timeout, 120 s by default), so the broker closes first: a relay sent on a
   * connection the source is closing would be reset, and the source taken for failed.
   */
  readonly sourceIdleKeepAliveMs: number;
  /** Bytes per second over all relays at once (warmup.maxRelayRate); 0: no limit. */
  readonly maxRelayRate: number;
}

export const DEFAULT_RELAY_LIMITS: RelayLimits = {
  maxHeaderBytes: 16 * 1024,
  headersTimeoutMs: 5000,
  totalTimeoutMs: 120_000,
  maxObjectBytes: DEFAULT_RELAY_BUDGETS.maxObjectBytes,
  hitMemoryMs: 30_000,
  maxHitMemory: 10_000,
  maxPendingQueries: 1024,
  memberQueriesPerSecond: 500,
  deniedPerSourcePerSecond: 5,
  deniedPerSecond: 100,
  maxConnections: 512,
  maxConnectionsPerAddress: 64,
  maxOtherConnections: 32,
  idleKeepAliveMs: 120_000,
  sourceIdleKeepAliveMs: 60_000,
  maxRelayRate: 0,
};

export interface BrokerOptions {
  /** The address the broker listens on (the router's address on the engines' network). */
  readonly listen: string;
  readonly icpPort: number;
  readonly httpPort: number;
  /** Where the engines answer ICP and proxy HTTP (Squid: icp_port 3130, http_port 3128). */
  readonly sourceIcpPort: number;
  readonly sourceHttpPort: number;
  readonly policy: WarmupPolicy;
  readonly clock: Clock;
  readonly log: Log;
  readonly lookup?: Lookup;
  readonly limits?: Partial<RelayLimits>;
}

const LOG_INTERVAL_MS = 10_000;
/** How often a member's per-second budget hands on its cleared outcomes. */
const BUDGET_SWEEP_MS = 250;

function plainAddress(a: string | undefined): string {
  return (a ?? '').replace(/^::ffff:/, '');
}

/** Canonical form of a URL for matching an HTTP request to the ICP query that preceded it. */
function canonical(url: string): string | null {
  try {
    return new URL(url).href;
  } catch {
    return null;
  }
}

/**
 * The reply to a decoded QUERY (`query`, as received): the request number and the URL's bytes as they came, so a
 * reply is never larger than the query it answers (it lacks the query's 4-byte requester address), whatever the URL
 * holds. Squid matches a reply by request number and URL.
 */
function icpReplyTo(query: Buffer, opcode: 'HIT' | 'MISS' | 'DENIED', sender: number): Buffer {
  const url = query.subarray(ICP_HEADER_LENGTH + 4);
  const out = Buffer.alloc(ICP_HEADER_LENGTH + url.length);
  out.writeUInt8(ICP_OPCODES[opcode], 0);
  out.writeUInt8(ICP_VERSION, 1);
  out.writeUInt16BE(out.length, 2);
  query.copy(out, 4, 4, 8);
  out.writeUInt32BE(sender >>> 0, 16);
  url.copy(out, ICP_HEADER_LENGTH);
  return out;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class WarmupBroker {
  private icp: Socket | null = null;
  private http: Server | null = null;
  private readonly asker: IcpAsker;
  private readonly resolver: DestinationResolver;
  private limits: RelayLimits;
  private readonly counters: Record<string, number> = {};
  /** `${engine} ${url}` -> the source that said HIT, until when. */
  private readonly hits = new Map<string, { source: string; until: number }>();
  private readonly logged = new Map<string, number>();
  /**
   * ICP is UDP: its source address is whatever a sender writes. Bad and refused datagrams are logged per reason, not
   * per address, or forged sources would write a line each (rate-limited-log.ts).
   */
  private readonly dropLog: RateLimitedLog;
  /** The broker's address as ICP's Sender Host Address. */
  private readonly sender: number;
  private readonly denied: ReplyBudget;
  private readonly budget: MemberBudget;
  private budgetSweep: ReturnType<typeof setInterval> | null = null;
  /** Member queries being answered now (see maxPendingQueries). */
  private pendingQueries = 0;
  /** Connections of member engines, per address and in all; of other addresses, in all (maxOtherConnections). */
  private readonly connections = new Map<string, number>();
  private openConnections = 0;
  private otherConnections = 0;
  /**
   * The connections handed to the relay process, by number: from whom, and whether taken in as another address's
   * (closed after its first answer, whoever it turns out to be).
   */
  private readonly conns = new Map<number, { from: string; other: boolean }>();
  private nextConn = 1;
  /** Where the relay's requests are parsed and its bytes move (relay-child.ts); the decisions stay here. */
  private readonly relay: RelayProcess;
  private unobserve: (() => void) | null = null;

  constructor(private readonly options: BrokerOptions) {
    this.limits = { ...DEFAULT_RELAY_LIMITS, ...options.limits };
    this.dropLog = new RateLimitedLog(options.log, options.clock, LOG_INTERVAL_MS);
    this.sender = ipv4Value(options.listen) ?? 0;
    this.denied = new ReplyBudget(options.clock, this.limits.deniedPerSourcePerSecond, this.limits.deniedPerSecond);
    this.budget = new MemberBudget(options.clock, this.limits.memberQueriesPerSecond);
    this.asker = new IcpAsker({ bindAddress: options.listen, port: options.sourceIcpPort });
    this.resolver = new DestinationResolver({
      clock: options.clock,
      ...(options.lookup ? { lookup: options.lookup } : {}),
    });
    this.relay = new RelayProcess(this.relaySettings(), {
      request: (m) => {
        // The boundary of one request: an error in deciding it fails it alone.
        try {
          return this.decide(m);
        } catch (err) {
          const from = this.conns.get(m.conn)?.from ?? '';
          this.unexpected('http-internal-error', from, err, `HTTP request from ${from}`);
          return this.refusal(500, 'http-internal-error-answered', 'wccpd warm-up broker: internal error', true);
        }
      },
      closed: (conn) => this.release(conn),
      counts: (c) => {
        for (const [k, v] of Object.entries(c)) this.count(k, v);
      },
      log: (m) => {
        if (m.via === 'note') this.note(m.key, m.obj, m.msg);
        else this.dropLog.warn(m.from, m.key, m.obj, m.msg);
      },
      sourceFailed: (source) => this.options.policy.sourceFailed(source),
      exited: (code, signal, restartInMs) => {
        // Every connection it held went with it.
        for (const conn of [...this.conns.keys()]) this.release(conn);
        this.count('relay-process-exits');
        this.options.log.error(
          { warmup: 'relay-process-exits', code, signal },
          `warm-up broker: the relay process ended (${signal ?? `exit ${code}`}); starting it again in ${restartInMs} ms, engines get 504 meanwhile`,
        );
      },
      restarted: () =>
        this.options.log.info({ warmup: 'relay-process' }, 'warm-up broker: the relay process runs again'),
      restartFailed: (err) =>
        this.options.log.error(
          { warmup: 'relay-process', err: errorText(err) },
          `warm-up broker: the relay process could not start again: ${errorText(err)}`,
        ),
    });
  }

  private relaySettings(): RelaySettings {
    const l = this.limits;
    return {
      localAddress: this.options.listen,
      sourceHttpPort: this.options.sourceHttpPort,
      maxHeaderBytes: l.maxHeaderBytes,
      headersTimeoutMs: l.headersTimeoutMs,
      totalTimeoutMs: l.totalTimeoutMs,
      maxObjectBytes: l.maxObjectBytes,
      idleKeepAliveMs: l.idleKeepAliveMs,
      sourceIdleKeepAliveMs: l.sourceIdleKeepAliveMs,
      maxRelayRate: l.maxRelayRate,
    };
  }

  /** New relay budgets (a config reload): the relays that start from now on keep to them. */
  setRelayBudgets(b: Pick<RelayLimits, 'maxRelayRate' | 'maxObjectBytes'>): void {
    this.limits = { ...this.limits, ...b };
    this.relay.update(this.relaySettings());
  }

  /** Resolves once the relay process's counters and closed connections up to now have arrived (for tests). */
  settled(): Promise<void> {
    return this.relay.settled();
  }

  /** The relay process's PID (null while it is not running). */
  relayPid(): number | null {
    return this.relay.pid();
  }

  private count(name: string, by = 1): void {
    this.counters[name] = (this.counters[name] ?? 0) + by;
  }

  /** Running totals: icp-*, http-*, resolver-*. */
  snapshotCounters(): Record<string, number> {
    const r = this.resolver.counters;
    return {
      ...this.counters,
      'resolver-lookups': r.lookups,
      'resolver-cache-hits': r.cacheHits,
      'resolver-failures': r.failures,
      'resolver-timeouts': r.timeouts,
      'resolver-busy': r.busy,
    };
  }

  /** What the broker holds now: source sockets, queries in flight, names cached, HTTP connections (for tests). */
  gauges(): {
    sourceSockets: number;
    pendingQueries: number;
    sourceQueries: number;
    resolverEntries: number;
    resolverInflight: number;
    hitMemory: number;
    connections: number;
    otherConnections: number;
  } {
    return {
      sourceSockets: this.asker.socketCount(),
      pendingQueries: this.pendingQueries,
      sourceQueries: this.asker.pendingCount(),
      resolverEntries: this.resolver.size(),
      resolverInflight: this.resolver.inflightCount(),
      hitMemory: this.hits.size,
      connections: this.openConnections,
      otherConnections: this.otherConnections,
    };
  }

  private isMember(address: string): boolean {
    return this.options.policy.memberOf(address).length > 0;
  }

  /** Closes the ICP sockets of sources that are no longer member engines of any service. */
  prune(): void {
    this.asker.retain((source) => this.isMember(source));
  }

  /** Logs the first of each kind at once, then at most one line per kind every 10 s. */
  private note(kind: string, obj: object, msg: string): void {
    const now = this.options.clock.now();
    const last = this.logged.get(kind);
    if (last !== undefined && now >= last && now - last < LOG_INTERVAL_MS) return;
    if (this.logged.size > 1000) this.logged.clear();
    this.logged.set(kind, now);
    this.options.log.warn({ warmup: kind, ...obj }, msg);
  }

  /** Something one datagram, connection or timer brought that the code did not expect: counted, logged, dropped. */
  private unexpected(counter: string, from: string, err: unknown, what: string): void {
    this.count(counter);
    const msg = errorText(err);
    this.dropLog.warn(from, counter, { warmup: counter, from, err: msg }, `warm-up broker: ${what} dropped: ${msg}`);
  }

  async start(): Promise<void> {
    const { listen, icpPort, httpPort } = this.options;
    const icp = createSocket('udp4');
    // The boundary of one datagram: whatever it carries, it is counted and dropped alone.
    icp.on('message', (buf, rinfo) => {
      this.onIcp(buf, rinfo).catch((err: unknown) =>
        this.unexpected('icp-internal-error', rinfo.address, err, `ICP datagram from ${rinfo.address}`),
      );
    });
    icp.on('error', (err) => this.unexpected('icp-socket-error', listen, err, 'ICP socket error'));
    await new Promise<void>((resolve, reject) => {
      icp.once('error', reject);
      icp.bind({ address: listen, port: icpPort }, () => {
        icp.off('error', reject);
        resolve();
      });
    });
    this.icp = icp;
    this.budgetSweep = setInterval(() => {
      try {
        this.budget.sweep((engine) => this.isMember(engine));
      } catch (err) {
        this.unexpected('icp-internal-error', listen, err, 'the query budget sweep');
      }
    }, BUDGET_SWEEP_MS);
    this.budgetSweep.unref();
    await this.relay.start();
    // Connections are taken in here (membership, the caps) and handed to the relay process before anything is read.
    const server = createServer({ pauseOnConnect: true }, (socket: TcpSocket) => {
      try {
        this.admit(socket);
      } catch (err) {
        this.unexpected('http-internal-error', plainAddress(socket.remoteAddress), err, 'a new connection');
        socket.destroy();
      }
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(httpPort, listen, () => {
        server.off('error', reject);
        resolve();
      });
    });
    // After listening, an error (say EMFILE on accept) must not end the process either.
    server.on('error', (err) => this.unexpected('http-server-error', listen, err, 'HTTP server error'));
    this.http = server;
    // A departed source's socket closes when the policy sees it go, not at the next query.
    this.unobserve = this.options.policy.onObserve(() => this.prune());
  }

  /**
   * Slow or idle clients hold a connection at most headersTimeout (per request) or the keep-alive timeout; these caps
   * bound how many they can hold at once. Member engines' connections are counted apart from anyone else's, so no
   * number of other addresses can take a member's slot; another address's connection is closed after its 403.
   */
  private admit(socket: TcpSocket): void {
    const from = plainAddress(socket.remoteAddress);
    const refused = (why: string): void => {
      this.count('http-connections-refused');
      this.dropLog.warn(
        from,
        'http-connections-refused',
        { warmup: 'http-connections-refused', from },
        `warm-up broker: connection from ${from} closed: ${why}`,
      );
      socket.destroy();
    };
    const other = !this.isMember(from);
    if (other) {
      if (this.otherConnections >= this.limits.maxOtherConnections) {
        refused(`no member engine, and ${this.otherConnections} such connections are open`);
        return;
      }
    } else {
      const mine = this.connections.get(from) ?? 0;
      if (this.openConnections >= this.limits.maxConnections || mine >= this.limits.maxConnectionsPerAddress) {
        refused(`${mine} open from that address, ${this.openConnections} from member engines in all`);
        return;
      }
    }
    const conn = this.nextConn++;
    this.conns.set(conn, { from, other });
    if (other) this.otherConnections++;
    else {
      this.openConnections++;
      this.connections.set(from, (this.connections.get(from) ?? 0) + 1);
    }
    // Counted until the relay process says the connection closed (or ends itself).
    if (!this.relay.hand(conn, socket)) {
      this.release(conn);
      this.count('http-relay-unavailable');
      this.count('http-status-504');
      this.note(
        'http-relay-unavailable',
        {},
        'warm-up broker: the relay process is not running: 504 to the engine, which goes to the origin',
      );
      const body = 'wccpd warm-up broker: the relay is restarting\n';
      socket.end(
        `HTTP/1.1 504 Gateway Timeout\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\n` +
          `Cache-Control: no-store\r\nConnection: close\r\n\r\n${body}`,
      );
    }
  }

  /** A connection the relay process held is gone. */
  private release(conn: number): void {
    const c = this.conns.get(conn);
    if (c === undefined) return;
    this.conns.delete(conn);
    if (c.other) {
      this.otherConnections--;
      return;
    }
    this.openConnections--;
    const n = (this.connections.get(c.from) ?? 1) - 1;
    if (n <= 0) this.connections.delete(c.from);
    else this.connections.set(c.from, n);
  }

  icpPort(): number | null {
    const a = this.icp?.address();
    return a ? a.port : null;
  }

  httpPort(): number | null {
    const a = this.http?.address();
    return a && typeof a === 'object' ? a.port : null;
  }

  async stop(): Promise<void> {
    this.unobserve?.();
    this.unobserve = null;
    if (this.budgetSweep !== null) clearInterval(this.budgetSweep);
    this.budgetSweep = null;
    this.asker.close();
    const icp = this.icp;
    this.icp = null;
    if (icp) await new Promise<void>((r) => icp.close(() => r()));
    const http = this.http;
    this.http = null;
    // The relay process ends with every connection it holds; the listening socket closes here.
    await this.relay.stop();
    for (const conn of [...this.conns.keys()]) this.release(conn);
    // The listening socket closes at once; close's callback would wait for the connections handed over, which the
    // server still counts.
    http?.close();
  }

  private reply(query: Buffer, to: RemoteInfo, opcode: 'HIT' | 'MISS' | 'DENIED'): void {
    const icp = this.icp;
    if (icp === null) return;
    const failed = (err: unknown): void =>
      this.unexpected('icp-send-failed', to.address, err, `ICP reply to ${to.address}`);
    try {
      icp.send(icpReplyTo(query, opcode, this.sender), to.port, to.address, (err) => {
        if (err) failed(err);
      });
      this.count(`icp-answered-${opcode.toLowerCase()}`);
    } catch (err) {
      failed(err);
    }
  }

  private async onIcp(buf: Buffer, rinfo: RemoteInfo): Promise<void> {
    this.count('icp-received');
    if (rinfo.port === 0) {
      // No reply can go to port 0 (and no real sender uses it): the datagram is forged or broken.
      this.count('icp-source-port-0');
      this.dropLog.warn(
        rinfo.address,
        'icp-source-port-0',
        { warmup: 'icp-source-port-0', from: rinfo.address },
        `warm-up broker: ICP datagram from ${rinfo.address} port 0 dropped (no reply can go there)`,
      );
      return;
    }
    const d = decodeIcp(buf);
    if (!d.ok) {
      this.count('icp-bad');
      this.dropLog.warn(
        rinfo.address,
        'icp-bad',
        { warmup: 'icp-bad', from: rinfo.address, detail: d.error.reason },
        `warm-up broker: bad ICP datagram from ${rinfo.address}: ${d.error.message}`,
      );
      return;
    }
    if (d.value.opcode !== 'QUERY') {
      this.count('icp-unexpected');
      return;
    }
    const q = d.value;
    const engine = rinfo.address;
    const members = this.options.policy.memberOf(engine);
    if (members.length === 0) {
      this.count('icp-denied');
      this.dropLog.warn(
        engine,
        'icp-denied',
        { warmup: 'icp-denied', from: engine },
        `warm-up broker: ICP query from ${engine}, which is no member engine: DENIED`,
      );
      // The claimed source may be anyone's: the broker must not be a reflector.
      if (this.denied.take(engine)) this.reply(buf, rinfo, 'DENIED');
      else this.count('icp-denied-unanswered');
      return;
    }
    const ticket = this.budget.query(engine);
    if (!ticket.within) {
      this.count('icp-miss-over-budget');
      this.dropLog.warn(
        engine,
        'icp-over-budget',
        { warmup: 'icp-over-budget', from: engine },
        `warm-up broker: more than ${this.limits.memberQueriesPerSecond} ICP queries in a second from ${engine}: MISS at once, not counted towards its warm-up`,
      );
      this.reply(buf, rinfo, 'MISS');
      return;
    }
    if (this.pendingQueries >= this.limits.maxPendingQueries) {
      // A flood (forged or not) cannot grow the work in flight: past the bound, the engine goes direct.
      this.count('icp-miss-overload');
      this.note(
        'icp-overload',
        { pending: this.pendingQueries },
        `warm-up broker: ${this.pendingQueries} queries in flight (maxPendingQueries): answering MISS at once`,
      );
      this.reply(buf, rinfo, 'MISS');
      return;
    }
    this.pendingQueries++;
    let answer: 'HIT' | 'MISS';
    try {
      answer = await this.answer(engine, q.url, members, ticket);
    } finally {
      this.pendingQueries--;
    }
    this.reply(buf, rinfo, answer);
  }

  /** HIT or MISS for a member engine's query (counting why a MISS was at once). */
  private async answer(
    engine: string,
    url: string,
    members: ReturnType<WarmupPolicy['memberOf']>,
    ticket: BudgetTicket,
  ): Promise<'HIT' | 'MISS'> {
    const target = urlTarget(url);
    const miss = (why: string): 'MISS' => {
      this.count(`icp-miss-${why}`);
      return 'MISS';
    };
    if (target === null) return miss('not-http-url');
    const enabled = members.filter((m) => m.enabled);
    if (enabled.length === 0) return miss('disabled');
    const service =
      enabled.find((m) => m.definition?.protocol === 6 && m.definition.ports.includes(target.port)) ?? enabled[0];
    if (service === undefined) return miss('disabled');
    const settings = this.options.policy.settings(service.id);
    if (settings === null) return miss('disabled');
    const flags = service.definition?.flags ?? ServiceFlag.DST_IP_HASH;
    const fields = flags & 0x000f;
    if (fields !== 0 && fields !== ServiceFlag.DST_IP_HASH) return miss('hash-not-destination');
    // Before any name lookup: an engine that is not warming gets MISS whatever the URL, so a query under its address
    // (forged or not) cannot make the broker look up a name of the sender's choosing.
    const idle = this.options.policy.notWarming(service.id, engine);
    if (idle !== null) return miss(idle);
    const address = await this.resolver.resolve(target.host, settings.peerTimeoutMs);
    const value = address === null ? null : ipv4Value(address);
    if (value === null) return miss('unresolvable');
    const bucket = wccpHash(value);
    const decision = this.options.policy.decide(service.id, engine, bucket);
    if ('miss' in decision) return miss(decision.miss);
    this.count('icp-asked');
    const onOutcome = (source: string, o: AskOutcome): void => {
      this.count(`icp-source-${o}`);
      if (o === 'failed') {
        this.options.policy.sourceFailed(source);
        this.note(
          `source-failed ${source}`,
          { source },
          `warm-up broker: source ${source} refused an ICP query (port ${this.options.sourceIcpPort}); not asking it again until its state changes`,
        );
      }
    };
    const hit = await this.asker.askAll(decision.ask, url, engine, settings.peerTimeoutMs, onOutcome);
    // Counted towards the warm-up once the engine's second is known to be within its budget (budget.ts).
    ticket.settle(() => this.options.policy.record(service.id, engine, hit !== null));
    if (hit === null) return 'MISS';
    const key = canonical(url);
    if (key !== null) this.remember(`${engine} ${key}`, hit);
    return 'HIT';
  }

  private remember(key: string, source: string): void {
    this.hits.delete(key);
    this.hits.set(key, { source, until: this.options.clock.now() + this.limits.hitMemoryMs });
    while (this.hits.size > this.limits.maxHitMemory) {
      const oldest = this.hits.keys().next().value;
      if (oldest === undefined) break;
      this.hits.delete(oldest);
    }
  }

  /** A refusal the relay process writes: counted here, where it is decided. */
  private refusal(
    status: number,
    counter: string,
    text: string,
    close: boolean,
    extra: Readonly<Record<string, string>> = {},
  ): RequestDecision {
    this.count(counter);
    this.count(`http-status-${status}`);
    return { action: 'refuse', status, text, close, extra };
  }

  /**
   * What to do with one request the relay process parsed: refuse it (403 to anyone but a member engine, 405, a body
   * on GET or HEAD, no absolute URL, a loop, a URL no source confirmed by ICP) or relay it from the source that said
   * HIT. Every decision about a request is made here, beside the ICP half's.
   */
  private decide(m: Extract<FromChild, { t: 'request' }>): RequestDecision {
    this.count('http-requests');
    const c = this.conns.get(m.conn);
    const engine = c?.from ?? '';
    if (c === undefined || !this.isMember(engine)) {
      this.note(
        `http-denied ${engine}`,
        { from: engine },
        `warm-up broker: HTTP request from ${engine}, which is no member engine: 403`,
      );
      return this.refusal(403, 'http-denied', `wccpd warm-up broker: ${engine} is not a member engine`, true);
    }
    // An engine that joined after it connected: served, on a connection that ends with this answer.
    const close = c.other;
    if (m.method !== 'GET' && m.method !== 'HEAD')
      return this.refusal(405, 'http-bad-method', `wccpd warm-up broker: only GET and HEAD, not ${m.method}`, close, {
        Allow: 'GET, HEAD',
      });
    if (m.transferEncoding || (m.contentLength !== null && Number(m.contentLength) !== 0)) {
      // The relay sends no body: relayed, its framing would desynchronise the kept connection to the source. The
      // body is not read, so the connection ends with the answer.
      this.note(
        `http-bad-body ${engine}`,
        { from: engine },
        `warm-up broker: a ${m.method} with a body from ${engine}: 400`,
      );
      return this.refusal(400, 'http-bad-body', `wccpd warm-up broker: a ${m.method} request carries no body`, true);
    }
    const url = m.url;
    const key = urlTarget(url) === null ? null : canonical(url);
    if (key === null)
      return this.refusal(400, 'http-bad-url', 'wccpd warm-up broker: expected an absolute http:// URL', close);
    if (m.via !== null && m.via.includes(VIA))
      return this.refusal(504, 'http-loop', 'wccpd warm-up broker: forwarding loop (Via)', close);
    const hit = this.hits.get(`${engine} ${key}`);
    if (hit === undefined || hit.until < this.options.clock.now()) {
      // Only what a source just said HIT for is relayed; anything else goes direct from the engine.
      return this.refusal(504, 'http-unconfirmed', 'wccpd warm-up broker: no source confirmed this URL by ICP', close);
    }
    return { action: 'relay', source: hit.source, url, keepAlive: !close };
  }
}
