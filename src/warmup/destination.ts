// From an ICP query's URL to the destination address the data plane hashes: an IP literal as it is, a name through
// the system resolver with a short, bounded cache. Unresolvable (or too slow) means MISS: never a guess.
import { lookup } from 'node:dns/promises';
import { parseIpv4 } from '../buckets/ipv4.js';
import type { Clock } from '../cluster/types.js';

/** The address as a 32-bit integer, or null when it is not a dotted quad. */
export function ipv4Value(address: string): number | null {
  try {
    return parseIpv4(address);
  } catch {
    return null;
  }
}

export interface UrlTarget {
  /** The host as written (lower case, IPv6 brackets kept). */
  readonly host: string;
  readonly port: number;
}

/** The host and port of an absolute http:// URL, or null (other schemes, relative or malformed URLs). */
export function urlTarget(url: string): UrlTarget | null {
  if (url.length > 8192) return null;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return null;
  }
  if (u.protocol !== 'http:' || u.hostname === '') return null;
  return { host: u.hostname.toLowerCase(), port: u.port === '' ? 80 : Number(u.port) };
}

export type Lookup = (host: string) => Promise<string | null>;

/** The system resolver (getaddrinfo, IPv4): what Squid's own resolution would give on this host, or null. */
export const systemLookup: Lookup = async (host) => {
  try {
    return (await lookup(host, { family: 4 })).address;
  } catch {
    return null;
  }
};

export interface ResolverOptions {
  readonly clock: Clock;
  readonly lookup?: Lookup;
  /** How long an answer is kept (default 30 s), and a failure (default 5 s). */
  readonly ttlMs?: number;
  readonly negativeTtlMs?: number;
  /** Names kept at most (default 10,000; the oldest go first). */
  readonly maxEntries?: number;
  /**
   * Lookups running at once (default 2). getaddrinfo runs on libuv's thread pool (4 threads), which the daemon's
   * file writes share: a flood of queries for fresh names must not hold every thread while a resolver is slow.
   */
  readonly maxInflight?: number;
}

export interface ResolverCounters {
  lookups: number;
  cacheHits: number;
  failures: number;
  timeouts: number;
  /** Names not looked up because maxInflight lookups were already running (answered MISS). */
  busy: number;
}

export class DestinationResolver {
  private readonly cache = new Map<string, { address: string | null; until: number }>();
  private readonly inflight = new Map<string, Promise<string | null>>();
  readonly counters: ResolverCounters = { lookups: 0, cacheHits: 0, failures: 0, timeouts: 0, busy: 0 };

  constructor(private readonly options: ResolverOptions) {}

  /** The IPv4 address for `host`, within `timeoutMs`; null when unresolvable, IPv6-only or too slow. */
  async resolve(host: string, timeoutMs: number): Promise<string | null> {
    if (ipv4Value(host) !== null) return host;
    if (host.startsWith('[')) return null;
    const now = this.options.clock.now();
    const hit = this.cache.get(host);
    if (hit !== undefined && hit.until > now) {
      this.counters.cacheHits++;
      return hit.address;
    }
    let pending = this.inflight.get(host);
    if (pending === undefined) {
      if (this.inflight.size >= (this.options.maxInflight ?? 2)) {
        this.counters.busy++;
        return null;
      }
      this.counters.lookups++;
      pending = (this.options.lookup ?? systemLookup)(host)
        .catch(() => null)
        .then((address) => {
          this.inflight.delete(host);
          if (address === null) this.counters.failures++;
          const ttl = address === null ? (this.options.negativeTtlMs ?? 5000) : (this.options.ttlMs ?? 30_000);
          this.cache.delete(host);
          this.cache.set(host, { address, until: this.options.clock.now() + ttl });
          const max = this.options.maxEntries ?? 10_000;
          while (this.cache.size > max) {
            const oldest = this.cache.keys().next().value;
            if (oldest === undefined) break;
            this.cache.delete(oldest);
          }
          return address;
        });
      this.inflight.set(host, pending);
    }
    // getaddrinfo cannot be cancelled: a slow lookup finishes in the background and fills the cache for the next query.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<'timeout'>((r) => {
      timer = setTimeout(() => r('timeout'), timeoutMs);
    });
    const got = await Promise.race([pending, timeout]);
    clearTimeout(timer);
    if (got === 'timeout') {
      this.counters.timeouts++;
      return null;
    }
    return got;
  }

  size(): number {
    return this.cache.size;
  }

  /** Lookups running now. */
  inflightCount(): number {
    return this.inflight.size;
  }
}
