// What the health probes promise, as the admin API shows it: how fast each detector notices a dead engine and how
// often loss alone would fool it (docs/health.md). Types only and free of Node's types, so the page's checked script
// (src/admin/page, tsconfig.page.json) reads them through admin/api-types.ts as the cluster declares them.

/**
 * The active health probes (control/probes): an HTTP request the proxy answers itself (OPTIONS, Max-Forwards: 0),
 * TCP connect, ICP query, ICMP echo.
 */
export type ProbeKind = 'http' | 'tcp' | 'icp' | 'icmp';

/**
 * Worst-case detection times (ms): per probe kind interval x fall + timeout (null = disabled); HERE_I_AM 3 x T.
 * `probes` adds, per enabled kind, the hard-evidence bound and the chance of a false verdict (docs/health.md).
 */
export interface DetectionTimes {
  readonly hereIAmMs: number;
  readonly http: number | null;
  readonly icp: number | null;
  readonly tcp: number | null;
  readonly icmp: number | null;
  readonly probes: readonly ProbeVerdictFigures[];
}

/** What a probe kind's settings promise: how fast it notices, and how often loss alone would fool it. */
export interface ProbeVerdictFigures {
  readonly kind: ProbeKind;
  readonly intervalMs: number;
  readonly timeoutMs: number;
  readonly fall: number;
  readonly hardFall: number;
  /** Silence (hang, link cut): interval x fall + timeout. */
  readonly worstCaseMs: number;
  /** Hard evidence (refused, reset, unreachable): interval x hardFall + the round trip. */
  readonly hardWorstCaseMs: number;
  /** Per packet loss rate -> chance that one probe fails on a healthy engine, and that a healthy engine is declared
   * unhealthy within an hour. */
  readonly falseVerdict: readonly { readonly loss: number; readonly probeFailure: number; readonly perHour: number }[];
}
