// The warm-up broker's public surface: the policy, the broker, and the URL-to-destination resolution.
export { DEFAULT_WARMUP, WARM_SOURCES, WarmupPolicy } from './policy.js';
export type {
  Decision,
  MissReason,
  WarmSource,
  WarmupEndReason,
  WarmupEvent,
  WarmupSettings,
  WarmupView,
} from './policy.js';
export { DEFAULT_RELAY_LIMITS, WarmupBroker } from './broker.js';
export type { BrokerOptions, RelayLimits } from './broker.js';
export { DestinationResolver, ipv4Value, systemLookup, urlTarget } from './destination.js';
export type { Lookup, UrlTarget } from './destination.js';
export { IcpAsker } from './icp-client.js';
export type { AskOutcome } from './icp-client.js';
export { RunningWarmup } from './running.js';
