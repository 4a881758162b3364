// What each part is given of the configuration, in that part's own terms: a service group's settings (cluster) and
// each service's warm-up (warmup). The composition root hands them over.
import type { ServiceGroupConfig } from '../cluster/types.js';
import { IP_PROTOCOL, isDynamicService } from '../vocabulary.js';
import type { WarmupSettings } from '../warmup/policy.js';
import type { Config, ServiceConfig } from './types.js';

export function serviceGroupConfig(s: ServiceConfig): ServiceGroupConfig {
  return {
    id: s.id,
    forwarding: s.forwarding,
    return: s.return,
    assignment: s.assignment,
    authority: s.authority,
    mode: s.mode,
    failMode: s.failMode,
    lenientReceiveId: s.engines.lenientReceiveId,
    weights: s.weights,
    historyWindowMs: s.historyWindowMs,
    failbackHoldMs: s.failbackHoldMs,
    peers: s.peers,
    ...(s.loadAware.enabled ? { loadAware: s.loadAware } : {}),
    ...(isDynamicService(s.id)
      ? {
          expect: {
            protocol: IP_PROTOCOL[s.protocol],
            ports: s.ports,
            portsSource: s.portsSource,
            ...(s.priority !== null ? { priority: s.priority } : {}),
          },
        }
      : {}),
  };
}

/** Each service's warm-up settings (docs/warmup.md). */
export function warmupSettings(config: Config): Map<number, WarmupSettings> {
  return new Map(
    config.services.map((s): [number, WarmupSettings] => [
      s.id,
      // A bucket coming back within the history window is the cluster's sticky return: that engine is still warm.
      { ...s.warmup, stickyMs: s.historyWindowMs },
    ]),
  );
}

/** What the router checks per service: its password, the engines it accepts, its quirks. */
export function routerServices(config: Config) {
  return config.services.map((s) => ({
    id: s.id,
    ...(s.password !== null ? { password: s.password } : {}),
    allow: s.engines.allow.map((c) => c.text),
    quirks: s.quirks,
  }));
}

/** Every service's maintenance windows, each keyed `<service>/<index>`. */
export function maintenanceWindows(config: Config) {
  return config.services.flatMap((s) =>
    s.maintenance.map((m, i) => ({
      key: `${s.id}/${i}`,
      service: s.id,
      engine: m.engine,
      cron: m.cron,
      durationMs: m.durationMs,
      timezone: m.timezone,
    })),
  );
}
