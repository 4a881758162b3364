// The validated configuration the daemon runs with: every default filled in, durations in milliseconds,
// addresses checked. Produced only by parseConfig/loadConfig. What a part's own settings are (a probe kind's knobs,
// a service's warm-up) is declared once, by that part; the config names them and adds only what the file says more.
import type { Cidr } from '../address.js';
import type { ProbeKind, ProbeSettings } from '../cluster/types.js';
import type { LoadAwareSettings } from '../cluster/load-aware.js';
import type { AddressFamily, Quirk, ServiceKind, ServiceMethods, ServiceProtocol } from '../vocabulary.js';
import type { WarmupSettings } from '../warmup/policy.js';
import type { ConfigProblem } from './config-error.js';
import type { ConntrackScope, DataplaneBackend } from '../dataplane/settings.js';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
/**
 * logging.format: `journal` (each line `<N>` + message, the priority journald reads with SyslogLevelPrefix), `json`
 * (pino's JSON lines, for log shippers), `pretty` (colour, for people); `auto`: journal when stdout is the journal
 * (JOURNAL_STREAM names it, as systemd sets it), else json.
 */
export type LogFormat = 'auto' | 'journal' | 'json' | 'pretty';
export const LOG_FORMATS: readonly LogFormat[] = ['auto', 'journal', 'json', 'pretty'];

/** One probe kind's knobs (cluster/types ProbeSettings) and the engine port it probes. */
export interface ProbeConfig extends ProbeSettings {
  /** The engine port probed: HTTP and TCP (default 3128, Squid's http_port) or ICP (default 3130); null for ICMP. */
  readonly port: number | null;
}

export type HealthConfig = Readonly<Record<ProbeKind, ProbeConfig>>;

/**
 * A service's warm-up settings (docs/warmup.md); in force only with a top-level `warmup.listen`. The broker's
 * stickyMs is not configured: the daemon gives it the service's historyWindowMs.
 */
export type ServiceWarmupConfig = Omit<WarmupSettings, 'stickyMs'>;

/** The warm-up broker (docs/warmup.md); null listen = no broker. */
export interface WarmupConfig {
  readonly listen: string | null;
  readonly icpPort: number;
  readonly httpPort: number;
  /** Bytes per second over all relays at once; 0: no limit. */
  readonly maxRelayRate: number;
  /** An object larger than this is not relayed (504 to the engine, which goes to the origin). */
  readonly maxObjectBytes: number;
}

/** A maintenance window (services[i].maintenance[j]): drain at each cron match for durationMs. */
export interface MaintenanceWindowConfig {
  /** node-cron text: 5 fields, or 6 with seconds first. */
  readonly cron: string;
  readonly durationMs: number;
  readonly action: 'drain';
  /** The engine it drains; null = every engine of the service. */
  readonly engine: string | null;
  /** IANA time zone the cron text is read in; null = the system's. */
  readonly timezone: string | null;
}

export interface ServiceConfig extends ServiceMethods {
  /** Service ID: 0 = web-cache, 51-255 dynamic. */
  readonly id: number;
  readonly type: ServiceKind;
  /** `web-cache` for 0, `dynamic-<id>` otherwise; used in summaries and logs. */
  readonly name: string;
  readonly protocol: ServiceProtocol;
  /** Ports redirected (1 to 8 entries); [80] for web-cache. Destination ports unless `portsSource`. */
  readonly ports: readonly number[];
  /** The Service Info flag Ports Source: `ports` are source ports (e.g. return traffic from an origin's port 80). */
  readonly portsSource: boolean;
  /**
   * Service priority (0-255, highest matched first); 240 for web-cache. null: a dynamic service takes the priority
   * its engines announce in Service Info; a configured one is expected of them.
   */
  readonly priority: number | null;
  /** MD5 security password (at most 8 octets), or null for no security. */
  readonly password: string | null;
  readonly clientInterfaces: readonly string[];
  /** The IP families whose connections the data plane redirects (at least one; default ipv4 only). */
  readonly families: readonly AddressFamily[];
  /** Other routers of this service group (IPv4), listed in our Router View: the service's own `peers`, then the
   * addresses of the top-level `peers` not already listed. */
  readonly peers: readonly string[];
  /** Engine address -> assignment weight, overriding the weight the engine announces. */
  readonly weights: Readonly<Record<string, number>>;
  /** primary-standby: how long a returning primary must stay usable before traffic moves back to it. */
  readonly failbackHoldMs: number;
  /** How long a departed engine's buckets are remembered, so it gets them back if it returns. */
  readonly historyWindowMs: number;
  readonly engines: {
    readonly allow: readonly Cidr[];
    /** HERE_I_AMs before an engine that never echoes a Receive ID is usable; 0 = strict. */
    readonly lenientReceiveId: number;
  };
  readonly quirks: readonly Quirk[];
  readonly warmup: ServiceWarmupConfig;
  /** Load-aware assignment (docs/buckets.md); `enabled: false` unless the section is given. */
  readonly loadAware: LoadAwareSettings;
  readonly maintenance: readonly MaintenanceWindowConfig[];
}

/** Another gateway in front of the same engines: its Router ID and its admin API, read to compare tables. */
export interface PeerConfig {
  /** The peer's router.address (IPv4): listed in every service's Router View. */
  readonly address: string;
  /** The peer's admin API base URL (http or https), e.g. http://192.0.2.2:8080. */
  readonly api: string;
}

export interface Config {
  /** The file the configuration was read from (as given). */
  readonly file: string;
  readonly router: { readonly address: string; readonly port: number };
  readonly admin: {
    readonly listen: { readonly host: string; readonly port: number };
    /** Bearer token for changes; null = every change is refused. Read from tokenFile by loadConfig. */
    readonly token: string | null;
    readonly tokenFile: string | null;
    /** Names (lower case) the admin server answers to besides its listen address (DNS rebinding protection). */
    readonly hosts: readonly string[];
    /** Event-stream (SSE) clients at once; more get 503. */
    readonly eventClients: number;
  };
  readonly logging: { readonly level: LogLevel; readonly format: LogFormat };
  readonly stateDir: string;
  readonly dataplane: {
    readonly backend: DataplaneBackend;
    /**
     * nft backend: `all` leaves conntrack tracking every packet (default); `services` marks packets no service can
     * claim `notrack`, so unrelated forwarded traffic skips conntrack (docs/dataplane/nft.md, "Unrelated traffic").
     */
    readonly conntrack: ConntrackScope;
    /**
     * ingress backend: its per-service flow map (docs/dataplane/ingress.md, "The ingress backend"). `max` entries per
     * service (a full map still redirects new flows, by the table, without stickiness); a flow keeps its engine while
     * its client sends within `idleMs` of its last packet (whole seconds: the flow map's timeout counts seconds).
     * Defaults with every other backend (not used there).
     */
    readonly flows: { readonly max: number; readonly idleMs: number };
  };
  /** settleMs: at most one bucket table change per service per this long (0 = every change at once). */
  readonly timers: { readonly hereIAmMs: number; readonly settleMs: number };
  readonly health: HealthConfig;
  readonly warmup: WarmupConfig;
  readonly services: readonly ServiceConfig[];
  /** The other gateways of a pair (or more); their addresses are also in every service's `peers`. */
  readonly peers: readonly PeerConfig[];
  /** Keys still read under an old name or form, each with what to write instead (configWarnings says so). */
  readonly deprecated: readonly ConfigProblem[];
}
