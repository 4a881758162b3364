// One probe's TCP connection to an engine, tolerant of a lost SYN: while no attempt has connected, another starts
// every CONNECT_RETRY_MS (at most CONNECT_ATTEMPTS), the first to connect wins and the others are closed. Without
// this a single lost SYN (the kernel retries only after 1 s) fails the whole probe. A refusal, reset or unreachable
// is hard evidence and ends the race at once: loss never makes a host refuse.
import { connect } from 'node:net';
import type { Socket } from 'node:net';
import { CONNECT_ATTEMPTS, CONNECT_RETRY_MS } from '../../cluster/index.js';
import { describeSocketError } from './types.js';

export type ConnectResult =
  | { readonly ok: true; readonly socket: Socket }
  | { readonly ok: false; readonly hard: true; readonly detail: string }
  | { readonly ok: false; readonly hard: false; readonly detail: string };

/** Error codes that prove something: the engine's host or a router on the way answered "no". */
const HARD_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE']);

export function isHardError(err: unknown): boolean {
  return HARD_ERRORS.has(String((err as { code?: unknown } | null)?.code));
}

export interface ConnectRace {
  readonly result: Promise<ConnectResult>;
  /** Closes every attempt still open (the caller's deadline passed). */
  cancel(detail: string): void;
}

export function raceConnect(engine: string, port: number): ConnectRace {
  const attempts = new Set<Socket>();
  let settled = false;
  let retry: ReturnType<typeof setTimeout> | null = null;
  let failures = 0;
  let lastSoft = '';
  let resolveResult: (r: ConnectResult) => void = () => {};
  const result = new Promise<ConnectResult>((resolve) => {
    resolveResult = resolve;
  });
  const finish = (r: ConnectResult, keep?: Socket): void => {
    if (settled) return;
    settled = true;
    if (retry !== null) clearTimeout(retry);
    for (const s of attempts) if (s !== keep) s.destroy();
    attempts.clear();
    resolveResult(r);
  };
  const start = (): void => {
    const socket = connect({ host: engine, port });
    attempts.add(socket);
    socket.once('connect', () => {
      socket.removeAllListeners('error');
      finish({ ok: true, socket }, socket);
    });
    socket.once('error', (err) => {
      attempts.delete(socket);
      socket.destroy();
      if (isHardError(err)) finish({ ok: false, hard: true, detail: describeSocketError(err, port) });
      else {
        failures += 1;
        lastSoft = describeSocketError(err, port);
        if (failures >= CONNECT_ATTEMPTS) finish({ ok: false, hard: false, detail: lastSoft });
      }
    });
    if (attempts.size + failures < CONNECT_ATTEMPTS) retry = setTimeout(start, CONNECT_RETRY_MS);
  };
  start();
  return {
    result,
    cancel: (detail) => finish({ ok: false, hard: false, detail: lastSoft !== '' ? `${detail}; ${lastSoft}` : detail }),
  };
}
