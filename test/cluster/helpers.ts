// Shared builders for cluster tests: a fake clock, a service config, a Squid-like HERE_I_AM.
import type { Cluster, HereIAm, HereIAmOutcome, ServiceGroupConfig } from '../../src/cluster/index.js';

export interface FakeClock {
  /** Monotonic ms (src/clock.ts). */
  now(): number;
  /** Wall-clock ms since the epoch. */
  wall(): number;
  /** Time passes: both clocks move (a negative `ms` moves the monotonic one back, which the real one never does). */
  advance(ms: number): void;
  /** The wall clock alone is set (NTP, `date -s`, a VM resumed): the monotonic one does not move. */
  stepWall(ms: number): void;
}

/** A clock the test moves by hand; its wall clock starts at `wallStart`, apart from its monotonic `start`. */
export function fakeClock(start = 1_000_000, wallStart = Date.UTC(2026, 11, 2, 1, 0, 0)): FakeClock {
  let t = start;
  let w = wallStart;
  return {
    now: () => t,
    wall: () => w,
    advance: (ms) => {
      t += ms;
      w += ms;
    },
    stepWall: (ms) => {
      w += ms;
    },
  };
}

export function serviceConfig(over: Partial<ServiceGroupConfig> = {}): ServiceGroupConfig {
  return {
    id: 0,
    forwarding: 'l2',
    return: 'l2',
    assignment: 'hash',
    authority: 'appliance',
    mode: 'balance',
    failMode: 'open',
    lenientReceiveId: 2,
    historyWindowMs: 600_000,
    ...over,
  };
}

/** A HERE_I_AM as Squid 5.7 sends it for standard service 0 with l2/l2/hash. */
export function hereIAm(engine: string, over: Partial<HereIAm> = {}): HereIAm {
  return {
    service: { type: 'standard', id: 0, priority: 0, protocol: 0, flags: 0, ports: [] },
    engine,
    weight: 10000,
    status: 0,
    capabilities: { forwarding: 0x2, assignment: 0x1, return: 0x2 },
    receivedId: 0,
    ...over,
  };
}

/**
 * Engines that behave as a strict engine does: each HERE_I_AM echoes the Receive ID of the last I_SEE_YOU it got,
 * and the router answers as control/router.ts does (a counted HERE_I_AM, a refusal that is answered, a stale one
 * when the cluster says to).
 */
export function echoingEngines(
  cluster: Cluster,
  serviceId = 0,
): (engine: string, over?: Partial<HereIAm>) => HereIAmOutcome {
  const last = new Map<string, number>();
  return (engine, over = {}) => {
    const out = cluster.hereIAm(hereIAm(engine, { receivedId: last.get(engine) ?? 0, ...over }));
    const answering =
      out.kind === 'stale' ? (out.answer ? 'stale' : null) : out.kind === 'refused' && !out.answer ? null : 'counted';
    const plan = answering === null ? null : cluster.iSeeYou(serviceId, engine, answering);
    if (plan) last.set(engine, plan.receiveId);
    return out;
  };
}

/**
 * Time passing for a cluster whose engines in `live` keep talking: the clock moves in 1 s steps, each step the cluster
 * ticks, and at every multiple of `hereIAmMs` each live engine sends its HERE_I_AM (`beat`).
 */
export function keptAlive(
  cluster: Cluster,
  clock: FakeClock,
  hereIAmMs: number,
  beat: (engine: string) => unknown,
): { live: Set<string>; run(ms: number): void } {
  const live = new Set<string>();
  const run = (ms: number): void => {
    for (let t = 0; t < ms; t += 1000) {
      clock.advance(1000);
      if (clock.now() % hereIAmMs === 0) for (const e of live) beat(e);
      cluster.tick();
    }
  };
  return { live, run };
}
