// The real wccpd with a warm-up broker on loopback, and its engines: two sources (small siblings, sibling.ts) that
// answer on A's and B's addresses, engines that keep sending HERE_I_AMs, and `join` for one more (a newcomer).
import { freeTcpPort, freeUdpPort, startDaemon, waitFor } from '../helpers/daemon.js';
import type { RunningDaemon } from '../helpers/daemon.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { Sibling } from './sibling.js';

export const A = '127.0.0.11';
export const B = '127.0.0.12';
export const C = '127.0.0.13';

export interface WarmDaemon {
  daemon: RunningDaemon;
  readonly icpPort: number;
  readonly httpPort: number;
  /** The sources on A and B. */
  readonly siblings: readonly Sibling[];
  get<T>(path: string): Promise<T>;
  /** Service 0's bucket table now. */
  buckets(): Promise<(string | null)[]>;
  /** Registers an engine (two HERE_I_AMs, then one every 3 s) and waits until it holds buckets. */
  join(address: string): Promise<void>;
  stop(): Promise<void>;
}

/** wccpd with the broker, and the engines A and B holding every bucket. */
export async function startWarmDaemon(
  warmup = 'warmup: { duration: 5m, peerTimeout: 2s, minSourceHold: 0s }',
): Promise<WarmDaemon> {
  const sourceIcp = await freeUdpPort();
  const sourceHttp = await freeTcpPort();
  const icpPort = await freeUdpPort();
  const httpPort = await freeTcpPort();
  const siblings = [new Sibling(A), new Sibling(B)];
  for (const s of siblings) await s.start(sourceIcp, sourceHttp);
  // A and B join a moment before a newcomer: minSourceHold 0 lets them be its warm sources all the same.
  const daemon = await startDaemon([warmup], {
    top: ['warmup:', '  listen: 127.0.0.1', `  icpPort: ${icpPort}`, `  httpPort: ${httpPort}`],
    health: [`icp: { port: ${sourceIcp} }`, `http: { enabled: false, port: ${sourceHttp} }`],
  });
  const engines: TestEngine[] = [];
  const keepAlive = setInterval(() => {
    for (const e of engines) void e.hereIAm().catch(() => undefined);
  }, 3000);
  const w: WarmDaemon = {
    daemon,
    icpPort,
    httpPort,
    siblings,
    get: async <T>(path: string) => (await (await fetch(`${w.daemon.url}/api/v1/${path}`)).json()) as T,
    buckets: async () => (await w.get<{ buckets: (string | null)[] }>('services/0/buckets')).buckets,
    join: async (address) => {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: w.daemon.udpPort } });
      await e.start();
      engines.push(e);
      await e.hereIAm();
      await e.hereIAm();
      await waitFor(`${address} holding buckets`, async () => ((await w.buckets()).includes(address) ? true : null));
    },
    stop: async () => {
      clearInterval(keepAlive);
      for (const e of engines) await e.stop();
      await w.daemon.stop();
      for (const s of siblings) await s.stop();
    },
  };
  try {
    await w.join(A);
    await w.join(B);
  } catch (e) {
    await w.stop();
    throw e;
  }
  return w;
}

/** An origin address (198.51.100.x) whose bucket (the XOR of its bytes) is b. */
export function addressForBucket(b: number): string {
  return `198.51.100.${198 ^ 51 ^ 100 ^ b}`;
}
