// The config part's surface: load or parse a configuration, its types, its error, the check-config command.
export { loadConfig } from './load.js';
export { parseConfig } from './parse.js';
export { ConfigError, formatProblem, type ConfigProblem } from './config-error.js';
export { runCheckConfig, type TextSink } from './check-config.js';
export { summarizeConfig, describeService } from './summary.js';
export { configWarnings, EXAMPLE_TOKEN, type HostFacts } from './warnings.js';
export { hostInterfaces } from './host.js';
export * from './types.js';
export { maintenanceWindows, routerServices, serviceGroupConfig, warmupSettings } from './parts.js';
export {
  configDiff,
  RELOAD_KEYS,
  SERVICE_RELOAD_KEYS,
  NOT_COMPARED,
  type ConfigDiff,
  type ReloadKey,
} from './reload.js';
