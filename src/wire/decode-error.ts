// The one error every decoder in src/wire returns (never throws): what was being decoded, where, and why.

export interface DecodeError {
  readonly kind: 'decode-error';
  /** The protocol unit: 'WCCP2', 'ICP', 'GRE'. */
  readonly protocol: string;
  /** The message being decoded, e.g. 'HERE_I_AM', or 'unknown' before the type is known. */
  readonly message: string;
  /** The component or field, e.g. 'SERVICE_INFO', 'header'. */
  readonly component: string;
  /** Byte offset from the start of the datagram where the problem is. */
  readonly offset: number;
  /** A short machine-friendly reason, used as the counter label: 'truncated', 'bad-length', 'too-many-caches' ... */
  readonly reason: string;
  /** A sentence a person can act on. */
  readonly detail: string;
}

export type Decoded<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: DecodeError };

export function decodeError(
  protocol: string,
  message: string,
  component: string,
  offset: number,
  reason: string,
  detail: string,
): { ok: false; error: DecodeError } {
  return { ok: false, error: { kind: 'decode-error', protocol, message, component, offset, reason, detail } };
}

export function formatDecodeError(e: DecodeError): string {
  return `${e.protocol} ${e.message}: ${e.component} at offset ${e.offset}: ${e.reason}: ${e.detail}`;
}
