// Shared builders for cluster tests: a fake clock, a service config, a Squid-like HERE_I_AM, strict engines that echo
// the router's view, time passing while they keep talking, and a cluster on a fake clock with all of them.
import { Cluster } from '../../src/cluster/index.js';
import type {
  ClusterEvent,
  ClusterOptions,
  HereIAm,
  HereIAmOutcome,
  ServiceGroupConfig,
} from '../../src/cluster/index.js';

/** The router's address in the cluster tests (TEST-NET-1). */
export const ROUTER = '192.0.2.1';
/** HERE_I_AM_T, the engines' keepalive interval (the protocol's default, 10 s). */
export const HERE_I_AM_MS = 10_000;

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

export interface TestClusterOptions extends Partial<Omit<ClusterOptions, 'clock' | 'services'>> {
  /** The clock (default: a fresh fakeClock()). */
  readonly clock?: FakeClock;
  /** The one service group, as serviceConfig(service); left out when `services` names them all. */
  readonly service?: Partial<ServiceGroupConfig>;
  readonly services?: readonly ServiceGroupConfig[];
}

/**
 * A Cluster on a fake clock (router ROUTER, HERE_I_AM_T 10 s, one serviceConfig group unless told otherwise), with
 * its events recorded from the start, echoing engines (`say`), a full handshake (`join`: two HERE_I_AMs, the second
 * echoing the I_SEE_YOU's Receive ID), what the tests read of a group (an engine, its bucket count, the table) and
 * time passing while the engines keep talking (`keptAlive`).
 */
export function testCluster(options: TestClusterOptions = {}) {
  const { clock = fakeClock(), service, services = [serviceConfig(service)], ...rest } = options;
  const hereIAmMs = rest.hereIAmMs ?? HERE_I_AM_MS;
  const cluster = new Cluster({ clock, routerAddress: ROUTER, services, ...rest, hereIAmMs });
  const events: ClusterEvent[] = [];
  cluster.onEvent((e) => events.push(e));
  const say = echoingEngines(cluster);
  return {
    clock,
    cluster,
    events,
    say,
    join: (engine: string, over: Partial<HereIAm> = {}): void => {
      say(engine, over);
      say(engine, over);
    },
    engine: (address: string, serviceId = 0) => cluster.service(serviceId)?.engines.find((e) => e.address === address),
    /** How many buckets `address` holds. */
    owned: (address: string, serviceId = 0) =>
      cluster.service(serviceId)?.buckets.filter((b) => b === address).length ?? 0,
    /** A copy of the table, bucket by bucket. */
    buckets: (serviceId = 0) => [...(cluster.service(serviceId)?.buckets ?? [])],
    /** Time passing while the engines in `live` keep talking (keptAlive); `beat` is a plain `say` unless given. */
    keptAlive: (beat: (engine: string) => unknown = (e) => say(e)) => keptAlive(cluster, clock, hereIAmMs, beat),
  };
}

export type TestCluster = ReturnType<typeof testCluster>;
