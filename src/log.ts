// The daemon's logger (pino). Three formats (logging.format): `journal`, each line `<N>` + the message and its fields,
// N the syslog priority journald reads with SyslogLevelPrefix=yes (so `journalctl -p warning` shows warnings and errors
// only); `json`, pino's JSON lines for log shippers; `pretty` (pino-pretty) for people. Under systemd (stdout is the
// journal stream) `auto` is journal, elsewhere json. Other modules take the small `Log` interface so tests can pass a
// recorder.
import { fstatSync } from 'node:fs';
import { pino } from 'pino';

export interface Log {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

export type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';
export type LogFormat = 'journal' | 'json' | 'pretty';

/** syslog(3) priority of a pino level: fatal crit (2), error err (3), warn warning (4), info (6), debug/trace (7). */
export function syslogPriority(level: number): number {
  if (level >= 60) return 2;
  if (level >= 50) return 3;
  if (level >= 40) return 4;
  if (level >= 30) return 6;
  return 7;
}

/** Keys journald records itself (time, pid, host) or the line's prefix says (level). */
const JOURNAL_OWN = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg']);

function fieldText(v: unknown): string {
  return typeof v === 'string' && /^[^\s"=\\]+$/.test(v) ? v : JSON.stringify(v);
}

/**
 * One pino JSON line as journald takes it: `<N>message key=value ...`. A newline in the message would start a line
 * journald files at the default priority, so it is written as `\n`.
 */
export function journalLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return `<6>${json.trimEnd().replaceAll('\n', '\\n')}\n`;
  }
  const level = typeof o['level'] === 'number' ? o['level'] : 30;
  const msg = typeof o['msg'] === 'string' ? o['msg'] : '';
  const fields = Object.entries(o)
    .filter(([k, v]) => !JOURNAL_OWN.has(k) && v !== undefined)
    .map(([k, v]) => `${k}=${fieldText(v)}`);
  const text = [msg, ...fields].filter((t) => t !== '').join(' ');
  return `<${syslogPriority(level)}>${text.replaceAll('\n', '\\n')}\n`;
}

/**
 * True when stdout is the journal: systemd sets JOURNAL_STREAM to `<device>:<inode>` of the stream it connects, and a
 * child that inherited the variable with another stdout must not take it as its own (systemd.exec(5)).
 */
export function stdoutIsJournal(env: Readonly<Record<string, string | undefined>> = process.env, fd = 1): boolean {
  const stream = env['JOURNAL_STREAM'];
  if (stream === undefined || stream === '') return false;
  try {
    const st = fstatSync(fd, { bigint: true });
    return stream === `${st.dev}:${st.ino}`;
  } catch {
    return false;
  }
}

/**
 * What the process writes to stderr (a config it cannot load, check-config's problems) when stderr is the journal:
 * each line `<3>` (err), or `<4>` (warning) for a line that says `warning:`, so `journalctl -p warning` shows them.
 * Elsewhere the text as it is.
 */
export function stderrText(text: string, journal = stdoutIsJournal(process.env, 2)): string {
  if (!journal) return text;
  return text.replace(/^(.+)$/gm, (line) => `<${/\bwarning: /.test(line) ? 4 : 3}>${line}`);
}

/** The format in force: `--pretty` wins, then the config's; `auto` is journal under systemd, else json. */
export function resolveLogFormat(
  configured: LogFormat | 'auto',
  pretty: boolean,
  journal = stdoutIsJournal(),
): LogFormat {
  if (pretty) return 'pretty';
  if (configured !== 'auto') return configured;
  return journal ? 'journal' : 'json';
}

export function createLog(
  options: { format?: LogFormat; level?: Level } = {},
): Log & { flush?: () => void; fatal(obj: object, msg?: string): void; level: string } {
  const level = options.level ?? 'info';
  const base = { level, base: { name: 'wccpd' } };
  if (options.format === 'pretty') {
    return pino(base, pino.transport({ target: 'pino-pretty', options: { destination: 1 } }));
  }
  const out = pino.destination({ dest: 1, sync: true });
  if (options.format === 'journal') {
    return pino(base, { write: (line: string) => out.write(journalLine(line)) });
  }
  return pino(base, out);
}

/** A Log that keeps every line, for tests. */
export function recordingLog(): Log & { lines: { level: string; obj: object; msg?: string }[] } {
  const lines: { level: string; obj: object; msg?: string }[] = [];
  const at = (level: string) => (obj: object, msg?: string) => {
    lines.push({ level, obj, ...(msg !== undefined ? { msg } : {}) });
  };
  return { lines, info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug') };
}
