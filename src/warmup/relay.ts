// The HTTP half of the broker: one engine's request relayed to the source that said HIT, from that source's proxy
// port with `Cache-Control: only-if-cached`, the answer streamed back. Everything the source sends is outside
// input: an answer the engine's side cannot carry as it is (an invalid status line or reason phrase, a header Node
// refuses to write) becomes a 502, counted; nothing in it ends the process.
import { request as httpRequest } from 'node:http';
import type { Agent, ClientRequest, IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import type { ServerResponse } from 'node:http';
import type { RelaySettings } from './relay-messages.js';
import { connectSource, PIPE_MIN_BYTES, pipeBody } from './source-pipe.js';

/** Via token the relay adds; a request that already carries it is a loop. */
export const VIA = 'wccpd-warmup';
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'proxy-authorization',
  'proxy-authenticate',
]);
/** RFC 9110's reason-phrase: HTAB, SP, VCHAR, obs-text (what Node's writeHead accepts, too). */
const REASON_PHRASE = /^[\t\x20-\x7e\x80-\xff]*$/;

function forwardHeaders(h: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const named = new Set(
    (typeof h.connection === 'string' ? h.connection : '').split(',').map((s) => s.trim().toLowerCase()),
  );
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || HOP_BY_HOP.has(k) || named.has(k)) continue;
    out[k] = v;
  }
  return out;
}

/** Why a source's status line cannot be relayed, or null. A relayed answer is final: 200-599. */
export function badStatusLine(status: number | undefined, reason: string | undefined): string | null {
  if (status === undefined || !Number.isInteger(status) || status < 200 || status > 599)
    return `status ${String(status)} is no final HTTP status`;
  if (reason !== undefined && !REASON_PHRASE.test(reason)) return 'the reason phrase has a control character';
  return null;
}

export interface RelayContext extends Pick<
  RelaySettings,
  'localAddress' | 'sourceHttpPort' | 'maxHeaderBytes' | 'headersTimeoutMs' | 'totalTimeoutMs' | 'maxObjectBytes'
> {
  readonly agent: Agent;
  count(name: string, by?: number): void;
  /** Logs at most one line per kind every few seconds. */
  note(kind: string, obj: object, msg: string): void;
  /** A source refused or could not be reached: stop asking it until its state changes. */
  sourceFailed(source: string): void;
  /**
   * Takes `bytes` from the relays' shared rate (warmup.maxRelayRate); returns the milliseconds to wait before reading
   * more from the source (0: go on).
   */
  pace(bytes: number): number;
  /** The most to read from a source at once, up to `max` (a lower rate reads less at a time: readSize in budget.ts). */
  readSize(max: number): number;
  /** Answers the engine with a short text (counted under `counter` and the status). */
  refuse(res: ServerResponse, status: number, counter: string, text: string): void;
}

