// The process's last line (src/cli/process-boundary.ts): an error nothing caught is logged in one fatal JSON line
// with its message and stack, and the process exits 70, so systemd runs the cleanup and restarts wccpd.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

function run(how: 'throw' | 'reject'): { status: number | null; lines: Record<string, unknown>[]; stderr: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'test/cli/last-line-main.ts', how], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  const lines = r.stdout
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { status: r.status, lines, stderr: r.stderr };
}

for (const [how, kind, message] of [
  ['throw', 'uncaught exception', 'boom in a timer'],
  ['reject', 'unhandled rejection', 'boom in a promise'],
] as const) {
  test(`an ${kind} is one fatal line with its stack, then exit 70`, () => {
    const r = run(how);
    assert.equal(r.status, 70, r.stderr);
    assert.equal(r.lines.length, 1, JSON.stringify(r.lines));
    const [line] = r.lines;
    assert.equal(line?.level, 60, 'pino fatal');
    assert.equal(line?.kind, kind);
    assert.equal(line?.err, message);
    assert.match(String(line?.stack), /last-line-main\.ts/);
    assert.match(String(line?.msg), new RegExp(`${kind}: ${message}; exiting with status 70`));
  });
}
