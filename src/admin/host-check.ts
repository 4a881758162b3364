// DNS rebinding protection: the admin server answers only requests whose Host header names it. A web page in an
// admin's browser can point its own DNS name at 127.0.0.1 and read every GET endpoint as same-origin; its requests
// then carry that name in Host, which is neither the listen address nor a name the admin configured.
import { isIpv4 } from '../address.js';

export interface HostPolicy {
  /** admin.listen's address (0.0.0.0 = every address of the gateway). */
  readonly listenHost: string;
  /** Extra names the server answers to, whatever the port (admin.hosts), lower case. */
  readonly names: readonly string[];
}

const LOOPBACK = /^127\./;
const LOOPBACK_NAMES = ['localhost', 'localhost.localdomain'];

/** `name[:port]` of a Host header, lower case, without a trailing dot; null when it is not of that shape. */
export function parseHost(header: string): { name: string; port: number } | null {
  const m = /^([a-z0-9.-]+?)\.?(?::(\d{1,5}))?$/.exec(header.trim().toLowerCase());
  if (!m?.[1]) return null;
  const port = m[2] === undefined ? 80 : Number(m[2]);
  return port > 0 && port <= 65535 ? { name: m[1], port } : null;
}

/**
 * Whether a request with this Host header is for us: a name from admin.hosts (any port); or, on the port we listen
 * on, the listen address itself, `localhost` when we listen on loopback, and any IPv4 literal when we listen on
 * 0.0.0.0 (an address literal cannot be rebound: the browser's origin is then that address).
 */
export function hostAllowed(header: string | undefined, port: number, policy: HostPolicy): boolean {
  if (header === undefined) return false;
  const h = parseHost(header);
  if (h === null) return false;
  if (policy.names.includes(h.name)) return true;
  if (h.port !== port) return false;
  if (h.name === policy.listenHost) return true;
  if (LOOPBACK.test(policy.listenHost) && LOOPBACK_NAMES.includes(h.name)) return true;
  return policy.listenHost === '0.0.0.0' && isIpv4(h.name);
}
