// What the data plane reports to the admin views, as plain JSON types free of Node's: the API's types
// (admin/api-types.ts) and the page's checked script use them as declared here.

/** The userland backend's own counters since it started, as the admin views show them (docs/userland.md). */
export interface UserlandStatus {
  /** Packets re-sent on the direct path because their bucket had no engine. */
  readonly bypassed: number;
  /** pcap sessions reopened because their link went down (or was deleted) and is up again. */
  readonly capturesReopened: number;
  /** Packets that could not be sent (raw socket or inject error, or an engine without a known link). */
  readonly sendErrors: number;
  /** Packets whose partial (offloaded) TCP/UDP checksum was completed before sending. */
  readonly checksumsCompleted: number;
  /** Oversized TCP packets (GRO/GSO super-frames) cut to the egress MTU, and the segments they became. */
  readonly segmented: number;
  readonly segments: number;
  /** Oversized packets dropped, by reason (not-tcp, ip-fragment, syn-or-rst, headers-exceed-mtu). */
  readonly oversizeDropped: Readonly<Record<string, number>>;
  /** Packets of a connection another service owns, re-sent unchanged on the direct path. */
  readonly othersPassedOn: number;
  /** Live flows in the flow table, per service. */
  readonly flows: readonly { readonly service: number; readonly flows: number }[];
}

/** Objects a backend put back after someone else removed them, since it started. */
export interface RestoredObjects {
  /** The slots' ip rules, routes and the guard pair (`guard`: times the pair was put back). */
  readonly ipRules: number;
  readonly ipRoutes: number;
  readonly ipGuard: number;
  /**
   * Times a check found an engine on another interface than its redirect (an `ip route` change, a renumbering) and
   * moved the redirect there (docs/dataplane/nft.md, "An engine that moves"); absent: the backend has no such check.
   */
  readonly enginesMoved?: number;
  /** Times the nft tables were put back after someone else deleted them (a firewall reload, docs/dataplane.md). */
  readonly nftTables: number;
  /** Checks that found something missing and could not put it back (a link still down): tried again later. */
  readonly failedChecks: number;
  /**
   * Changes that found an engine of an IPv6 service with no IPv6 neighbour entry (its buckets' IPv6 then go direct,
   * or are refused when failing closed; docs/dataplane/nft.md, "IPv6"), and those engines now; absent: the backend
   * does not redirect IPv6 that way.
   */
  readonly ipv6WithoutNeighbour?: number;
  readonly enginesWithoutIpv6?: readonly string[];
}

/**
 * A bucket in a move (the ingress backend, docs/dataplane/ingress.md "Recorded only where a bucket moved"): its claim
 * changed within the last flows.idle, so a connection older than the move still goes where the bucket went before
 * (recorded at its next packet), a new one where it goes now, until the move ends and the table alone steers the bucket
 * again.
 */
export interface MovedBucket {
  readonly bucket: number;
  /**
   * Where the bucket went before the move: `engine` (engineBefore), `unassigned` (forwarded normally), `refused` (no
   * engine, failing closed), or `gone`: an engine that has left since, whose older connections are reset.
   */
  readonly before: 'engine' | 'unassigned' | 'refused' | 'gone';
  /** The engine that held the bucket before the move; null unless `before` is `engine`. */
  readonly engineBefore: string | null;
  /**
   * Milliseconds until the move ends, from the call (relative, so the backend's clock need not be the caller's); 0 or
   * less: it has ended, and the write that makes the bucket steady is due (or being retried after a failure).
   */
  readonly endsInMs: number;
}

/** What the data plane knows of the software fast path (the API's `status.dataplane.fastPath`). */
export interface FastPathStatus {
  /** The kernel accepts a flowtable. */
  readonly flowtable: boolean;
  /** Whether wccpd offloads established flows to it (docs/dataplane.md says when, and why not yet). */
  readonly used: boolean;
  /** In words, for the log and the status views. */
  readonly detail: string;
}

/** br_netfilter in the gateway (docs/operations.md), as the daemon last checked it. */
export interface BridgeNetfilterState {
  /** br_netfilter is loaded (its sysctls exist) in the gateway's network namespace. */
  readonly loaded: boolean;
  /** net.bridge.bridge-nf-call-iptables is 1: bridged IPv4 frames run the IP hooks. */
  readonly callIptables: boolean;
  /** Bridges in the data plane's path (client interfaces, engines' segments), sorted. */
  readonly bridges: readonly string[];
  /** Bridged frames reach wccpd's hooks: loaded, the sysctl on, and at least one bridge in the path. */
  readonly active: boolean;
}

/** Where a new connection to `address` goes, and why. */
export interface Explanation {
  readonly serviceId: number;
  readonly address: string;
  readonly bucket: number;
  readonly engine: string | null;
  /** The address's family; `why: 'family'`: the service does not redirect it (config `families`), so direct. */
  readonly family: 'ipv4' | 'ipv6';
  readonly why: 'assigned' | 'bypass' | 'closed' | 'unassigned' | 'family';
}
