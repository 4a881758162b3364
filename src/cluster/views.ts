// What one service group shows of itself, read from its parts: the I_SEE_YOU plan an engine is sent, the snapshot the
// admin views read, the routes the data plane reads, and the memory the state file keeps. Projections only: nothing
// here changes the group.
import { BUCKET_COUNT, bucketsOf, countsByEngine } from '../buckets/table.js';
import type { AdminOverrides } from './admin-overrides.js';
import { keepsRoute } from './engine-state.js';
import type { EngineLifecycle } from './lifecycle.js';
import type { ServiceDefinitionBook } from './service-definition.js';
import { designatedEngineOf } from './squid-order.js';
import type { TableKeeper } from './table-keeper.js';
import type {
  DetectionTimes,
  EngineSnapshot,
  ISeeYouPlan,
  ServiceCounters,
  ServiceGroupConfig,
  ServiceMemory,
  ServiceRoutes,
  ServiceSnapshot,
} from './types.js';

/** A service group's parts, as its projections read them. */
export interface GroupParts {
  readonly config: ServiceGroupConfig;
  readonly routerAddress: string;
  /** HERE_I_AM_T in ms. */
  readonly hereIAmMs: number;
  readonly detection: DetectionTimes | undefined;
  readonly definition: ServiceDefinitionBook;
  readonly engines: EngineLifecycle;
  readonly keeper: TableKeeper;
  readonly overrides: AdminOverrides;
  readonly counters: ServiceCounters;
}

/** The group's routers for the Router View: us first, then the configured peers. */
function routers(g: GroupParts): string[] {
  return [g.routerAddress, ...(g.config.peers ?? []).filter((p) => p !== g.routerAddress)];
}

/** The unicast I_SEE_YOU to `engine`, under Receive ID `receiveId`. */
export function iSeeYouPlan(g: GroupParts, engine: string, receiveId: number): ISeeYouPlan {
  const table = g.keeper.current;
  return {
    service: g.definition.wire(),
    routerAddress: g.routerAddress,
    receiveId,
    engine,
    memberChangeNumber: g.keeper.memberChangeNumber,
    assignmentKey: g.keeper.assignmentKey(g.routerAddress),
    routers: routers(g),
    engines: g.engines.usable().map((r) => ({
      address: r.address,
      weight: g.engines.effectiveWeight(r),
      buckets: bucketsOf(table, r.address),
    })),
    table,
    maskSets: g.keeper.maskSets(),
    capabilities: {
      forwarding: g.config.forwarding,
      assignment: g.config.assignment,
      return: g.config.return,
    },
  };
}

export function serviceSnapshot(g: GroupParts): ServiceSnapshot {
  const { engines: book, overrides } = g;
  const table = g.keeper.current;
  const counts = countsByEngine(table);
  const engines: EngineSnapshot[] = book.records().map((r) => ({
    address: r.address,
    state: r.state,
    flags: {
      noReceiveIdEcho: r.handshake.noEcho,
      adminDrain: overrides.isDrained(r.address),
      weightOverride: overrides.hasWeight(r.address),
      refused: r.refused,
    },
    weight: book.effectiveWeight(r),
    buckets: counts.get(r.address) ?? 0,
    share: (counts.get(r.address) ?? 0) / BUCKET_COUNT,
    lastHereIAm: r.lastHereIAm,
    usableSince: r.usableSince,
    reason: r.reason,
    probeRttMs: book.verdict(r.address).probeRttMs,
    drains: book.drainCauses(r.address, r),
  }));
  // A drained engine that is gone is still listed, so every view shows the drain that awaits it.
  for (const address of overrides.drainedAbsent((a) => book.has(a))) {
    engines.push({
      address,
      state: 'gone',
      flags: {
        noReceiveIdEcho: false,
        adminDrain: true,
        weightOverride: overrides.hasWeight(address),
        refused: null,
      },
      weight: overrides.weightOf(address) ?? 0,
      buckets: 0,
      share: 0,
      lastHereIAm: null,
      usableSince: null,
      reason: 'gone; admin drain kept until undrain',
      probeRttMs: null,
      drains: ['admin'],
    });
  }
  const c = g.config;
  return {
    id: c.id,
    mode: c.mode,
    authority: c.authority,
    failMode: c.failMode,
    forwarding: c.forwarding,
    return: c.return,
    assignment: c.assignment,
    definition: g.definition.current,
    changeNumber: table.changeNumber,
    memberChangeNumber: g.keeper.memberChangeNumber,
    receiveId: book.receiveId,
    designatedEngine: designatedEngineOf(book.usable().map((r) => r.address)),
    buckets: [...table.buckets],
    maskSets: g.keeper.maskSets(),
    engines,
    awaited: g.keeper.awaited(),
    routers: routers(g),
    counters: { ...g.counters },
    detection: g.detection ?? {
      hereIAmMs: 3 * g.hereIAmMs,
      http: null,
      icp: null,
      tcp: null,
      icmp: null,
      probes: [],
    },
  };
}

export function serviceRoutes(g: GroupParts): ServiceRoutes {
  const table = g.keeper.current;
  const present = g.engines
    .records()
    .filter((r) => keepsRoute(r.state))
    .map((r) => r.address);
  return {
    definition: g.definition.current,
    table: { changeNumber: table.changeNumber, buckets: [...table.buckets] },
    ...(g.config.assignment === 'mask' ? { maskSets: g.keeper.maskSets() } : {}),
    targets: [...new Set([...present, ...table.buckets.filter((b): b is string => b !== null), ...g.keeper.awaited()])],
  };
}

/** What to persist: the table, the Receive ID, every engine present or remembered, the admin's overrides. */
export function serviceMemory(g: GroupParts, now: number): ServiceMemory {
  const { engines: book } = g;
  const kept = g.keeper.memory();
  const present = book.arrived().map((r) => ({
    address: r.address,
    weight: book.effectiveWeight(r),
    state: r.state,
    buckets: bucketsOf(kept.table, r.address),
    leftAt: null,
  }));
  const departed = kept.departed
    .filter(([a]) => !book.has(a))
    .map(([address, h]) => ({
      address,
      weight: 0,
      state: 'gone' as const,
      buckets: [...h.buckets],
      leftAt: h.leftAt,
    }));
  const mask = kept.mask;
  return {
    id: g.config.id,
    table: kept.table,
    ...(mask !== null ? { mask: { ...mask, engines: [...mask.engines] } } : {}),
    receiveId: book.receiveId,
    memberChangeNumber: g.keeper.memberChangeNumber,
    engines: [...present, ...departed],
    counters: { ...g.counters },
    ...g.overrides.memory(now),
    ...(kept.load !== undefined ? { load: kept.load } : {}),
  };
}
