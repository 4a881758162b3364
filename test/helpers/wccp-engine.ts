// A strict WCCP test engine: a UDP client speaking WCCPv2 through the project's codec. It sends HERE_I_AM with
// chosen capabilities, weight and password, parses the I_SEE_YOU and echoes its Receive ID in the next HERE_I_AM.
// `behaviour: 'squid-5.7'` never echoes (received_id 0, like Debian's Squid); `badMd5` signs with a wrong password.
import { createSocket } from 'node:dgram';
import type { Socket } from 'node:dgram';
import {
  CapabilityType,
  CommandType,
  decodeMessage,
  encodeMessage,
  findComponent,
  VERSION_2_0,
} from '../../src/wire/wccp2/index.js';
import type { Component, Wccp2Message } from '../../src/wire/wccp2/index.js';

export interface TestEngineOptions {
  /** The engine's address; the socket binds to it (a 127.0.0.x address on loopback). */
  readonly address: string;
  readonly router: { readonly address: string; readonly port: number };
  readonly serviceId?: number;
  /** Dynamic service definition (service ids 51-255). */
  readonly dynamic?: {
    readonly protocol: number;
    readonly ports: readonly number[];
    readonly flags: number;
    readonly priority: number;
  };
  readonly weight?: number;
  /** Capability bits; null leaves the Capabilities component out (draft default GRE/hash/GRE). */
  readonly capabilities?: { forwarding: number; assignment: number; return: number } | null;
  readonly password?: string;
  /** Sign with a password other than the router's. */
  readonly badMd5?: boolean;
  readonly behaviour?: 'strict' | 'squid-5.7';
}

export interface ISeeYouSeen {
  readonly receiveId: number;
  readonly memberChangeNumber: number;
  /** Engines in the Router View (usable ones). */
  readonly engines: readonly string[];
  /** Buckets the Router View gives this engine. */
  readonly myBuckets: readonly number[];
  readonly routers: readonly string[];
  readonly shutdownResponse: boolean;
  readonly message: Wccp2Message;
}

export class TestEngine {
  private socket: Socket | null = null;
  private lastReceiveId = 0;
  private changeNumber = 1;
  private readonly waiting: ((m: Wccp2Message) => void)[] = [];
  readonly received: Wccp2Message[] = [];

  constructor(readonly options: TestEngineOptions) {}

