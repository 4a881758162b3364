// The decoded form of WCCPv2 messages: plain data (numbers, strings, arrays), so values compare with deepEqual and
// print as JSON. Conventions: IPv4 addresses are dotted-quad strings; opaque bytes are lowercase hex strings;
// 32-bit fields are unsigned numbers.
import type { MessageName } from './constants.js';

/** Dotted-quad IPv4 address, e.g. '192.0.2.11'. */
export type Ipv4 = string;
/** Lowercase hex, two digits per byte, no separators. */
export type Hex = string;

export type SecurityInfo =
  | { readonly kind: 'security'; readonly option: 'none' }
  /** digest: 16 bytes as hex; all zero while a message is being signed. */
  | { readonly kind: 'security'; readonly option: 'md5'; readonly digest: Hex };

export interface ServiceInfo {
  readonly kind: 'service';
  readonly serviceType: 'standard' | 'dynamic';
  readonly serviceId: number;
  readonly priority: number;
  readonly protocol: number;
  /** ServiceFlag bits. */
  readonly flags: number;
  /** Exactly 8 ports (0 = unused). */
  readonly ports: readonly number[];
}

export interface RouterIdElement {
  readonly routerId: Ipv4;
  readonly receiveId: number;
}

export interface RouterIdentityInfo {
  readonly kind: 'router-identity';
  readonly router: RouterIdElement;
  readonly sentTo: Ipv4;
  /** Web caches this message is directed to (at most 32). */
  readonly receivedFrom: readonly Ipv4[];
}

export interface MaskElement {
  readonly srcAddrMask: number;
  readonly dstAddrMask: number;
  readonly srcPortMask: number;
  readonly dstPortMask: number;
}

export interface ValueElement {
  readonly srcAddrValue: number;
  readonly dstAddrValue: number;
  readonly srcPortValue: number;
  readonly dstPortValue: number;
  readonly webCache: Ipv4;
}

export interface MaskValueSet {
  readonly mask: MaskElement;
  readonly values: readonly ValueElement[];
}

/** Assignment data of a Web-Cache Identity Element, chosen by flag bits 0x0006. */
export type WebCacheAssignmentData =
  /** Hash: the buckets this cache holds, ascending bucket indexes 0..255 (bucket n = byte n>>3, bit 1<<(n&7)). */
  | { readonly type: 'hash'; readonly buckets: readonly number[] }
  | { readonly type: 'mask'; readonly sets: readonly MaskValueSet[] }
  /**
   * v2.01 types 2 and 3, kept raw: data = the bytes between the flags and the trailing weight and status. Only
   * decodable in a Web-Cache Identity Info component (its length bounds it), not inside a Router View.
   */
  | { readonly type: 'other'; readonly assignmentType: 2 | 3; readonly data: Hex };

export interface WebCacheIdentityElement {
  readonly address: Ipv4;
  readonly hashRevision: number;
  /** Flag bits other than the assignment type bits 0x0006 (U = WebCacheFlag.HISTORICAL). */
  readonly flags: number;
  readonly assignment: WebCacheAssignmentData;
  readonly weight: number;
  readonly status: number;
}

export interface WebCacheIdentityInfo {
  readonly kind: 'web-cache-identity';
  readonly element: WebCacheIdentityElement;
}

export interface AssignmentKey {
  /** The designated web cache. */
  readonly address: Ipv4;
  readonly changeNumber: number;
}

export interface RouterViewInfo {
  readonly kind: 'router-view';
  readonly memberChangeNumber: number;
  readonly assignmentKey: AssignmentKey;
  readonly routers: readonly Ipv4[];
  /** Usable web caches. */
  readonly caches: readonly WebCacheIdentityElement[];
}

export interface WebCacheViewInfo {
  readonly kind: 'web-cache-view';
  readonly changeNumber: number;
  /** Routers the cache knows, with the last Receive ID it got from each. */
  readonly routers: readonly RouterIdElement[];
  readonly caches: readonly Ipv4[];
}

