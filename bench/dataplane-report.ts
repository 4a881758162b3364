// The one table the data-path bench prints: per measure, per path, the median over the rounds, the spread, and the
// ratios to the static redirect (the like-for-like ceiling) and to direct forwarding.

export interface Measure {
  readonly key: string;
  readonly label: string;
  readonly unit: string;
  readonly digits: number;
  /** Only to say, under the table, which way is better. */
  readonly higherIsBetter: boolean;
}

/** Samples of one path on one measure, or why it has none. */
export interface Cell {
  readonly values: number[];
  /** Errors the tool reported across rounds (socket errors, non-200, failed requests). */
  errors: number;
  /** Set when the path could not be measured; printed instead of numbers. */
  failure?: string;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? (s[mid] ?? Number.NaN) : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2;
}

const fmt = (v: number, digits: number): string =>
  Number.isFinite(v)
    ? v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
    : '-';

const ratio = (v: number, base: number): string =>
  Number.isFinite(v) && Number.isFinite(base) && base !== 0 ? (v / base).toFixed(3) : '-';

export interface TableInput {
  readonly measures: readonly Measure[];
  readonly paths: readonly { key: string; label: string }[];
  /** cells.get(measure key)?.get(path key) */
  readonly cells: ReadonlyMap<string, ReadonlyMap<string, Cell>>;
  readonly baseline: string;
  readonly direct: string;
  /** The heading of the baseline's ratio column; default "vs static". */
  readonly baselineHeader?: string;
}

/** Renders the table as Markdown-compatible text (pipes), so it pastes into docs/performance.md unchanged. */
export function renderTable(t: TableInput): string {
  const header = [
    'measure',
    'path',
    'median',
    'min..max',
    'runs',
    'errors',
    t.baselineHeader ?? 'vs static',
    'vs direct',
  ];
  const rows: string[][] = [];
  for (const m of t.measures) {
    const byPath = t.cells.get(m.key);
    const base = median(byPath?.get(t.baseline)?.values ?? []);
    const direct = median(byPath?.get(t.direct)?.values ?? []);
    t.paths.forEach((p, i) => {
      const first = i === 0 ? `${m.label} (${m.unit})` : '';
      const c = byPath?.get(p.key);
      if (c === undefined || c.values.length === 0) {
        rows.push([first, p.label, `not measured: ${c?.failure ?? 'no run'}`, '', '', '', '', '']);
        return;
      }
      const med = median(c.values);
      const lo = Math.min(...c.values);
      const hi = Math.max(...c.values);
      rows.push([
        first,
        p.label,
        fmt(med, m.digits),
        `${fmt(lo, m.digits)}..${fmt(hi, m.digits)}`,
        String(c.values.length),
        c.failure !== undefined ? `${c.errors} (+failed runs)` : String(c.errors),
        ratio(med, base),
        ratio(med, direct),
      ]);
    });
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => Math.min(60, (r[i] ?? '').length))));
  const line = (cells: readonly string[]): string =>
    `| ${cells.map((c, i) => (i >= 2 && i !== 3 && !c.startsWith('not') ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0))).join(' | ')} |`;
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}
