// The version and build commit of this wccpd: what `wccpd --version`, `wccpctl --version`, the API's status and the
// `wccpd_build_info` metric report. The build (scripts/build-info.mjs, run by `npm run build`) writes both into
// dist/build-info.json; run from a checkout's src/ (tsx) there is none, and the commit is "unknown".
import { readFileSync } from 'node:fs';

export interface BuildInfo {
  /** package.json's version. */
  readonly version: string;
  /** The git commit it was built from (12 hex digits, `-dirty` when the tree had changes), or "unknown". */
  readonly commit: string;
}

export const UNKNOWN = 'unknown';

function readJson(url: URL): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(readFileSync(url, 'utf8'));
    return typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

function text(v: unknown): string | null {
  return typeof v === 'string' && v.length > 0 ? v : null;
}

let cached: BuildInfo | null = null;

/** Read once: dist/build-info.json beside the compiled code, else the checkout's package.json. */
export function buildInfo(): BuildInfo {
  if (cached !== null) return cached;
  // Compiled: this file is dist/src/build-info.js, the build's record is dist/build-info.json. From src/ (tsx) the
  // same URL is the checkout's build-info.json, which nothing writes.
  const built = readJson(new URL('../build-info.json', import.meta.url));
  const version =
    text(built?.['version']) ??
    text(readJson(new URL('../package.json', import.meta.url))?.['version']) ??
    text(readJson(new URL('../../package.json', import.meta.url))?.['version']) ??
    UNKNOWN;
  cached = { version, commit: text(built?.['commit']) ?? UNKNOWN };
  return cached;
}

/** One line for --version: `wccpd 0.1.0 (commit 6b98fc4a1b2c)`. */
export function versionLine(program: string, info: BuildInfo = buildInfo()): string {
  return `${program} ${info.version} (commit ${info.commit})`;
}
