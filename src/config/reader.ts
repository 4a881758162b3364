// Typed reading of an untrusted YAML value: each reader records a problem (key path + what was found + what is
// allowed) and returns a fallback, so validation goes on and every mistake is reported in one run.
import { ipv4ToNumber, parseCidr, type Cidr } from '../address.js';
import { parseDuration } from '../duration.js';

export type KeyPath = ReadonlyArray<string | number>;

export interface RawProblem {
  readonly path: KeyPath;
  readonly message: string;
}

export function formatKeyPath(path: KeyPath): string {
  let out = '';
  for (const part of path) out += typeof part === 'number' ? `[${part}]` : out === '' ? part : `.${part}`;
  return out === '' ? '(top level)' : out;
}

const BYTE_UNITS: Readonly<Record<string, number>> = {
  '': 1,
  k: 1e3,
  K: 1e3,
  M: 1e6,
  G: 1e9,
  Ki: 1024,
  Mi: 1024 ** 2,
  Gi: 1024 ** 3,
};

/** A byte count: a whole number, or a number with k, M, G (powers of 1000) or Ki, Mi, Gi (1024), and an optional B. */
export function parseBytes(v: unknown): number | null {
  if (typeof v === 'number') return Number.isInteger(v) && v >= 0 ? v : null;
  if (typeof v !== 'string') return null;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(k|K|M|G|Ki|Mi|Gi)?B?\s*$/.exec(v);
  if (m === null) return null;
  const n = Number(m[1]) * (BYTE_UNITS[m[2] ?? ''] ?? NaN);
  return Number.isFinite(n) ? Math.round(n) : null;
}

/** How a found value is named in a message: strings quoted, collections by kind. */
export function describe(value: unknown): string {
  if (value === null || value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return JSON.stringify(value);
  return `${typeof value} ${String(value)}`;
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = row[0] ?? 0;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = row[j] ?? 0;
      row[j] = Math.min(
        up + 1,
        (row[j - 1] ?? 0) + 1,
        diag + (a[i - 1]?.toLowerCase() === b[j - 1]?.toLowerCase() ? 0 : 1),
      );
      diag = up;
    }
  }
  return row[b.length] ?? 0;
}

function suggestion(word: string, allowed: readonly string[]): string {
  let best: string | null = null;
  let bestD = Infinity;
  for (const a of allowed) {
    const d = editDistance(word, a);
    if (d < bestD) {
      best = a;
      bestD = d;
    }
  }
  return best !== null && bestD <= Math.max(2, Math.floor(best.length / 3)) ? ` (did you mean "${best}"?)` : '';
}

export class Reader {
  readonly problems: RawProblem[] = [];
  /** Keys read in an old form that still works: a warning each, not an error. */
  readonly deprecated: RawProblem[] = [];

  add(path: KeyPath, message: string): void {
    this.problems.push({ path, message });
  }

  deprecate(path: KeyPath, message: string): void {
    this.deprecated.push({ path, message });
  }

