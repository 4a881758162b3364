// The daemon's logger: pino JSON lines on stdout (journald-friendly), or pino-pretty for people. Other modules take
// the small `Log` interface so tests can pass a recorder.
import { pino } from 'pino';

export interface Log {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

export type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

export function createLog(
  options: { pretty?: boolean; level?: Level } = {},
): Log & { flush?: () => void; fatal(obj: object, msg?: string): void } {
  const level = options.level ?? 'info';
  if (options.pretty) {
    return pino(
      { level, base: { name: 'wccpd' } },
      pino.transport({ target: 'pino-pretty', options: { destination: 1 } }),
    );
  }
  return pino({ level, base: { name: 'wccpd' } }, pino.destination({ dest: 1, sync: true }));
}

/** A Log that keeps every line, for tests. */
export function recordingLog(): Log & { lines: { level: string; obj: object; msg?: string }[] } {
  const lines: { level: string; obj: object; msg?: string }[] = [];
  const at = (level: string) => (obj: object, msg?: string) => {
    lines.push({ level, obj, ...(msg !== undefined ? { msg } : {}) });
  };
  return { lines, info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug') };
}
