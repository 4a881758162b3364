// scripts/run-tests.mjs as CI meets it: a test file that never ends (here, a child process it started and left
// running keeps it alive, as test/systemd/hardened.test.ts once did for 11 minutes) is killed with everything it
// started once the per-file time limit passes, named, and counted as a failure; the files after it still run, and the
// one summary at the end (what .ci/run reads) sums every file.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../helpers/daemon.js';
import { killTree, within } from '../helpers/processes.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));

const PASSES = `import { it } from 'node:test';
it('passes', () => undefined);
it('is skipped', { skip: 'on purpose' }, () => undefined);
`;
// Its test passes, but the child it starts (and never stops) holds the file's pipes: the file never exits.
const HANGS = (pidFile: string) => `import { it } from 'node:test';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
it('starts a child and leaves it running', () => {
  const child = spawn('sleep', ['300'], { stdio: ['ignore', 'pipe', 'pipe'] });
  writeFileSync(${JSON.stringify(pidFile)}, String(child.pid));
});
`;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
}

describe('scripts/run-tests.mjs', () => {
  it('kills a file still running after the per-file limit with what it started, names it, and fails the run', async () => {
    const dir = mkdtempSync(join(tmpdir(), `wccpd-run-tests-${process.pid}-`));
    const pidFile = join(dir, 'sleep.pid');
    let runPid = 0;
    try {
      mkdirSync(join(dir, 'test'));
      symlinkSync(join(REPO, 'node_modules'), join(dir, 'node_modules'));
      writeFileSync(join(dir, 'test/a.test.ts'), PASSES);
      writeFileSync(join(dir, 'test/b-hangs.test.ts'), HANGS(pidFile));
      writeFileSync(join(dir, 'test/c.test.ts'), PASSES);
      // Without this test's NODE_TEST_CONTEXT: node's runner would take the files for a recursive run and skip them.
      const env: NodeJS.ProcessEnv = { ...process.env, WCCPD_TEST_FILE_LIMIT: '3' };
      delete env.NODE_TEST_CONTEXT;
      const run = spawn(process.execPath, [join(REPO, 'scripts/run-tests.mjs')], {
        cwd: dir,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      runPid = run.pid ?? 0;
      let out = '';
      run.stdout.on('data', (d: Buffer) => (out += d.toString()));
      run.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const closed = new Promise<number | null>((r) => run.once('close', (code) => r(code)));
      const status = await within(closed, 60_000, 'run-tests').catch((e: Error) => {
        throw new Error(`${e.message}; its output:\n${out}`);
      });
      assert.equal(status, 1, out);
      assert.match(out, /test\/b-hangs\.test\.ts: killed after 3 s, the per-file time limit/);
      // The file after it ran.
      assert.equal(out.match(/^ok \d+ - passes$/gm)?.length, 2, out);
      // .ci/run reads the last summary: the sum over the files, the killed one a failure.
      const last = (key: string) => [...out.matchAll(new RegExp(`^# ${key} (\\d+)$`, 'gm'))].at(-1)?.[1];
      assert.deepEqual(
        ['tests', 'pass', 'fail', 'skipped'].map((k) => [k, last(k)]),
        [
          ['tests', '5'],
          ['pass', '2'],
          ['fail', '1'],
          ['skipped', '2'],
        ],
      );
      assert.match(out, /^# failed files: test\/b-hangs\.test\.ts$/m);
      // The child the file left running went with it.
      assert.ok(existsSync(pidFile), 'the hanging file started its child');
      const pid = Number(readFileSync(pidFile, 'utf8'));
      await waitFor('the left child gone', async () => (alive(pid) ? null : true), 5000);
    } finally {
      if (runPid > 0) killTree(runPid);
      if (existsSync(pidFile)) {
        const pid = Number(readFileSync(pidFile, 'utf8'));
        if (alive(pid)) process.kill(pid, 'SIGKILL');
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
