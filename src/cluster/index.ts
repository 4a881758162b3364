// The cluster's public surface: service groups, engine lifecycle, snapshots and admin commands.
export { Cluster } from './cluster.js';
export type { ClusterOptions, ClusterSnapshot, ServiceCommandResult, ServicePlanOutcome } from './cluster.js';
export type { BucketMove, Plan, PlanChange, PlanLoad, PlannedEngine, RebalanceChange } from './plan.js';
export { ServiceGroup } from './service-group.js';
export type { LoadAwarePort, LoadOutcome } from './table-keeper.js';
export { loadReason } from './table-keeper.js';
export { DEFAULT_LOAD_AWARE, LOAD_MEASURES, sumLoads, windowEnd } from './load-aware.js';
export type { BucketCount, LoadAwareSettings, LoadMeasure, LoadMemory, PeerLoads, WindowLoad } from './load-aware.js';
export { MAX_ENGINES } from '../buckets/table.js';
export { VOUCHED_SILENCE } from './lifecycle.js';
export { MAX_GONE_WEIGHTS } from './admin-overrides.js';
export { ENGINE_STATES, answers, keepsRoute } from './engine-state.js';
export type { AssignVerdict, CommandResult } from './service-group.js';
export {
  HealthTracker,
  PROBE_KINDS,
  ICP_DRAIN_REASON,
  CONNECT_ATTEMPTS,
  CONNECT_RETRY_MS,
  REPORTED_LOSS_RATES,
  detectionTimes,
  falseVerdictPerHour,
  hardWorstCaseDetectionMs,
  probeFailureChance,
  verdictFigures,
  worstCaseDetectionMs,
} from './health.js';
export type { HealthChange, KindHealth } from './health.js';
export { capabilityMismatch } from './capabilities.js';
export { compareSquidOrder, designatedEngineOf, squidOrderKey } from './squid-order.js';
export type * from './types.js';
export { MaintenanceBook } from './maintenance.js';
export type { MaintenanceWindowState } from './maintenance.js';
