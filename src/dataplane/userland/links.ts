// Where an engine is on the wire, for L2 forwarding: the device the kernel would use to reach it (it must be directly
// attached), that device's MAC, and the engine's MAC from the neighbour table (resolved first when it is not there).
import { createSocket } from 'node:dgram';
import type { EngineAddress } from '../../buckets/table.js';
import { DataplaneError } from '../errors.js';
import type { Exec } from '../kernel/exec.js';
import { engineSegments, execBatch, type EngineSegment } from '../kernel/routes.js';

export interface EngineLink {
  readonly device: string;
  readonly deviceMac: string;
  readonly engineMac: string;
  /** The device's MTU: the largest IPv4 packet a re-injected frame may carry. Absent = the backend's default. */
  readonly mtu?: number;
}

export interface Links {
  engineLink(engine: EngineAddress): Promise<EngineLink>;
  /** The MTU of the device the kernel routes `address` through (for GRE, which is sent by the kernel's IP layer). */
  routeMtu?(address: EngineAddress): Promise<number>;
  /**
   * Where each engine is now (the device the kernel reaches it through, or why it is not on-link), in one look-up for
   * all of them: after a link, address or route change, whether an engine moved (docs/userland.md).
   */
  engineSegments?(engines: readonly EngineAddress[]): Promise<ReadonlyMap<EngineAddress, EngineSegment>>;
}

interface RouteJson {
  dev?: string;
  gateway?: string;
}
interface LinkJson {
  address?: string;
  mtu?: number;
}
interface NeighJson {
  lladdr?: string;
  state?: string[];
}

const USABLE = new Set(['REACHABLE', 'STALE', 'DELAY', 'PROBE', 'PERMANENT', 'NOARP']);

/** Makes the kernel resolve the engine's MAC: a UDP datagram to the discard port (no ping binary needed). */
function poke(engine: EngineAddress): Promise<void> {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    s.on('error', () => {
      s.close();
      resolve();
    });
    s.send(Buffer.alloc(0), 9, engine, () => {
      s.close();
      resolve();
    });
  });
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Links from `ip -j`; tries up to `attempts` times (50 ms apart) for the neighbour entry. */
export function ipLinks(exec: Exec, attempts = 20): Links {
  const deviceOf = async (address: EngineAddress): Promise<RouteJson & { dev: string }> => {
    const routes = JSON.parse(await exec('ip', ['-j', 'route', 'get', address])) as RouteJson[];
    const route = routes[0];
    if (route?.dev === undefined) {
      throw new DataplaneError('engine-not-attached', `no route to engine ${address}`);
    }
    return { ...route, dev: route.dev };
  };
  const linkOf = async (device: string): Promise<LinkJson> =>
    (JSON.parse(await exec('ip', ['-j', 'link', 'show', 'dev', device])) as LinkJson[])[0] ?? {};
  return {
    engineSegments: (engines) => engineSegments(execBatch(exec), engines),
    async routeMtu(address) {
      const mtu = (await linkOf((await deviceOf(address)).dev)).mtu;
      if (mtu === undefined)
        throw new DataplaneError('command-failed', `ip link did not report the MTU towards ${address}`);
      return mtu;
    },
    async engineLink(engine) {
      const route = await deviceOf(engine);
      if (route.gateway !== undefined) {
        throw new DataplaneError(
          'engine-not-attached',
          `engine ${engine} is reached via ${route.gateway} on ` +
            `${route.dev}, not directly: L2 forwarding needs the engine on an attached segment (use forwarding: gre)`,
        );
      }
      const link = await linkOf(route.dev);
      const deviceMac = link.address;
      if (deviceMac === undefined) {
        throw new DataplaneError('engine-not-attached', `device ${route.dev} (towards engine ${engine}) has no MAC`);
      }
      for (let i = 0; i < attempts; i++) {
        const neigh = JSON.parse(
          await exec('ip', ['-j', 'neigh', 'show', 'to', engine, 'dev', route.dev]),
        ) as NeighJson[];
        const entry = neigh.find((n) => n.lladdr !== undefined && (n.state ?? []).some((st) => USABLE.has(st)));
        if (entry?.lladdr !== undefined) {
          return {
            device: route.dev,
            deviceMac,
            engineMac: entry.lladdr,
            ...(link.mtu === undefined ? {} : { mtu: link.mtu }),
          };
        }
        await poke(engine);
        await pause(50);
      }
      throw new DataplaneError(
        'engine-not-attached',
        `engine ${engine} does not answer ARP on ${route.dev}: cannot learn its MAC for L2 forwarding`,
      );
    },
  };
}
