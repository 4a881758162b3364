// Durations as people read and write them, one home for every layer: the program works in milliseconds; the config
// file writes `500ms`, `10s`, `5m`, `1h` or `1m30s`; logs, failure reasons, wccpctl and the page read `500 ms`,
// `10 s`, `1.5 s`, `5 min`, `1 h`, as the docs do. Pure; imports nothing.

export const HOUR_MS = 3_600_000;

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: HOUR_MS };
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h)/y;

/** Milliseconds of a config duration, or null when it is none (a bare number is refused: its unit would be a guess). */
export function parseDuration(text: string): number | null {
  const s = text.trim();
  if (s === '') return null;
  let total = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < s.length) {
    const m = PART.exec(s);
    if (m === null) return null;
    total += Number(m[1]) * (UNIT_MS[m[2] ?? ''] ?? NaN);
  }
  return Number.isFinite(total) ? Math.round(total) : null;
}

const UNITS = {
  text: { h: ' h', min: ' min', s: ' s', ms: ' ms' },
  config: { h: 'h', min: 'm', s: 's', ms: 'ms' },
} as const;

/**
 * `ms` in the largest unit that holds it exactly (whole hours or minutes; seconds, with a decimal part when needed,
 * from 1 s; else ms): `250 ms`, `1.5 s`, `90 s`, `5 min`, `1 h`. `config`: as the config file writes it (`1.5s`,
 * `5m`), which parseDuration reads back.
 */
export function formatDuration(ms: number, style: 'text' | 'config' = 'text'): string {
  const u = UNITS[style];
  const n = Math.round(ms);
  if (n !== 0 && n % HOUR_MS === 0) return `${n / HOUR_MS}${u.h}`;
  if (n !== 0 && n % 60_000 === 0) return `${n / 60_000}${u.min}`;
  if (Math.abs(n) >= 1000) return `${n / 1000}${u.s}`;
  return `${n}${u.ms}`;
}
