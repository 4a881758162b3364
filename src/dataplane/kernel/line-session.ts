// One long-lived child process spoken to in exchanges: write some lines, read its output up to a line that marks the
// end. The nft and ip sessions (nft-session.ts, ip-session.ts) are this with their own end line and their own way of
// reading errors. One exchange at a time; one that does not end within the timeout kills the process, and so does
// nothing: the next exchange starts a new one. The process ending fails the pending exchange.
import type { Readable, Writable } from 'node:stream';
import { DataplaneError } from '../errors.js';
import { endChild, type ChildLike } from './child-process.js';

/** The part of a child process a session uses (a real ChildProcess, or a fake one in tests). */
export interface SessionChild extends ChildLike {
  readonly stdin: Writable;
  readonly stdout: Readable;
}

export interface LineSessionOptions {
  readonly spawnChild: () => SessionChild;
  /** The command as the messages name it. */
  readonly where: string;
  /** The line that ends an exchange's output (not part of it). */
  readonly isEnd: (line: string) => boolean;
  /** What one exchange is called in messages: "transaction", "batch". */
  readonly exchangeName: string;
  /** The message when the process cannot be started at all. */
  readonly cannotRun: (e: Error) => string;
  readonly timeoutMs: number;
}

export interface Exchange {
  /** The output lines before the end line. */
  readonly lines: string[];
  /** This exchange started the process (a process counts its input lines from its start). */
  readonly fresh: boolean;
}

export interface LineSession {
  /** Writes `input` (whole lines) and resolves with the output up to the end line; rejects with `timedOut()`. */
  exchange(input: string, timedOut: () => DataplaneError): Promise<Exchange>;
  busy(): boolean;
  stop(): Promise<void>;
  pid(): number | undefined;
}

export function createLineSession(o: LineSessionOptions): LineSession {
  let child: SessionChild | null = null;
  let pending: { lines: string[]; done: (err: DataplaneError | null, lines: string[]) => void } | null = null;
  let partial = '';

  const onLine = (line: string): void => {
    const p = pending;
    if (p === null) return; // nothing asked: stray output (none is expected) is dropped
    if (!o.isEnd(line)) {
      p.lines.push(line);
      return;
    }
    pending = null;
    p.done(null, p.lines);
  };

  const ensureChild = (): { c: SessionChild; fresh: boolean } => {
    if (child !== null) return { c: child, fresh: false };
    const c = o.spawnChild();
    child = c;
    partial = '';
    c.stdout.setEncoding('utf8');
    c.stdout.on('data', (chunk: string) => {
      if (child !== c) return;
      const parts = (partial + chunk).split('\n');
      partial = parts.pop() ?? '';
      for (const l of parts) onLine(l);
    });
    const gone = (why: string): void => {
      if (child !== c) return;
      child = null;
      const p = pending;
      pending = null;
      p?.done(
        new DataplaneError(
          'command-failed',
          `${o.where} ended during a ${o.exchangeName} (${why})`,
          o.where,
          p.lines.join('\n'),
        ),
        [],
      );
    };
    c.on('exit', (code, signal) => gone(signal !== null ? `signal ${signal}` : `exit ${code}`));
    c.on('error', (e) => gone(o.cannotRun(e)));
    c.stdin.on('error', () => {
      /* the exit handler reports it */
    });
    // Idle, the process must not keep Node running; an exchange's timer does while one is pending.
    c.unref?.();
    (c.stdout as Readable & { unref?: () => void }).unref?.();
    (c.stdin as Writable & { unref?: () => void }).unref?.();
    return { c, fresh: true };
  };

  return {
    busy: () => pending !== null,
    pid: () => child?.pid,
    async exchange(input: string, timedOut: () => DataplaneError): Promise<Exchange> {
      const { c, fresh } = ensureChild();
      const lines = await new Promise<string[]>((resolve, reject) => {
        const timer = setTimeout(() => {
          pending = null;
          const k = child;
          child = null;
          k?.kill('SIGKILL');
          reject(timedOut());
        }, o.timeoutMs);
        pending = {
          lines: [],
          done: (err, out) => {
            clearTimeout(timer);
            if (err !== null) reject(err);
            else resolve(out);
          },
        };
        c.stdin.write(input);
      });
      return { lines, fresh };
    },
    async stop(): Promise<void> {
      const c = child;
      child = null;
      // An exchange still waiting fails now rather than at its timeout.
      const p = pending;
      pending = null;
      p?.done(new DataplaneError('command-failed', `${o.where} was stopped during a ${o.exchangeName}`, o.where), []);
      if (c === null) return;
      await endChild(c, () => c.stdin.end());
    },
  };
}