/** Relays a GET or HEAD without a body (the caller checked) for `url` from `source`'s proxy port. */
export function relay(ctx: RelayContext, req: IncomingMessage, res: ServerResponse, source: string, url: string): void {
  ctx.count('http-relay');
  const headers = forwardHeaders(req.headers);
  // No body is ever sent: a Content-Length (even 0) would describe one.
  delete headers['content-length'];
  const cc = typeof headers['cache-control'] === 'string' ? headers['cache-control'] : '';
  headers['cache-control'] = cc === '' ? 'only-if-cached' : `${cc}, only-if-cached`;
  const via = typeof req.headers.via === 'string' ? req.headers.via : '';
  headers.via = via === '' ? `1.1 ${VIA}` : `${via}, 1.1 ${VIA}`;
  let finished = false;
  /** The request to the source now (a second one after a kept connection the source dropped as it was reused). */
  let current: ClientRequest | null = null;
  const total = setTimeout(() => {
    ctx.count('http-timeout');
    current?.destroy(new Error('total time limit'));
    res.destroy();
  }, ctx.totalTimeoutMs);
  const done = (): void => {
    finished = true;
    clearTimeout(total);
  };
  /** A source's answer the engine cannot be given as it is: 502, and the source's connection is not reused. */
  const badAnswer = (answer: IncomingMessage, up: ClientRequest, counter: string, why: string): void => {
    answer.destroy();
    up.destroy();
    done();
    ctx.note(
      `${counter} ${source}`,
      { source, detail: why },
      `warm-up broker: source ${source} answered ${url} with an invalid response (${why}): 502 to the engine`,
    );
    // writeHead may have set some of the source's headers before it threw.
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    ctx.refuse(res, 502, counter, `wccpd warm-up broker: source ${source} sent an invalid response: ${why}`);
  };
  const onResponse = (up: ClientRequest, answer: IncomingMessage): void => {
    up.setTimeout(0);
    const bad = badStatusLine(answer.statusCode, answer.statusMessage);
    if (bad !== null) {
      badAnswer(answer, up, 'http-source-bad-status', bad);
      return;
    }
    const length = Number(answer.headers['content-length'] ?? NaN);
    if (Number.isFinite(length) && length > ctx.maxObjectBytes) {
      answer.destroy();
      up.destroy();
      done();
      ctx.refuse(
        res,
        504,
        'http-too-large',
        `wccpd warm-up broker: object of ${length} bytes exceeds the relay's limit`,
      );
      return;
    }
    const status = answer.statusCode ?? 502;
    // Only an answer from the source's cache is a relayed object: its 504 is the only-if-cached miss (it lost the
    // object since its HIT), any other error is no object either. Both still go to the engine as they are.
    const outcome = status === 504 ? 'http-source-504' : status >= 400 ? 'http-source-error-status' : 'http-relayed';
    try {
      res.writeHead(status, answer.statusMessage, forwardHeaders(answer.headers));
    } catch (err) {
      badAnswer(answer, up, 'http-source-bad-header', err instanceof Error ? err.message : String(err));
      return;
    }
    ctx.count(`http-status-${status}`);
    if (outcome !== 'http-relayed') ctx.count(outcome);
    // A large object's body goes through a pipe, past Node's parser (source-pipe.ts); the source's connection is
    // closed after it.
    const pipe =
      req.method === 'GET' &&
      status === 200 &&
      length >= PIPE_MIN_BYTES &&
      answer.headers['transfer-encoding'] === undefined
        ? pipeBody(answer, res, length, {
            moved: (n) => {
              ctx.count('http-bytes', n);
              return ctx.pace(n);
            },
            waited: () => ctx.count('http-rate-waits'),
            readSize: (max) => ctx.readSize(max),
            ended: () => {
              done();
              res.end();
              ctx.count('http-relayed');
              // Of those, the bodies that went through the pipe: whether large objects take the fast way at all.
              ctx.count('http-piped');
              up.destroy();
            },
          })
        : null;
    if (pipe !== null) {
      // The answer is cut off when its connection closes (the pipe's end, or the source's too early).
      answer.on('error', () => {
        if (finished) return;
        done();
        res.destroy();
      });
      return;
    }
    let bytes = 0;
    // The source is read while nothing holds it: the engine's socket is full (backpressure), or the relays' rate
    // (warmup.maxRelayRate) is spent for now.
    let holds = 0;
    const hold = (): void => {
      if (holds++ === 0) answer.pause();
    };
    const release = (): void => {
      if (--holds === 0 && !finished) answer.resume();
    };
    answer.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      ctx.count('http-bytes', chunk.length);
      if (bytes > ctx.maxObjectBytes) {
        ctx.count('http-too-large');
        answer.destroy();
        res.destroy();
        done();
        return;
      }
      if (!res.write(chunk)) {
        hold();
        res.once('drain', release);
      }
      const wait = ctx.pace(chunk.length);
      if (wait > 0) {
        ctx.count('http-rate-waits');
        hold();
        setTimeout(release, wait);
      }
    });
    answer.on('end', () => {
      done();
      res.end();
      if (outcome === 'http-relayed') ctx.count('http-relayed');
    });
    answer.on('error', () => {
      done();
      res.destroy();
    });
  };
  const send = (fresh: boolean): void => {
    const up = httpRequest({
      host: source,
      port: ctx.sourceHttpPort,
      method: req.method,
      path: url,
      headers,
      agent: fresh ? false : ctx.agent,
      createConnection: fresh ? connectSource : undefined,
      localAddress: ctx.localAddress,
      maxHeaderSize: ctx.maxHeaderBytes,
      timeout: ctx.headersTimeoutMs,
    });
    current = up;
    up.on('timeout', () => up.destroy(new Error('no response headers in time')));
    up.on('error', (err: NodeJS.ErrnoException) => {
      if (finished) return;
      if (!res.headersSent && !fresh && up.reusedSocket && err.code === 'ECONNRESET') {
        // The source closed a kept connection just as the broker reused it (its idle timeout): nothing was read, and
        // that says nothing about the source. GET and HEAD are safe to send again, on a new connection.
        ctx.count('http-source-retried');
        try {
          send(true);
        } catch (e) {
          done();
          ctx.refuse(res, 502, 'http-internal-error', `wccpd warm-up broker: ${(e as Error).message}`);
        }
        return;
      }
      done();
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (err.code === 'ECONNREFUSED' || err.code === 'EHOSTUNREACH' || err.code === 'ECONNRESET') {
        ctx.sourceFailed(source);
        ctx.count('http-source-failed');
        ctx.note(
          `source-failed ${source}`,
          { source, err: err.code },
          `warm-up broker: source ${source} failed (${err.code}); not asking it again until its state changes`,
        );
      }
      ctx.refuse(res, 504, 'http-source-error', `wccpd warm-up broker: source ${source}: ${err.message}`);
    });
    up.on('response', (answer) => {
      // The boundary of one relayed answer: whatever it carries, this engine's request fails alone.
      try {
        onResponse(up, answer);
      } catch (err) {
        const msg = err instanceof Error ? err.message : String(err);
        ctx.count('http-internal-error');
        ctx.note('http-internal-error', { source, err: msg }, `warm-up broker: relaying ${url} failed: ${msg}`);
        done();
        answer.destroy();
        up.destroy();
        res.destroy();
      }
    });
    up.end();
  };
  res.on('close', () => {
    if (!finished) {
      done();
      current?.destroy();
    }
  });
  req.on('error', () => {
    done();
    current?.destroy();
  });
  send(false);
}
