// What a prober is: one probe of one engine, bounded by its timeout, never rejecting.
import type { ProbeOutcome } from '../../cluster/index.js';

export type Prober = (engine: string, timeoutMs: number) => Promise<ProbeOutcome>;

/** 1000 -> "1s", 250 -> "250ms": how timeouts read in failure reasons. */
export function formatMs(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}

/** A socket error in words a person can act on. */
export function describeSocketError(err: unknown, port?: number): string {
  const code = (err as { code?: unknown } | null)?.code;
  const where = port !== undefined ? ` (port ${port})` : '';
  switch (code) {
    case 'ECONNREFUSED': return `connection refused${where}`;
    case 'ECONNRESET': return `connection reset${where}`;
    case 'EHOSTUNREACH': return 'host unreachable';
    case 'ENETUNREACH': return 'network unreachable';
    default: return err instanceof Error ? err.message : String(err);
  }
}
