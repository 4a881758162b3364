// HTTP probe in the ICAP client's spirit: connect to the engine's proxy port, send a request the proxy must answer
// itself, and pass only on a valid HTTP answer. OPTIONS with Max-Forwards: 0 is never forwarded (RFC 9110 7.6.2),
// and its URL names a host that cannot resolve, so even a proxy that ignored Max-Forwards could not reach an origin.
// Debian's Squid 5.7 answers it with its own `501 Not Implemented` (X-Squid-Error: ERR_UNSUP_REQ): any well-formed
// status line and header block passes, since only the proxy process itself can produce one. A hung proxy whose kernel
// still completes the handshake fails on silence; a refusal or an answer that is not HTTP is hard evidence.
import { formatDuration } from '../../duration.js';
import type { ProbeOutcome } from '../../cluster/index.js';
import { SQUID_HTTP_PORT } from '../../vocabulary.js';
import { raceConnect } from './connect.js';
import { describeSocketError, probeDeadline } from './types.js';
import type { Prober } from './types.js';

export const HTTP_PROBE_URL = 'http://wccpd-probe.invalid/';
/** An answer's status line and headers must fit in this many bytes. */
const MAX_HEAD_BYTES = 16 * 1024;
const STATUS_LINE = /^HTTP\/1\.[01] ([1-5]\d\d)(?: [^\r\n]*)?$/;
const HEADER_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*$/;

export function httpProbeRequest(): string {
  return (
    `OPTIONS ${HTTP_PROBE_URL} HTTP/1.1\r\nHost: wccpd-probe.invalid\r\nMax-Forwards: 0\r\n` +
    'User-Agent: wccpd-health-probe\r\nConnection: close\r\n\r\n'
  );
}

export type HeadCheck =
  | { readonly kind: 'incomplete' }
  | { readonly kind: 'valid'; readonly status: number }
  | { readonly kind: 'invalid'; readonly why: string };

/** Checks the bytes received so far: a complete, valid status line and header block, or why not. */
export function checkHead(bytes: Buffer): HeadCheck {
  const prefix = bytes.subarray(0, 5).toString('latin1');
  if (!'HTTP/'.startsWith(prefix))
    return {
      kind: 'invalid',
      why: `answer is not HTTP (starts ${JSON.stringify(bytes.subarray(0, 16).toString('latin1'))})`,
    };
  const end = bytes.indexOf('\r\n\r\n');
  if (end < 0)
    return bytes.length > MAX_HEAD_BYTES
      ? { kind: 'invalid', why: `no end of headers in ${MAX_HEAD_BYTES} bytes` }
      : { kind: 'incomplete' };
  const [status = '', ...headers] = bytes.subarray(0, end).toString('latin1').split('\r\n');
  const m = STATUS_LINE.exec(status);
  if (m === null) return { kind: 'invalid', why: `bad status line ${JSON.stringify(status.slice(0, 60))}` };
  const bad = headers.find((h) => !HEADER_LINE.test(h));
  if (bad !== undefined) return { kind: 'invalid', why: `bad header line ${JSON.stringify(bad.slice(0, 60))}` };
  return { kind: 'valid', status: Number(m[1]) };
}

export function httpProber(port = SQUID_HTTP_PORT): Prober {
  return (engine, timeoutMs) =>
    new Promise<ProbeOutcome>((resolve) => {
      const started = performance.now();
      const race = raceConnect(engine, port);
      let connected = false;
      let settled = false;
      let cleanup = (): void => {};
      const done = (outcome: ProbeOutcome): void => {
        if (settled) return;
        settled = true;
        disarm();
        cleanup();
        resolve(outcome);
      };
      const disarm = probeDeadline(timeoutMs, () => {
        const detail = connected
          ? `no HTTP answer in ${formatDuration(timeoutMs)} (connected; port ${port})`
          : `connect timeout ${formatDuration(timeoutMs)} (port ${port})`;
        race.cancel(detail);
        done({ kind: 'http', ok: false, detail });
      });
      void race.result.then((r) => {
        if (!r.ok) {
          done({ kind: 'http', ok: false, detail: r.detail, hard: r.hard });
          return;
        }
        const socket = r.socket;
        if (settled) {
          socket.destroy();
          return;
        }
        connected = true;
        cleanup = () => socket.destroy();
        let received = Buffer.alloc(0);
        socket.on('data', (chunk: Buffer) => {
          received = Buffer.concat([received, chunk]);
          const head = checkHead(received);
          if (head.kind === 'valid') done({ kind: 'http', ok: true, rttMs: performance.now() - started });
          else if (head.kind === 'invalid')
            done({ kind: 'http', ok: false, detail: `${head.why} (port ${port})`, hard: true });
        });
        socket.on('error', (err) =>
          done({ kind: 'http', ok: false, detail: describeSocketError(err, port), hard: true }),
        );
        socket.on('close', () =>
          done({
            kind: 'http',
            ok: false,
            hard: true,
            detail: `connection closed after ${received.length} bytes, before a complete HTTP answer (port ${port})`,
          }),
        );
        socket.write(httpProbeRequest());
      });
    });
}
