#!/usr/bin/env node
// Runs every test/**/*.test.ts with node:test under tsx, one file at a time (lab tests share the kernel).
// Arguments narrow the run to files whose path contains one of them: `node scripts/run-tests.mjs wire buckets`.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

function find(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...find(path));
    else if (name.endsWith('.test.ts')) out.push(path);
  }
  return out;
}

const filters = process.argv.slice(2);
const files = find('test')
  .sort()
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)));
if (files.length === 0) {
  console.error(`no test files match ${filters.join(' ')}`);
  process.exit(1);
}
const reporter = process.stdout.isTTY ? 'spec' : 'tap';
const r = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--test', '--test-concurrency=1', `--test-reporter=${reporter}`, ...files],
  { stdio: 'inherit' },
);
process.exit(r.status ?? 1);
