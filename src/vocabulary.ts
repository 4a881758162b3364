// The words every layer speaks in, one home each: the methods and modes an admin configures, the cluster decides
// with and the data plane carries out, the service ID ranges, and the wire values behind them. Pure constants and
// tiny functions; it imports only the codec's numbers, so config, cluster, control, dataplane and admin may all
// import it (docs/architecture.md).
import {
  AssignmentCapability,
  ForwardingCapability,
  IP_PROTOCOL_TCP,
  IP_PROTOCOL_UDP,
  ReturnCapability,
  SERVICE_WEB_CACHE,
  ServiceFlag,
  WCCP2_PORT,
} from './wire/wccp2/constants.js';

export { ServiceFlag, WCCP2_PORT };

/** How redirected packets reach an engine (draft 4.4): inside GRE, or by rewriting the MAC address (L2). */
export const FORWARDING_METHODS = ['l2', 'gre'] as const;
export type ForwardingMethod = (typeof FORWARDING_METHODS)[number];
/** How an engine hands back packets it will not serve (draft 4.5). */
export const RETURN_METHODS = ['l2', 'gre'] as const;
export type ReturnMethod = (typeof RETURN_METHODS)[number];
/** How traffic is divided among engines (draft 4.3): 256 hash buckets, or mask/value sets. */
export const ASSIGNMENT_METHODS = ['hash', 'mask'] as const;
export type AssignmentMethod = (typeof ASSIGNMENT_METHODS)[number];
/** Who assigns the buckets: wccpd itself, or the designated engine through REDIRECT_ASSIGN (docs/architecture.md). */
export const AUTHORITIES = ['appliance', 'designated-engine'] as const;
export type Authority = (typeof AUTHORITIES)[number];
/** How wccpd divides the buckets when it assigns them (docs/buckets.md). */
export const ASSIGNMENT_MODES = ['balance', 'consistent', 'primary-standby', 'round-robin'] as const;
export type AssignmentMode = (typeof ASSIGNMENT_MODES)[number];
/** With no usable engine: traffic goes direct (open) or is refused (closed). */
export const FAIL_MODES = ['open', 'closed'] as const;
export type FailMode = (typeof FAIL_MODES)[number];
/**
 * The IP families a service redirects (docs/config.md, `families`): its engines register over IPv4 (WCCPv2), and with
 * L2 forwarding the same engine takes its buckets' IPv6 connections too. Default IPv4 only.
 */
export const ADDRESS_FAMILIES = ['ipv4', 'ipv6'] as const;
export type AddressFamily = (typeof ADDRESS_FAMILIES)[number];
export const DEFAULT_FAMILIES: readonly AddressFamily[] = ['ipv4'];
/** The methods and modes one service group runs with: what the config names, the cluster decides by and reports. */
/**
 * Opt-in interoperability workarounds, per service (docs/config.md; docs/architecture.md, decision 4). The one there
 * is, `squid-capability-stride`, is written by control/translate.ts.
 */
export const QUIRKS = ['squid-capability-stride'] as const;
export type Quirk = (typeof QUIRKS)[number];

export interface ServiceMethods {
  readonly forwarding: ForwardingMethod;
  readonly return: ReturnMethod;
  readonly assignment: AssignmentMethod;
  readonly authority: Authority;
  readonly mode: AssignmentMode;
  readonly failMode: FailMode;
}
/** Service Type of Service Info: the well-known web-cache service, or a dynamic one the engines define. */
export type ServiceKind = 'standard' | 'dynamic';

/** What defines a service group on the wire (Service Info), as the cluster keeps it and the admin views show it.
 * Standard service 0 is TCP port 80. */
export interface ServiceDefinition {
  readonly type: ServiceKind;
  readonly id: number;
  readonly priority: number;
  readonly protocol: number;
  readonly flags: number;
  /** Up to 8 ports, no zeros. */
  readonly ports: readonly number[];
}

/** The capability bits (Capability Info, draft 5.6.9) that offer each method. */
export const FORWARDING_CAPABILITY: Readonly<Record<ForwardingMethod, number>> = {
  gre: ForwardingCapability.GRE,
  l2: ForwardingCapability.L2,
};
export const RETURN_CAPABILITY: Readonly<Record<ReturnMethod, number>> = {
  gre: ReturnCapability.GRE,
  l2: ReturnCapability.L2,
};
export const ASSIGNMENT_CAPABILITY: Readonly<Record<AssignmentMethod, number>> = {
  hash: AssignmentCapability.HASH,
  mask: AssignmentCapability.MASK,
};

/** Service IDs: 0 is the web-cache service (TCP 80); 1-50 are kept for other well-known services; 51-255 dynamic. */
export const WEB_CACHE_SERVICE_ID = SERVICE_WEB_CACHE;
export const FIRST_DYNAMIC_SERVICE_ID = 51;
export const LAST_SERVICE_ID = 255;

/** The web-cache service's priority (Service Info, draft 5.6.2); a dynamic service configured without one gets it too.
 * */
export const WEB_CACHE_PRIORITY = 240;

/** The IP protocols a service redirects, by the name an admin writes, and their numbers as Service Info carries them.
 * */
export const SERVICE_PROTOCOLS = ['tcp', 'udp'] as const;
export type ServiceProtocol = (typeof SERVICE_PROTOCOLS)[number];
export const IP_PROTOCOL: Readonly<Record<ServiceProtocol, number>> = { tcp: IP_PROTOCOL_TCP, udp: IP_PROTOCOL_UDP };

/**
 * Squid's default ports (squid.conf `http_port 3128`, `icp_port 3130`): where the probes and the warm-up broker reach
 * an engine, and where the broker listens as the engines' sibling (`cache_peer <router> sibling 3128 3130`), unless
 * the config names others.
 */
export const SQUID_HTTP_PORT = 3128;
export const SQUID_ICP_PORT = 3130;

/** The admin API's default address: the config's `admin.listen`, and where wccpctl looks without --url. */
export const ADMIN_DEFAULT_HOST = '127.0.0.1';
export const ADMIN_DEFAULT_PORT = 8080;

/** True for a dynamic service (51-255), whose definition comes from the config or from its engines. */
export function isDynamicService(id: number): boolean {
  return id >= FIRST_DYNAMIC_SERVICE_ID;
}
