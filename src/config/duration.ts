// Durations in the config are strings such as `500ms`, `10s`, `5m`, `1h` or `1m30s`; the program works in milliseconds.

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h)/y;

/** Milliseconds, or null when the text is not a duration (a bare number is rejected: its unit would be a guess). */
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

/** The shortest way to write a millisecond count back in config syntax (for summaries and docs). */
export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
