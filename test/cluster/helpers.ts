// Shared builders for cluster tests: a fake clock, a service config, a Squid-like HERE_I_AM.
import type { HereIAm, ServiceConfig } from '../../src/cluster/index.js';

export function fakeClock(start = 1_000_000): { now(): number; advance(ms: number): void } {
  let t = start;
  return { now: () => t, advance: (ms) => { t += ms; } };
}

export function serviceConfig(over: Partial<ServiceConfig> = {}): ServiceConfig {
  return {
    id: 0, forwarding: 'l2', return: 'l2', assignment: 'hash', authority: 'appliance', mode: 'balance',
    failMode: 'open', lenientReceiveId: 2, historyWindowMs: 600_000, ...over,
  };
}

/** A HERE_I_AM as Squid 5.7 sends it for standard service 0 with l2/l2/hash. */
export function hereIAm(engine: string, over: Partial<HereIAm> = {}): HereIAm {
  return {
    service: { type: 'standard', id: 0, priority: 0, protocol: 0, flags: 0, ports: [] },
    engine, weight: 10000, status: 0, capabilities: { forwarding: 0x2, assignment: 0x1, return: 0x2 }, receivedId: 0,
    ...over,
  };
}

