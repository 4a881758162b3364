// What a prober is: one probe of one engine, bounded by its timeout, never rejecting.
import type { ProbeOutcome } from '../../cluster/index.js';

export type Prober = (engine: string, timeoutMs: number) => Promise<ProbeOutcome>;

/** A socket error in words a person can act on. */
export function describeSocketError(err: unknown, port?: number): string {
  const code = (err as { code?: unknown } | null)?.code;
  const where = port !== undefined ? ` (port ${port})` : '';
  switch (code) {
    case 'ECONNREFUSED':
      return `connection refused${where}`;
    case 'ECONNRESET':
      return `connection reset${where}`;
    case 'EHOSTUNREACH':
      return 'host unreachable';
    case 'ENETUNREACH':
      return 'network unreachable';
    default:
      return err instanceof Error ? err.message : String(err);
  }
}

/**
 * Calls `expire` once, `timeoutMs` from now (an `AbortSignal.timeout`), unless the returned function is called first.
 * It waits one pass of the poll phase: an answer that arrived while the event loop was busy is read first, so a slow
 * gateway does not turn into a failing engine. The signal's timer is unref'd and cannot be cleared: disarming only
 * removes the listener, and the timer ends by itself within `timeoutMs`.
 */
export function probeDeadline(timeoutMs: number, expire: () => void): () => void {
  const signal = AbortSignal.timeout(timeoutMs);
  let armed = true;
  const onAbort = (): void => {
    setImmediate(() => {
      if (armed) expire();
    });
  };
  signal.addEventListener('abort', onAbort, { once: true });
  return () => {
    armed = false;
    signal.removeEventListener('abort', onAbort);
  };
}
