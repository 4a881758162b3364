// The process's last line and its signals (DESIGN.md decision 12: no outside input ends the process). Every socket,
// timer and child-process callback has its own boundary; an error that still reaches the process is a bug: it is
// logged in one fatal line (error, stack) and wccpd exits non-zero, so systemd runs the cleanup and restarts it
// (Restart=on-failure) instead of a half-broken daemon carrying on. No signal an admin habitually sends stops wccpd.
import type { Log } from '../log.js';

/** EX_SOFTWARE: the exit status of an error nothing caught (docs/operations.md). */
export const EXIT_INTERNAL_ERROR = 70;

export interface FatalLog extends Log {
  fatal(obj: object, msg?: string): void;
}

/**
 * Logs an uncaught exception or unhandled rejection at fatal, once, then exits EXIT_INTERNAL_ERROR. `exit` is
 * process.exit except in tests.
 */
export function installLastLine(log: FatalLog, exit: (code: number) => void = (c) => process.exit(c)): void {
  let ending = false;
  const last = (kind: string, err: unknown): void => {
    if (ending) return;
    ending = true;
    const e = err instanceof Error ? err : new Error(String(err));
    try {
      log.fatal(
        { kind, err: e.message, stack: e.stack ?? '' },
        `wccpd: ${kind}: ${e.message}; exiting with status ${EXIT_INTERNAL_ERROR} (a bug: please report it with this line)`,
      );
    } finally {
      exit(EXIT_INTERNAL_ERROR);
    }
  };
  process.on('uncaughtException', (err) => last('uncaught exception', err));
  process.on('unhandledRejection', (reason) => last('unhandled rejection', reason));
}

/**
 * SIGHUP calls `reload` (logrotate's and many admins' habit; Node's default would end the process and systemd would
 * count SIGHUP as a clean stop). SIGUSR1 would start Node's inspector on 127.0.0.1:9229, which runs any code a local
 * user sends it with wccpd's capabilities: ignored. SIGUSR2 means nothing here: ignored (its default ends the
 * process). SIGPIPE is ignored by Node itself. Installed before the daemon starts, so no window ends it.
 */
export function installSignals(log: Log, reload: () => void): void {
  process.on('SIGHUP', () => {
    log.info({ signal: 'SIGHUP' }, 'SIGHUP: reload');
    reload();
  });
  process.on('SIGUSR1', () =>
    log.warn({ signal: 'SIGUSR1' }, 'SIGUSR1 ignored: the Node inspector is never started on a gateway'),
  );
  process.on('SIGUSR2', () => log.warn({ signal: 'SIGUSR2' }, 'SIGUSR2 ignored: it has no meaning to wccpd'));
}
