// The userland backend's numbers: what its parts count (bypassed, send errors, segments, oversize drops, reopened
// sessions, engines followed), the traffic counters each service keeps per bucket and engine, and both as the
// Redirector and the admin views read them.
import type { EngineAddress } from '../../buckets/table.js';
import type { BackendStatus, BucketCounters, RedirectCounters } from '../redirector.js';
import type { UserlandStatus } from '../views.js';
import type { PacketIo } from './native.js';
import type { Plane } from './plane.js';
import { OVERSIZE_REASONS, type OversizeReason } from './segment.js';

/** Numbers beyond the Redirector's counters, for the admin views (/metrics, status) and tests: UserlandStatus's. */
export interface UserlandStats extends Omit<UserlandStatus, 'oversizeDropped' | 'flows'> {
  /** Packets larger than the egress MTU that could not be segmented, dropped, by reason. */
  readonly oversizeDropped: Readonly<Record<OversizeReason, number>>;
  /** Live flows per service id. */
  readonly flows: ReadonlyMap<number, number>;
}

export class UserlandCounters {
  readonly counts = {
    bypassed: 0,
    capturesReopened: 0,
    sendErrors: 0,
    checksumsCompleted: 0,
    segmented: 0,
    segments: 0,
    othersPassedOn: 0,
  };
  /** Engines found on another interface and followed there, and engine look-ups that failed (restored()). */
  readonly moves = { enginesMoved: 0, failedEngineChecks: 0 };
  readonly oversizeDropped = Object.fromEntries(OVERSIZE_REASONS.map((r) => [r, 0])) as Record<OversizeReason, number>;

  stats(plane: Plane): UserlandStats {
    return {
      ...this.counts,
      oversizeDropped: { ...this.oversizeDropped },
      flows: new Map(plane.ordered.map((st) => [st.service.serviceId, st.traffic.flows.size] as const)),
    };
  }

  /** The packet I/O in words once start() loaded it, and the counters as the admin views show them. */
  status(io: PacketIo | null, plane: Plane): BackendStatus {
    const s = this.stats(plane);
    return {
      detail: io === null ? '' : io.native ? 'native pcap and raw-socket' : `native-free shims: ${io.reason}`,
      userland: {
        bypassed: s.bypassed,
        capturesReopened: s.capturesReopened,
        sendErrors: s.sendErrors,
        checksumsCompleted: s.checksumsCompleted,
        segmented: s.segmented,
        segments: s.segments,
        oversizeDropped: { ...s.oversizeDropped },
        othersPassedOn: s.othersPassedOn,
        flows: [...s.flows].map(([service, flows]) => ({ service, flows })),
      },
    };
  }
}

/** Each service's packets and bytes per bucket and per engine, copied. */
export function trafficCounters(plane: Plane): RedirectCounters {
  const buckets = new Map<number, readonly BucketCounters[]>();
  const engines = new Map<number, ReadonlyMap<EngineAddress, BucketCounters>>();
  for (const [id, st] of plane.byId) {
    buckets.set(
      id,
      st.traffic.buckets.map((c) => ({ ...c })),
    );
    engines.set(id, new Map([...st.traffic.engines].map(([e, c]) => [e, { ...c }] as const)));
  }
  return { buckets, engines };
}
