// WCCPv2 numbers, named in the protocol's words. Sources: draft-wilson-wccp-v2 (12-oct-2001) §5, Squid src/wccp2.cc,
// Wireshark epan/dissectors/packet-wccp.c (v2.01 codes); see docs/wire.md.

/** UDP port WCCPv2 control messages are sent to (not IANA assigned). */
export const WCCP2_PORT = 2048;

/**
 * IP protocol numbers (IANA): what a Service Info's Protocol field carries (TCP, UDP), and GRE, which carries
 * redirected packets (draft 4.12.1).
 */
export const IP_PROTOCOL_TCP = 6;
export const IP_PROTOCOL_UDP = 17;
export const IP_PROTOCOL_GRE = 47;

export const VERSION_2_0 = 0x0200;
export const VERSION_2_01 = 0x0201;
export const HEADER_LENGTH = 8;

export const MessageType = {
  HERE_I_AM: 10,
  I_SEE_YOU: 11,
  REDIRECT_ASSIGN: 12,
  REMOVAL_QUERY: 13,
} as const;
export type MessageTypeCode = (typeof MessageType)[keyof typeof MessageType];
export type MessageName = keyof typeof MessageType;

export const ComponentType = {
  SECURITY_INFO: 0,
  SERVICE_INFO: 1,
  ROUTER_ID_INFO: 2,
  WC_ID_INFO: 3,
  RTR_VIEW_INFO: 4,
  WC_VIEW_INFO: 5,
  REDIRECT_ASSIGNMENT: 6,
  QUERY_INFO: 7,
  CAPABILITY_INFO: 8,
  ALT_ASSIGNMENT: 13,
  ASSIGN_MAP: 14,
  COMMAND_EXTENSION: 15,
  /** v2.01 only; decoded as an unknown component (kept raw). */
  ALT_ASSIGNMENT_MAP: 16,
  /** v2.01 only. */
  ADDRESS_TABLE: 17,
} as const;

export const SecurityOption = { NONE: 0, MD5: 1 } as const;
export const MD5_PASSWORD_MAX = 8;
export const MD5_DIGEST_LENGTH = 16;

export const ServiceType = { STANDARD: 0, DYNAMIC: 1 } as const;
/** Service ID of the well-known web-cache service (TCP 80). */
export const SERVICE_WEB_CACHE = 0;

export const ServiceFlag = {
  SRC_IP_HASH: 0x0001,
  DST_IP_HASH: 0x0002,
  SRC_PORT_HASH: 0x0004,
  DST_PORT_HASH: 0x0008,
  PORTS_DEFINED: 0x0010,
  PORTS_SOURCE: 0x0020,
  /** v2.01 */
  REDIRECT_ONLY_PROTOCOL_0: 0x0040,
  SRC_IP_ALT_HASH: 0x0100,
  DST_IP_ALT_HASH: 0x0200,
  SRC_PORT_ALT_HASH: 0x0400,
  DST_PORT_ALT_HASH: 0x0800,
} as const;

/** Web-Cache Identity Element flags (low bits, as Wireshark and Squid use them, not as the draft draws them). */
export const WebCacheFlag = {
  /** U: the bucket data is historical; the web cache has no assignment. */
  HISTORICAL: 0x0001,
  /** Bits holding the assignment data type (value << 1). */
  ASSIGNMENT_TYPE_MASK: 0x0006,
} as const;

export const AssignmentMethod = { HASH: 0, MASK: 1 } as const;
/** Bitmask values of the assignment-method capability. */
export const AssignmentCapability = { HASH: 0x1, MASK: 0x2 } as const;
export const ForwardingCapability = { GRE: 0x1, L2: 0x2 } as const;
export const ReturnCapability = { GRE: 0x1, L2: 0x2 } as const;

export const CapabilityType = {
  FORWARDING_METHOD: 1,
  ASSIGNMENT_METHOD: 2,
  PACKET_RETURN_METHOD: 3,
  /** v2.01: message interval in ms, upper and lower limit (2 x uint16). */
  TRANSMIT_T: 4,
  /** v2.01: timeout scale and RA timer scale (4 x uint8). */
  TIMER_SCALE: 5,
} as const;

export const CommandType = { SHUTDOWN: 1, SHUTDOWN_RESPONSE: 2 } as const;

/** Bucket byte in Assignment Info: 0xFF = unassigned; else web-cache index (low 7 bits) + A flag 0x80. */
export const BUCKET_UNASSIGNED = 0xff;
export const BUCKET_ALTERNATE_FLAG = 0x80;
export const BUCKETS = 256;

/** The protocol's group limits: bucket values index at most 32 caches; 32 routers per service group. */
export const MAX_ROUTERS = 32;
export const MAX_CACHES = 32;
