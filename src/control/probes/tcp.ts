// TCP probe: a connect to the engine's proxy port. Passing proves the engine's TCP stack and its listener are up
// (not that it serves HTTP). The port is not learnt from WCCP; wccpd uses Squid's default http_port.
import { connect } from 'node:net';
import type { ProbeOutcome } from '../../cluster/index.js';
import { describeSocketError, formatMs } from './types.js';
import type { Prober } from './types.js';

/** Squid's default http_port; the config has no health.tcp.port (see docs/health.md). */
export const DEFAULT_TCP_PROBE_PORT = 3128;

export function tcpProber(port = DEFAULT_TCP_PROBE_PORT): Prober {
  return (engine, timeoutMs) => new Promise<ProbeOutcome>((resolve) => {
    const started = performance.now();
    const socket = connect({ host: engine, port });
    let settled = false;
    const done = (outcome: ProbeOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(() => done({ kind: 'tcp', ok: false, detail: `connect timeout ${formatMs(timeoutMs)} (port ${port})` }), timeoutMs);
    socket.once('connect', () => done({ kind: 'tcp', ok: true, rttMs: performance.now() - started }));
    socket.once('error', (err) => done({ kind: 'tcp', ok: false, detail: describeSocketError(err, port) }));
  });
}
