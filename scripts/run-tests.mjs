#!/usr/bin/env node
// Runs every test/**/*.test.ts with node:test under tsx, one file at a time (lab tests share the kernel).
// Arguments narrow the run to files whose path contains one of them: `node scripts/run-tests.mjs wire buckets`.
// Each file runs in a process group of its own with a time limit (WCCPD_TEST_FILE_LIMIT, seconds; default below): a
// file still running then (a test that never ends, or a process, server or timer it left that keeps it alive) is
// killed with its whole group, reported by name and counted as a failure, so one hung file cannot stall the run.
// The totals of every file are summed into one summary at the end, in the reporter's own form (`# skipped 0`).
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';

// The slowest files take 80 s here (test/lab/ha; test/e2e/rebalance 65 s, test/demo 62 s; the whole run ~15 min on
// 2026-12-02): 15 min per file is far above any of them.
const DEFAULT_LIMIT_S = 900;
/** Colour codes (the spec reporter's, on a terminal). */
const ANSI = new RegExp(String.fromCharCode(27) + '\\[[0-9;]*m', 'g');
const KEYS = ['tests', 'suites', 'pass', 'fail', 'cancelled', 'skipped', 'todo'];

function find(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...find(path));
    else if (name.endsWith('.test.ts')) out.push(path);
  }
  return out;
}

const limitText = process.env.WCCPD_TEST_FILE_LIMIT;
const limitS = limitText === undefined || limitText === '' ? DEFAULT_LIMIT_S : Number(limitText);
if (!Number.isFinite(limitS) || limitS <= 0) {
  console.error(`WCCPD_TEST_FILE_LIMIT=${limitText}: expected a number of seconds above 0`);
  process.exit(2);
}
const filters = process.argv.slice(2);
const files = find('test')
  .sort()
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)));
if (files.length === 0) {
  console.error(`no test files match ${filters.join(' ')}`);
  process.exit(1);
}
const tty = process.stdout.isTTY === true;
const reporter = tty ? 'spec' : 'tap';
const mark = tty ? 'ℹ' : '#';

/** The file's process group, while one runs (signals to this script are passed on to it). */
let group = 0;
let stopSignal = null;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    // A second signal: kill at once.
    const forward = stopSignal === null ? signal : 'SIGKILL';
    stopSignal = signal;
    if (group > 0) {
      try {
        process.kill(-group, forward);
      } catch {
        /* gone */
      }
    }
  });
}

/** Runs one file; resolves with its exit status, whether the limit killed it, and its summary counts. */
function runFile(file) {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--test', '--test-concurrency=1', `--test-reporter=${reporter}`, file],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
        env: tty && process.env.FORCE_COLOR === undefined ? { ...process.env, FORCE_COLOR: '1' } : process.env,
      },
    );
    group = child.pid ?? 0;
    const counts = {};
    let partial = '';
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        // The runner's own summary (the last of each key wins: a test's output comes before it).
        const m = /^(?:# |ℹ )(tests|suites|pass|fail|cancelled|skipped|todo) (\d+)$/.exec(line.replace(ANSI, ''));
        if (m) counts[m[1]] = Number(m[2]);
      }
    });
    child.stderr.on('data', (chunk) => process.stderr.write(chunk));
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      try {
        process.kill(-group, 'SIGKILL');
      } catch {
        /* gone */
      }
    }, limitS * 1000);
    let status = null;
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      group = 0;
      // A process that left the group may still hold the pipes: stop reading them.
      child.stdout.destroy();
      child.stderr.destroy();
      resolve({ status, killed, counts });
    };
    child.on('exit', (code, signal) => {
      status = code ?? (signal ? 128 : 1);
      // Whatever is left in the file's group (a daemon it started and did not stop) goes with it.
      try {
        process.kill(-(child.pid ?? 0), 'SIGKILL');
      } catch {
        /* nothing left */
      }
      setTimeout(finish, 5000).unref();
    });
    child.on('close', finish);
  });
}

const total = Object.fromEntries(KEYS.map((k) => [k, 0]));
const failedFiles = [];
const started = Date.now();
for (const file of files) {
  if (stopSignal !== null) break;
  const r = await runFile(file);
  for (const k of KEYS) total[k] += r.counts[k] ?? 0;
  if (r.killed) {
    total.tests += 1;
    total.fail += 1;
    failedFiles.push(file);
    const line = `${file}: killed after ${limitS} s, the per-file time limit (WCCPD_TEST_FILE_LIMIT): a test never ended, or something it started kept the file running`;
    console.log(tty ? `✖ ${line}` : `not ok - ${line}`);
  } else if (r.status !== 0) failedFiles.push(file);
}
if (stopSignal !== null) {
  console.error(`run-tests: stopped by ${stopSignal}`);
  process.exit(stopSignal === 'SIGINT' ? 130 : 143);
}
if (files.length > 1 || failedFiles.length > 0) {
  console.log(`${mark} all ${files.length} files`);
  for (const k of KEYS) console.log(`${mark} ${k} ${total[k]}`);
  console.log(`${mark} duration_ms ${Date.now() - started}`);
  if (failedFiles.length > 0) console.log(`${mark} failed files: ${failedFiles.join(' ')}`);
}
process.exit(failedFiles.length > 0 ? 1 : 0);
