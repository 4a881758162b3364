// The part of a child process that wccpd's long-lived helper processes use (the nft and ip sessions, line-session.ts;
// the monitors, monitor.ts), a real one or a fake in tests, and how one is ended.
import type { Readable, Writable } from 'node:stream';

export interface ChildLike {
  readonly pid?: number | undefined;
  readonly stdout: Readable | null;
  readonly stderr?: Readable | null;
  readonly stdin?: Writable | null;
  kill(signal?: NodeJS.Signals): boolean;
  on(event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  on(event: 'error', listener: (err: Error) => void): this;
  unref?(): void;
}

/** Asks `c` to end (`ask`), SIGKILLs it after `graceMs` if it has not; resolves once it is gone (or killed). */
export function endChild(c: ChildLike, ask: () => void, graceMs = 1000): Promise<void> {
  return new Promise<void>((resolve) => {
    const t = setTimeout(() => {
      c.kill('SIGKILL');
      resolve();
    }, graceMs);
    c.on('exit', () => {
      clearTimeout(t);
      resolve();
    });
    ask();
  });
}
