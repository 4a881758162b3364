// TCP probe: a connect to the engine's proxy port. Passing proves the engine's TCP stack and its listener are up
// (not that it serves HTTP: a hung proxy still passes, which is what the HTTP probe is for). The port is not learnt
// from WCCP; it defaults to Squid's http_port (config health.tcp.port).
import { formatDuration } from '../../duration.js';
import type { ProbeOutcome } from '../../cluster/index.js';
import { SQUID_HTTP_PORT } from '../../vocabulary.js';
import { raceConnect } from './connect.js';
import { probeDeadline } from './types.js';
import type { Prober } from './types.js';

export function tcpProber(port = SQUID_HTTP_PORT): Prober {
  return (engine, timeoutMs) =>
    new Promise<ProbeOutcome>((resolve) => {
      const started = performance.now();
      const race = raceConnect(engine, port);
      let settled = false;
      const done = (outcome: ProbeOutcome): void => {
        if (settled) return;
        settled = true;
        disarm();
        resolve(outcome);
      };
      const disarm = probeDeadline(timeoutMs, () => {
        const detail = `connect timeout ${formatDuration(timeoutMs)} (port ${port})`;
        race.cancel(detail);
        done({ kind: 'tcp', ok: false, detail });
      });
      void race.result.then((r) => {
        if (r.ok) {
          r.socket.destroy();
          done({ kind: 'tcp', ok: true, rttMs: performance.now() - started });
        } else done({ kind: 'tcp', ok: false, detail: r.detail, hard: r.hard });
      });
    });
}
