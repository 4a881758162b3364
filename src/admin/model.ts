// What the admin surfaces (HTTP API, web page, /metrics) read and command. The daemon implements it over the
// cluster's snapshots and commands; admin code never reaches into the cluster directly.
import type { BucketsView, LoadEpochView, EnginesView, EventView, StatusView, WhichView } from './api-types.js';
import type { PlanAnswer, PlanRequest } from './plan-view.js';

export type CommandOutcome =
  | { readonly ok: true; readonly message: string }
  | { readonly ok: false; readonly status: number; readonly message: string };

export interface AdminModel {
  status(): StatusView;
  /** The status with the data plane's packet and byte figures (they need an async read). */
  statusWithTraffic(): Promise<StatusView>;
  /** null when the service is not configured. */
  buckets(service: number): Promise<BucketsView | null>;
  engines(service: number): Promise<EnginesView | null>;
  which(service: number, address: string): WhichView | null;
  recentEvents(limit: number): readonly EventView[];
  /** Calls `listener` for every new event; returns the unsubscribe function. */
  subscribe(listener: (event: EventView) => void): () => void;
  drain(service: number, engine: string): Promise<CommandOutcome>;
  undrain(service: number, engine: string): Promise<CommandOutcome>;
  /** An admin weight for the engine; null clears it (its Assignment Weight, or the configured one, counts again). */
  setWeight(service: number, engine: string, weight: number | null): Promise<CommandOutcome>;
  /** What a join, leave, drain or weight would do to the tables, changing nothing (`wccpctl plan`). */
  plan(request: PlanRequest): PlanAnswer;
  /** The load-aware moves the current window's end would make, per service with loadAware or the one given. */
  planRebalance(service: number | null): Promise<PlanAnswer>;
  /** Load-aware assignment with peers: this gateway's load of window `epoch` of a service, or null (not published). */
  loadEpoch(service: number, epoch: number): LoadEpochView | null;
  /** Load-aware assignment: this gateway's load so far in a service's current window (its peers' plans), or null. */
  loadSoFar(service: number): Promise<LoadEpochView | null>;
}