  /** A mapping with only the allowed keys (unknown keys are reported, typos with a suggestion); null if not a mapping.
   * */
  mapping(value: unknown, path: KeyPath, allowed: readonly string[]): Record<string, unknown> | null {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      this.add(path, `must be a mapping of ${allowed.join(', ')}; found ${describe(value)}`);
      return null;
    }
    const obj = value as Record<string, unknown>;
    for (const key of Object.keys(obj)) {
      if (!allowed.includes(key)) {
        this.add([...path, key], `unknown key${suggestion(key, allowed)}; allowed here: ${allowed.join(', ')}`);
      }
    }
    return obj;
  }

  /** An optional mapping: absent -> {} so defaults apply. */
  section(
    parent: Record<string, unknown> | null,
    key: string,
    path: KeyPath,
    allowed: readonly string[],
  ): Record<string, unknown> {
    const v = parent?.[key];
    if (v === undefined || v === null) return {};
    return this.mapping(v, [...path, key], allowed) ?? {};
  }

  string(obj: Record<string, unknown>, key: string, path: KeyPath, fallback: string, required = false): string {
    const v = obj[key];
    if (v === undefined || v === null) {
      if (required) this.add([...path, key], 'is required');
      return fallback;
    }
    if (typeof v !== 'string' || v === '') {
      this.add(
        [...path, key],
        `must be a non-empty string; found ${describe(v)}${typeof v === 'number' ? ' (quote it)' : ''}`,
      );
      return fallback;
    }
    return v;
  }

  optionalString(obj: Record<string, unknown>, key: string, path: KeyPath): string | null {
    if (obj[key] === undefined || obj[key] === null) return null;
    const s = this.string(obj, key, path, '');
    return s === '' ? null : s;
  }

  integer(
    obj: Record<string, unknown>,
    key: string,
    path: KeyPath,
    min: number,
    max: number,
    fallback: number,
  ): number {
    const v = obj[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      this.add([...path, key], `must be a whole number from ${min} to ${max}; found ${describe(v)}`);
      return fallback;
    }
    return v;
  }

  /** A byte count (parseBytes) from `min` to `max`. */
  bytes(obj: Record<string, unknown>, key: string, path: KeyPath, min: number, max: number, fallback: number): number {
    const v = obj[key];
    if (v === undefined || v === null) return fallback;
    const n = parseBytes(v);
    if (n === null || n < min || n > max) {
      this.add(
        [...path, key],
        `must be a byte count from ${min} to ${max} (a number, or with k, M, G, Ki, Mi, Gi: 100M, 1G, 256Mi); found ${describe(v)}`,
      );
      return fallback;
    }
    return n;
  }

  boolean(obj: Record<string, unknown>, key: string, path: KeyPath, fallback: boolean): boolean {
    const v = obj[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'boolean') {
      this.add([...path, key], `must be true or false; found ${describe(v)}`);
      return fallback;
    }
    return v;
  }

  oneOf<T extends string>(
    obj: Record<string, unknown>,
    key: string,
    path: KeyPath,
    allowed: readonly T[],
    fallback: T,
  ): T {
    const v = obj[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) {
      const hint = typeof v === 'string' ? suggestion(v, allowed) : '';
      this.add([...path, key], `${describe(v)} is not allowed${hint}; use one of: ${allowed.join(', ')}`);
      return fallback;
    }
    return v as T;
  }

  /** A duration string (`500ms`, `10s`, `5m`, `1h`, `1m30s`) in milliseconds, within [minMs, maxMs]. */
  duration(
    obj: Record<string, unknown>,
    key: string,
    path: KeyPath,
    minMs: number,
    maxMs: number,
    fallbackMs: number,
    range: string,
  ): number {
    const v = obj[key];
    if (v === undefined || v === null) return fallbackMs;
    const ms = typeof v === 'string' ? parseDuration(v) : null;
    if (ms === null) {
      const bare = typeof v === 'number' ? ' (a bare number has no unit; write e.g. "10s")' : '';
      this.add(
        [...path, key],
        `${describe(v)} is not a duration${bare}; use a number with ms, s, m or h, e.g. 500ms, 10s, 5m`,
      );
      return fallbackMs;
    }
    if (ms < minMs || ms > maxMs) {
      this.add([...path, key], `${describe(v)} is out of range; allowed ${range}`);
      return fallbackMs;
    }
    return ms;
  }

  ipv4(value: unknown, path: KeyPath): string | null {
    if (typeof value !== 'string' || ipv4ToNumber(value) === null) {
      this.add(path, `${describe(value)} is not an IPv4 address (expected a dotted quad such as 192.0.2.1)`);
      return null;
    }
    return value;
  }

  list(obj: Record<string, unknown>, key: string, path: KeyPath): unknown[] | null {
    const v = obj[key];
    if (v === undefined || v === null) return null;
    if (!Array.isArray(v)) {
      this.add([...path, key], `must be a list; found ${describe(v)}`);
      return null;
    }
    return v;
  }

  cidrs(obj: Record<string, unknown>, key: string, path: KeyPath): Cidr[] | null {
    const items = this.list(obj, key, path);
    if (items === null) return null;
    const out: Cidr[] = [];
    items.forEach((item, i) => {
      if (typeof item !== 'string') {
        this.add([...path, key, i], `must be an IPv4 CIDR block such as 192.0.2.0/24; found ${describe(item)}`);
        return;
      }
      const c = parseCidr(item);
      if (typeof c === 'string') this.add([...path, key, i], c);
      else out.push(c);
    });
    return out;
  }
}
