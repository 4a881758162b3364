// The data plane's one interface. The cluster decides; a Redirector moves the packets. Backends: nft (kernel fast
// path), ingress (kernel, L2 in the client interfaces' netdev ingress hook), userland (pcap + raw sockets), memory
// (tests). The data plane never calls back into the cluster.
import type { BucketTable, EngineAddress } from '../buckets/table.js';
import type { MaskValueSet } from '../buckets/mask.js';
import { DataplaneError } from './errors.js';

import { DEFAULT_FAMILIES, type AddressFamily, type FailMode, type ForwardingMethod } from '../vocabulary.js';
import type { FastPathStatus, MovedBucket, RestoredObjects, UserlandStatus } from './views.js';

export type { FailMode, ForwardingMethod } from '../vocabulary.js';
export type { Explanation, FastPathStatus, MovedBucket, RestoredObjects } from './views.js';
export type { MaskElement, MaskValueSet, ValueElement } from '../buckets/mask.js';

/** Everything a backend needs to redirect one service group's traffic. */
export interface ServiceRedirect {
  readonly serviceId: number;
  /** IP protocol number of the service (6 = TCP; standard service 0 is TCP port 80). */
  readonly protocol: number;
  /** Ports of the service; empty = every port of the protocol. */
  readonly ports: readonly number[];
  /** True when `ports` are source ports (service flag Ports Source). */
  readonly portsAreSource: boolean;
  /** The service flags (hash fields), as in Service Info. */
  readonly serviceFlags: number;
  /**
   * Service priority (0-255). Where services overlap, the highest priority claims a connection first (equal
   * priorities: the lower service id first); a connection claimed by one service is never touched by another.
   */
  readonly priority: number;
  readonly forwarding: ForwardingMethod;
  readonly failMode: FailMode;
  /** Only traffic arriving on these interfaces is redirected. */
  readonly clientInterfaces: readonly string[];
  /**
   * The IP families whose connections are redirected (config `families`); absent: IPv4 only. An IPv6 connection's
   * bucket is that of its folded address (src/buckets/hash.ts `addressKey`), in the same table, to the same engine
   * (its MAC address): IPv6 needs forwarding l2 and assignment hash (the config refuses the others).
   */
  readonly families?: readonly AddressFamily[];
  /** The current assignment. A bucket whose engine is not in `engines` is treated as unassigned. */
  readonly table: BucketTable;
  /**
   * The live engines of the group (usable or draining): traffic sourced by any of them is never redirected (draft
   * 4.10), and connections already steered to one keep their path until they end. Only engines that hold buckets in
   * `table` receive new connections.
   */
  readonly engines: readonly EngineAddress[];
  /**
   * Mask assignment (draft 4.11.2): present exactly when the service's assignment method is mask; the Mask/Value Sets
   * the engines were sent (src/buckets/mask.ts, in value order). A backend then steers a new connection by them, not
   * by `table`: for each set in order, AND the client packet's source address, destination address, source port and
   * destination port with the set's mask, compare with each value in order; the first equal value names the engine
   * (`matchMask` is the reference). No match, or an engine not in `engines`: forwarded normally (unassigned), or
   * refused when failMode is closed and no value names an engine of `engines`. Squid masks one field with 0x1741:
   * the destination address (standard service, destination hash flags) or the source address (source hash flags).
   */
  readonly maskSets?: readonly MaskValueSet[];
}

/** The families a service redirects: its own, or IPv4 only. */
export function familiesOf(service: Pick<ServiceRedirect, 'families'>): readonly AddressFamily[] {
  return service.families ?? DEFAULT_FAMILIES;
}

/** The services of one applyAll() by id, refusing a service listed twice (which of the two would be meant?). */
export function byServiceId(services: readonly ServiceRedirect[]): Map<number, ServiceRedirect> {
  const out = new Map<number, ServiceRedirect>();
  for (const s of services) {
    if (out.has(s.serviceId))
      throw new DataplaneError('unsupported-service', `service ${s.serviceId} is listed twice in one apply`);
    out.set(s.serviceId, s);
  }
  return out;
}

export interface BucketCounters {
  readonly packets: number;
  readonly bytes: number;
}

