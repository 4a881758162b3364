// A test that needs root, a Debian package or a kernel feature calls need(): on a developer's machine a missing
// prerequisite skips the test with the reason; in CI (CI=true) or with WCCPD_REQUIRE_ALL=1 it fails, so a required
// test can never be skipped silently.
import { execFileSync } from 'node:child_process';

export const REQUIRE_ALL = process.env.CI === 'true' || process.env.WCCPD_REQUIRE_ALL === '1';

/** Returns false (and the test should skip) or true; throws when prerequisites are required but missing. */
export function need(ok: boolean, what: string): string | false {
  if (ok) return false;
  if (REQUIRE_ALL) throw new Error(`required prerequisite missing: ${what}`);
  return `skipped: ${what}`;
}

export function haveCommand(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
