// ICP probe (RFC 2186): an ICP_QUERY to the engine's ICP port. Any answer proves the cache process itself is alive
// and serving; the opcode matters too: MISS_NOFETCH asks to be drained (store rebuilding, hit-only mode).
import { formatDuration } from '../../duration.js';
import { createSocket } from 'node:dgram';
import { randomInt } from 'node:crypto';
import type { ProbeOutcome } from '../../cluster/index.js';
import { SQUID_ICP_PORT } from '../../vocabulary.js';
import { decodeIcp, encodeIcp } from '../../wire/icp.js';
import { formatDecodeError } from '../../wire/decode-error.js';
import { describeSocketError, probeDeadline } from './types.js';
import { isHardError } from './connect.js';
import type { Prober } from './types.js';

/** A URL no cache holds: the answer is a MISS (or MISS_NOFETCH, DENIED), and nothing is fetched. */
export const ICP_PROBE_URL = 'http://wccpd-probe.invalid/';

let nextRequestNumber = randomInt(1, 0x7fffffff);

export interface IcpProberOptions {
  readonly port?: number;
  /** Requester Host Address in the query (our router address). */
  readonly requesterAddress?: string;
}

export function icpProber(options: IcpProberOptions = {}): Prober {
  const port = options.port ?? SQUID_ICP_PORT;
  const requesterAddress = options.requesterAddress ?? '0.0.0.0';
  return (engine, timeoutMs) =>
    new Promise<ProbeOutcome>((resolve) => {
      const requestNumber = nextRequestNumber;
      nextRequestNumber = nextRequestNumber >= 0xfffffffe ? 1 : nextRequestNumber + 1;
      const socket = createSocket('udp4');
      const started = performance.now();
      let settled = false;
      let lastBad: string | null = null;
      const done = (outcome: ProbeOutcome): void => {
        if (settled) return;
        settled = true;
        disarm();
        socket.close();
        resolve(outcome);
      };
      const disarm = probeDeadline(timeoutMs, () =>
        done({
          kind: 'icp',
          ok: false,
          detail: `no ICP reply in ${formatDuration(timeoutMs)} (port ${port})${lastBad !== null ? `; ignored a bad datagram: ${lastBad}` : ''}`,
        }),
      );
      socket.on('message', (buf) => {
        const d = decodeIcp(buf);
        if (!d.ok) {
          lastBad = formatDecodeError(d.error);
          return;
        }
        if (d.value.opcode === 'QUERY' || d.value.requestNumber !== requestNumber) return;
        done({ kind: 'icp', ok: true, rttMs: performance.now() - started, icpOpcode: d.value.opcode });
      });
      // A connected socket: the kernel reports ICMP port unreachable as ECONNREFUSED at once.
      socket.on('error', (err) =>
        done({ kind: 'icp', ok: false, detail: describeSocketError(err, port), hard: isHardError(err) }),
      );
      socket.connect(port, engine, () => {
        const query = encodeIcp({
          opcode: 'QUERY',
          requestNumber,
          options: 0,
          optionData: 0,
          senderAddress: '0.0.0.0',
          requesterAddress,
          url: ICP_PROBE_URL,
        });
        socket.send(query, (err) => {
          if (err) done({ kind: 'icp', ok: false, detail: describeSocketError(err, port), hard: isHardError(err) });
        });
      });
    });
}