  async start(): Promise<void> {
    const s = createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.bind(0, this.options.address, () => {
        s.off('error', reject);
        resolve();
      });
    });
    s.on('message', (buf) => {
      const d = decodeMessage(buf);
      if (!d.ok) return;
      this.received.push(d.value);
      const w = this.waiting.shift();
      if (w) w(d.value);
    });
    this.socket = s;
  }

  async stop(): Promise<void> {
    const s = this.socket;
    this.socket = null;
    if (s) await new Promise<void>((r) => s.close(() => r()));
  }

  /** The HERE_I_AM this engine would send now. */
  hereIAmMessage(options: { shutdown?: boolean } = {}): Wccp2Message {
    const o = this.options;
    const id = o.serviceId ?? 0;
    const dyn = o.dynamic;
    const ports = [...(dyn?.ports ?? [])];
    while (ports.length < 8) ports.push(0);
    const echo = o.behaviour === 'squid-5.7' ? 0 : this.lastReceiveId;
    const caps = o.capabilities === undefined ? { forwarding: 0x2, assignment: 0x1, return: 0x2 } : o.capabilities;
    const components: Component[] = [
      o.password !== undefined
        ? { kind: 'security', option: 'md5', digest: '00'.repeat(16) }
        : { kind: 'security', option: 'none' },
      {
        kind: 'service',
        serviceType: dyn ? 'dynamic' : 'standard',
        serviceId: id,
        priority: dyn?.priority ?? 0,
        protocol: dyn?.protocol ?? 0,
        flags: dyn?.flags ?? 0,
        ports,
      },
      {
        kind: 'web-cache-identity',
        element: {
          address: o.address,
          hashRevision: 0,
          flags: 0,
          assignment: { type: 'hash', buckets: [] },
          weight: o.weight ?? 10000,
          status: 0,
        },
      },
      {
        kind: 'web-cache-view',
        changeNumber: this.changeNumber,
        routers: [{ routerId: o.router.address, receiveId: echo }],
        caches: [],
      },
    ];
    if (caps !== null) {
      components.push({
        kind: 'capabilities',
        elements: [
          { form: 'value', type: CapabilityType.FORWARDING_METHOD, value: caps.forwarding },
          { form: 'value', type: CapabilityType.ASSIGNMENT_METHOD, value: caps.assignment },
          { form: 'value', type: CapabilityType.PACKET_RETURN_METHOD, value: caps.return },
        ],
      });
    }
    if (options.shutdown) {
      components.push({
        kind: 'command-extension',
        commandType: CommandType.SHUTDOWN,
        data: Buffer.from(o.address.split('.').map(Number)).toString('hex'),
      });
    }
    return { type: 'HERE_I_AM', version: VERSION_2_0, components };
  }

  /** Encodes (and signs) a HERE_I_AM. */
  hereIAmBytes(options: { shutdown?: boolean } = {}): Buffer {
    const o = this.options;
    const password = o.password === undefined ? undefined : o.badMd5 ? `${o.password}x`.slice(-8) : o.password;
    return encodeMessage(this.hereIAmMessage(options), password !== undefined ? { password } : {});
  }

  /** Sends raw bytes to the router. */
  async sendRaw(bytes: Uint8Array): Promise<void> {
    const s = this.socket;
    if (!s) throw new Error('test engine not started');
    await new Promise<void>((resolve, reject) =>
      s.send(bytes, this.options.router.port, this.options.router.address, (e) => (e ? reject(e) : resolve())),
    );
  }

  /** Sends one HERE_I_AM and waits for the I_SEE_YOU (null after timeoutMs: no answer). */
  async hereIAm(options: { shutdown?: boolean; timeoutMs?: number } = {}): Promise<ISeeYouSeen | null> {
    const reply = this.next(options.timeoutMs ?? 1000);
    await this.sendRaw(this.hereIAmBytes(options));
    const msg = await reply;
    if (!msg || msg.type !== 'I_SEE_YOU') return null;
    const identity = findComponent(msg, 'router-identity');
    const view = findComponent(msg, 'router-view');
    this.lastReceiveId = identity?.router.receiveId ?? 0;
    this.changeNumber++;
    const me = view?.caches.find((c) => c.address === this.options.address);
    return {
      receiveId: this.lastReceiveId,
      memberChangeNumber: view?.memberChangeNumber ?? 0,
      engines: view?.caches.map((c) => c.address) ?? [],
      myBuckets: me?.assignment.type === 'hash' ? me.assignment.buckets : [],
      routers: view?.routers ?? [],
      shutdownResponse: findComponent(msg, 'command-extension')?.commandType === CommandType.SHUTDOWN_RESPONSE,
      message: msg,
    };
  }

  /** The next message from the router, or null after timeoutMs. */
  next(timeoutMs: number): Promise<Wccp2Message | null> {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        const i = this.waiting.indexOf(done);
        if (i >= 0) this.waiting.splice(i, 1);
        resolve(null);
      }, timeoutMs);
      const done = (m: Wccp2Message) => {
        clearTimeout(t);
        resolve(m);
      };
      this.waiting.push(done);
    });
  }
}

/**
 * Each engine of `engines` whose address is in `talking` sends a HERE_I_AM every 300 ms (as a real engine does every
 * HERE_I_AM_T) until stop(); both sets are read on every round, so a test adds engines and silences them as it goes.
 */
export function keepTalking(
  engines: ReadonlyMap<string, TestEngine>,
  talking: ReadonlySet<string>,
): { stop(): Promise<void> } {
  let running = true;
  const loop = (async () => {
    while (running) {
      for (const a of talking)
        await engines
          .get(a)
          ?.hereIAm({ timeoutMs: 300 })
          .catch(() => null);
      await new Promise((r) => setTimeout(r, 300));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
    },
  };
}
