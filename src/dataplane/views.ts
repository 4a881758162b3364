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
