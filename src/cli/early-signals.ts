// Imported first by the wccpd entry point, so its handlers are in place before the rest of the program loads and the
// config is read: until the logger exists (installSignals), a SIGHUP, SIGUSR1 or SIGUSR2 is noted on stderr and
// ignored. Without them Node's defaults would end wccpd (SIGHUP, SIGUSR2) or start the inspector (SIGUSR1) in that
// window, e.g. a `systemctl reload` right after a start.
const EARLY = ['SIGHUP', 'SIGUSR1', 'SIGUSR2'] as const;

// The note goes to stderr, which may be a pipe whose reader is gone: each write then fails with EPIPE, reported as an
// 'error' event on process.stderr that, with no listener, ends the process (status 1; the last line is not in place
// yet), the very thing these handlers prevent. A note nobody can read is not worth the daemon: EPIPE is ignored while
// they are in place, every time (each write fails anew: stdio streams are not destroyed by an error).
const onStderrError = (err: NodeJS.ErrnoException): void => {
  if (err.code !== 'EPIPE') throw err;
};
process.stderr.on('error', onStderrError);

const handlers = EARLY.map((signal) => {
  const handler = (): void => void process.stderr.write(`wccpd: ${signal} while starting: ignored\n`);
  process.on(signal, handler);
  return [signal, handler] as const;
});

/** Removes the early handlers; called once installSignals has put the daemon's own in place. */
export function endEarlySignals(): void {
  for (const [signal, handler] of handlers) process.off(signal, handler);
  process.stderr.off('error', onStderrError);
}