export interface RedirectCounters {
  /** Per service id: 256 entries, packets/bytes of new connections classified into each bucket. */
  readonly buckets: ReadonlyMap<number, readonly BucketCounters[]>;
  /** Per service id, per engine address: packets/bytes redirected. */
  readonly engines: ReadonlyMap<number, ReadonlyMap<EngineAddress, BucketCounters>>;
  /**
   * Per service id, where the backend counts them: new connections refused (fail closed) and new connections whose
   * bucket had no engine (forwarded normally).
   */
  readonly services?: ReadonlyMap<number, { readonly denied: BucketCounters; readonly unassigned: BucketCounters }>;
  /**
   * Per service id, where the backend keeps a flow map of its own (ingress): new flows its full flow map could not
   * record (still redirected by the table, without stickiness). Absent with the backends that keep none, so their
   * status shows no figure rather than a made-up 0.
   */
  readonly flowsFull?: ReadonlyMap<number, BucketCounters>;
  /**
   * The IPv6 part of `buckets`, `engines` and `services` (which count both families), per service that redirects
   * IPv6, where the backend counts families apart (nft). Absent: no such service, or a backend that does not.
   */
  readonly ipv6?: {
    readonly buckets: ReadonlyMap<number, readonly BucketCounters[]>;
    readonly engines: ReadonlyMap<number, ReadonlyMap<EngineAddress, BucketCounters>>;
    readonly services: ReadonlyMap<number, { readonly denied: BucketCounters; readonly unassigned: BucketCounters }>;
  };
}

/** What a counter read covers: per-engine and per-service counters always, per-bucket ones only where asked. */
export interface CounterScope {
  /**
   * The services whose 256 per-bucket counters to read; default every service. The nft backend lists one set per
   * service for them, where the rest is one listing: the status and the metrics ask for none.
   */
  readonly buckets?: readonly number[];
}

/** What a backend says of itself in the admin views (`status.dataplane`), beside what every backend reports. */
export interface BackendStatus {
  /** How it runs, in words ('' when there is nothing to say): its packet I/O, its flow map's size. */
  readonly detail: string;
  readonly userland?: UserlandStatus;
}

/** One backend as the data plane's entry point (index.ts) plugs it in: its config name and how it is made. */
export interface BackendDescriptor<Options> {
  readonly name: string;
  create(options?: Options): Redirector;
}

export interface Redirector {
  /** The backend's config name ('nft', 'ingress', 'userland', 'none'; tests' doubles have their own). */
  readonly name: string;
  /** True for a backend that puts no table anywhere (`none`): no table is ever in force. */
  readonly redirectsNothing?: boolean;
  /**
   * True for a backend whose rules sit in the IP hooks (nft, userland's guard), which br_netfilter makes bridged
   * frames pass through: the daemon then watches br_netfilter (docs/operations.md).
   */
  readonly inIpHooks?: boolean;
  /** What it says of itself in the admin views; absent: nothing more than every backend reports. */
  status?(): BackendStatus;
  /** Prepares the backend; idempotent over a crashed run's leftovers. */
  start(): Promise<void>;
  /** Applies a service's table atomically: either all of it is in force afterwards, or the previous one still is. */
  apply(service: ServiceRedirect): Promise<void>;
  /**
   * Applies several services' tables as one change: either all of them are in force afterwards, or every previous one
   * still is (nft: one transaction and one ip batch), so services that changed at the same moment (a TPROXY pair)
   * never steer by a mix of old and new tables. An empty list changes nothing; a service listed twice is an error.
   */
  applyAll(services: readonly ServiceRedirect[]): Promise<void>;
  /** Stops redirecting a service (its traffic flows direct). */
  removeService(serviceId: number): Promise<void>;
  /** Removes everything the backend installed. */
  stop(): Promise<void>;
  /** The data plane's counters; `buckets` where the scope asks (a backend may return more). */
  counters(scope?: CounterScope): Promise<RedirectCounters>;
  /** The kernel objects it put back after someone else removed them (the nft backend's ip rules and routes). */
  restored?(): RestoredObjects;
  /** The software fast path (nftables flowtable), where the backend has one to report; null before start(). */
  fastPath?(): FastPathStatus | null;
  /**
   * Per service id, its buckets in a move (at most 256 a service, by bucket number), where the backend records flows
   * only where a bucket moved (ingress: a TCP service hashed on the destination); a service it does not list keeps
   * no moves (every connection recorded, or conntrack's).
   */
  bucketMoves?(): ReadonlyMap<number, readonly MovedBucket[]>;
}
