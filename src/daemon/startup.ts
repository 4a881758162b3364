// What wccpd reads as it starts: the config's warnings (again at each reload), the state file, the cluster and
// warm-up seeded from it, and the warm-up broker's options.
import type { Cluster } from '../cluster/index.js';
import type { WallClock } from '../clock.js';
import type { Config } from '../config/index.js';
import { configWarnings, hostInterfaces } from '../config/index.js';
import { loadState } from '../state/index.js';
import type { LoadedState } from '../state/index.js';
import { restoredTime, toMemory } from '../state/persist.js';
import type { Log } from '../log.js';
import type { RunningWarmup } from '../warmup/index.js';
import { SQUID_HTTP_PORT, SQUID_ICP_PORT } from '../vocabulary.js';

/** The config's warnings (a config wccpd runs with, but likely not what was meant), one line each. */
export async function warnConfig(config: Config, log: Log): Promise<void> {
  const file = config.file;
  for (const w of configWarnings(config, { interfaces: await hostInterfaces() }))
    log.warn({ file, key: w.key }, `${file}: ${w.key}: ${w.message}`);
}

/** The state file; its bad generations are logged (the state read is then the previous one, or empty). */
export async function readState(stateDir: string, log: Log): Promise<LoadedState> {
  const loaded = await loadState(stateDir);
  for (const bad of loaded.bad)
    log.warn({ file: bad.file, reason: bad.reason }, `state file ${bad.file} is bad: ${bad.reason}`);
  return loaded;
}

/** Seeds the configured services and their warm-up from the state read. */
export function restoreState(
  loaded: LoadedState,
  to: { cluster: Cluster; warmup: RunningWarmup | null; clock: WallClock; log: Log; stateDir: string },
): void {
  const { cluster, warmup, clock } = to;
  const savedAt = loaded.state.savedAt;
  for (const s of loaded.state.services)
    if (cluster.hasService(s.id)) cluster.restore(toMemory(s, (at) => restoredTime(clock, at, savedAt)));
  // A warm-up running when wccpd stopped goes on with the time it had left (docs/warmup.md).
  // Without saved sessions (an older file) the persisted owners still matter: getting their buckets back is no gain.
  for (const s of loaded.state.services)
    warmup?.policy.restore(s.id, s.warmup ?? { sessions: [], gained: [] }, s.table.buckets);
  to.log.info({ stateDir: to.stateDir, source: loaded.source, services: loaded.state.services.length }, 'state loaded');
}

/** The warm-up broker's listeners and limits, by `warmup` (docs/warmup.md); null without `warmup.listen`. */
export function brokerOptions(config: Config): Parameters<RunningWarmup['start']>[0] | null {
  if (config.warmup.listen === null) return null;
  return {
    listen: config.warmup.listen,
    icpPort: config.warmup.icpPort,
    httpPort: config.warmup.httpPort,
    sourceIcpPort: config.health.icp.port ?? SQUID_ICP_PORT,
    sourceHttpPort: config.health.http.port ?? SQUID_HTTP_PORT,
    limits: { maxRelayRate: config.warmup.maxRelayRate, maxObjectBytes: config.warmup.maxObjectBytes },
  };
}
