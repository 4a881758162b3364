#!/usr/bin/env node
// Writes dist/build-info.json: package.json's version and the git commit being built (what `wccpd --version`, the
// API's status and wccpd_build_info report, src/build-info.ts). WCCPD_COMMIT overrides the commit (a build from a
// tarball); outside a git checkout, and without it, the commit is "unknown".
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

function git(...args) {
  return execFileSync('git', ['-C', root, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
}

let commit = process.env.WCCPD_COMMIT || 'unknown';
if (!process.env.WCCPD_COMMIT) {
  try {
    commit = git('rev-parse', '--short=12', 'HEAD');
    // Tracked files changed since that commit: the build is not exactly it.
    if (git('status', '--porcelain', '--untracked-files=no') !== '') commit += '-dirty';
  } catch {
    // not a git checkout (or no git): unknown
  }
}
mkdirSync(join(root, 'dist'), { recursive: true });
writeFileSync(join(root, 'dist', 'build-info.json'), `${JSON.stringify({ version, commit })}\n`);
