// The control plane: the UDP router and the timers that drive the cluster.
export { WccpRouter } from './router.js';
export type { RouterCounters, RouterOptions, RouterServiceOptions } from './router.js';
export { ClusterTimers } from './timers.js';
export { ClusterEventLog } from './event-log.js';
export { allowlist } from './allowlist.js';
export { iSeeYouMessage, removalQueryMessage, toHereIAm, toRedirectAssign } from './translate.js';
export { MaintenanceScheduler, nodeCronFactory, runningSince, cronStepMs } from './maintenance.js';
export type { CronFactory, CronTask, MaintenanceWindow } from './maintenance.js';