export interface RouterAssignmentElement {
  readonly routerId: Ipv4;
  readonly receiveId: number;
  readonly changeNumber: number;
}

/** One bucket of an Assignment Info: null = unassigned (0xFF); else index into `caches` and the A flag. */
export type AssignmentBucket = { readonly cache: number; readonly alternate: boolean } | null;

/** What every assignment carries first (draft 5.6.7, 5.7.5): the Assignment Key and one element per router. */
export interface AssignmentHeader {
  readonly key: AssignmentKey;
  readonly routers: readonly RouterAssignmentElement[];
}

export interface HashAssignment extends AssignmentHeader {
  /** Position = the index buckets refer to. */
  readonly caches: readonly Ipv4[];
  /** Exactly 256 entries. */
  readonly buckets: readonly AssignmentBucket[];
}

export interface AssignmentInfo extends HashAssignment {
  readonly kind: 'assignment-info';
}

export interface MaskAssignment extends AssignmentHeader {
  readonly sets: readonly MaskValueSet[];
}

export interface RouterQueryInfo {
  readonly kind: 'router-query';
  readonly routerId: Ipv4;
  readonly receiveId: number;
  readonly sentTo: Ipv4;
  readonly target: Ipv4;
}

export type CapabilityElement =
  /** Types 1..5 with a 4-byte value (method bitmasks; TRANSMIT_T upper<<16|lower; TIMER_SCALE 4 bytes). */
  | { readonly form: 'value'; readonly type: number; readonly value: number }
  /** Any other type or length, kept as is. */
  | { readonly form: 'raw'; readonly type: number; readonly data: Hex };

export interface CapabilitiesInfo {
  readonly kind: 'capabilities';
  readonly elements: readonly CapabilityElement[];
}

export interface AlternateAssignment {
  readonly kind: 'alternate-assignment';
  readonly assignment:
    | ({ readonly type: 'hash' } & HashAssignment)
    | ({ readonly type: 'mask' } & MaskAssignment)
    | { readonly type: 'other'; readonly assignmentType: number; readonly data: Hex };
}

export interface AssignmentMap {
  readonly kind: 'assignment-map';
  readonly sets: readonly MaskValueSet[];
}

export interface CommandExtension {
  readonly kind: 'command-extension';
  /** CommandType.SHUTDOWN (data = cache IPv4) or SHUTDOWN_RESPONSE, or another code. */
  readonly commandType: number;
  readonly data: Hex;
}

/** v2.01 Address Table: when present, 32-bit address fields elsewhere are 1-based indexes into it (not resolved). */
export interface AddressTable {
  readonly kind: 'address-table';
  /** 1 = IPv4, 2 = IPv6. */
  readonly family: number;
  readonly addressLength: number;
  /** IPv4 dotted quad, IPv6 as 8 uncompressed hex groups, other families as hex. */
  readonly addresses: readonly string[];
}

/** A component of a type this codec does not know, kept so nothing is lost and re-encoding is exact. */
export interface UnknownComponent {
  readonly kind: 'unknown';
  readonly type: number;
  readonly data: Hex;
}

export type Component =
  | SecurityInfo
  | ServiceInfo
  | RouterIdentityInfo
  | WebCacheIdentityInfo
  | RouterViewInfo
  | WebCacheViewInfo
  | AssignmentInfo
  | RouterQueryInfo
  | CapabilitiesInfo
  | AlternateAssignment
  | AssignmentMap
  | CommandExtension
  | AddressTable
  | UnknownComponent;

export type ComponentKind = Component['kind'];

export interface Wccp2Message {
  readonly type: MessageName;
  /** 0x0200 or 0x0201. */
  readonly version: number;
  /** In wire order; encoding them again gives the same bytes. */
  readonly components: readonly Component[];
}
