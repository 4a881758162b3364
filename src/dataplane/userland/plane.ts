// The userland backend's state as values: what one apply() decided for a service (ServiceState, never changed; the
// next apply() builds a new one) and the plane of every service's state, swapped whole. Plus the pure rules over
// them: a service's capture filter, its effective table, and which service owns a packet when services overlap.
import { BUCKET_COUNT, type BucketTable, type EngineAddress } from '../../buckets/table.js';
import { DataplaneError } from '../errors.js';
import type { ServiceRedirect } from '../redirector.js';
import { compareServiceOrder } from '../kernel/rules.js';
import type { CaptureSession } from './native.js';
import { flowKey, type FlowTable } from './flows.js';
import type { GuardMode } from './guard.js';
import type { ParsedPacket } from './packet.js';

export interface MutableCounters {
  packets: number;
  bytes: number;
}

export interface L2Target {
  readonly device: string;
  readonly engineMac: Buffer;
  readonly deviceMac: Buffer;
  readonly mtu: number;
}

/** What outlives an apply(): the service's flows and traffic counters. */
export interface ServiceTraffic {
  readonly flows: FlowTable;
  readonly buckets: readonly MutableCounters[];
  readonly engines: Map<EngineAddress, MutableCounters>;
}

/** What one apply() decided for a service. Never changed: the next apply() builds a new one. */
export interface ServiceState {
  readonly service: ServiceRedirect;
  /** The table with every bucket whose engine is not usable set to null. */
  readonly effective: BucketTable;
  readonly usable: ReadonlySet<EngineAddress>;
  readonly mode: GuardMode;
  readonly l2: ReadonlyMap<EngineAddress, L2Target>;
  /** GRE: the MTU of the device towards each engine (the inner packet may use it less GRE_OVERHEAD). */
  readonly greMtu: ReadonlyMap<EngineAddress, number>;
  readonly captures: ReadonlyMap<string, CaptureSession>;
  readonly traffic: ServiceTraffic;
}

/** A service's next state before it is in force, with the one it replaces (its captures reused or not). */
export interface Prepared {
  readonly next: ServiceState;
  readonly previous: ServiceState | undefined;
  readonly reuse: boolean;
}

/** Every service's state, by id and in priority order: swapped whole by apply() and removeService(). */
export interface Plane {
  readonly byId: ReadonlyMap<number, ServiceState>;
  readonly ordered: readonly ServiceState[];
}

export function planeOf(states: Iterable<ServiceState>): Plane {
  const ordered = [...states].sort((a, b) => compareServiceOrder(a.service, b.service));
  return { byId: new Map(ordered.map((st) => [st.service.serviceId, st] as const)), ordered };
}

export const EMPTY_PLANE: Plane = planeOf([]);

export const zeroBuckets = (): MutableCounters[] =>
  Array.from({ length: BUCKET_COUNT }, () => ({ packets: 0, bytes: 0 }));

/** True when the service's match takes this packet arriving on `device` (what its capture filter selects). */
function takes(s: ServiceRedirect, device: string, p: ParsedPacket): boolean {
  if (!s.clientInterfaces.includes(device) || p.protocol !== s.protocol || s.engines.includes(p.source)) return false;
  if (s.ports.length === 0 || (s.protocol !== 6 && s.protocol !== 17)) return true;
  return s.ports.includes(s.portsAreSource ? p.sourcePort : p.destinationPort);
}

/** The pcap filter for a service's client -> server packets (the subset the shims understand too). */
export function captureFilter(s: ServiceRedirect): string {
  const proto = s.protocol === 6 ? 'tcp' : s.protocol === 17 ? 'udp' : `ip proto ${s.protocol}`;
  if (s.ports.length === 0 || (s.protocol !== 6 && s.protocol !== 17)) return `ip and ${proto}`;
  const dir = s.portsAreSource ? 'src' : 'dst';
  return `ip and ${proto} and (${s.ports.map((p) => `${dir} port ${p}`).join(' or ')})`;
}

export const sameCapture = (a: ServiceRedirect, b: ServiceRedirect): boolean =>
  captureFilter(a) === captureFilter(b) && a.clientInterfaces.join() === b.clientInterfaces.join();

/** The table with every bucket whose engine is not live set to null. */
export function effectiveTable(s: ServiceRedirect, usable: ReadonlySet<EngineAddress>): BucketTable {
  return {
    changeNumber: s.table.changeNumber,
    buckets: s.table.buckets.map((e) => (e !== null && usable.has(e) ? e : null)),
  };
}

/** The live engines new connections may go to: those the mask's values name (mask assignment), else the table's. */
export function receivingEngines(s: ServiceRedirect, usable: ReadonlySet<EngineAddress>): Set<EngineAddress> {
  const named =
    s.maskSets !== undefined ? s.maskSets.flatMap((set) => set.values.map((v) => v.engine)) : s.table.buckets;
  return new Set(named.filter((e): e is EngineAddress => e !== null && usable.has(e)));
}

export function validate(s: ServiceRedirect): void {
  if (!Number.isInteger(s.serviceId) || s.serviceId < 0 || s.serviceId > 255) {
    throw new DataplaneError('unsupported-service', `service id ${s.serviceId} is not 0-255`);
  }
  if (s.table.buckets.length !== BUCKET_COUNT) {
    throw new DataplaneError(
      'unsupported-service',
      `service ${s.serviceId}: the table has ${s.table.buckets.length} buckets, not ${BUCKET_COUNT}`,
    );
  }
  if (s.ports.some((p) => !Number.isInteger(p) || p < 1 || p > 65535)) {
    throw new DataplaneError('unsupported-service', `service ${s.serviceId}: ports must be 1-65535`);
  }
}

export function closeAll(captures: Iterable<CaptureSession>): void {
  for (const c of captures) c.close();
}

/**
 * Overlapping services, as the nft backend does them: a connection belongs to the service that claimed it first
 * (a flow in its table, in either direction), else to the first service in priority order whose match takes the
 * packet. 'mine'; 'theirs' when that service sees the packet itself (its capture, or its kernel reject);
 * 'direct' when it does not: this service's kernel guard dropped the packet, so it is re-sent unchanged.
 */
export function ownerOf(
  plane: Plane,
  st: ServiceState,
  device: string,
  p: ParsedPacket,
  key: string,
): 'mine' | 'theirs' | 'direct' {
  const reverse = flowKey(p.protocol, p.destination, p.destinationPort, p.source, p.sourcePort);
  for (const o of plane.ordered) {
    if (o !== st && (o.traffic.flows.has(key) || o.traffic.flows.has(reverse))) {
      return o.mode === 'redirect' && takes(o.service, device, p) ? 'theirs' : 'direct';
    }
  }
  for (const o of plane.ordered) {
    if (o === st) return 'mine';
    if (takes(o.service, device, p)) return o.mode === 'none' ? 'direct' : 'theirs';
  }
  return 'mine';
}
