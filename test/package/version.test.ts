// The version an operator reads: `wccpd --version`, `wccpctl --version`, `wccpctl status`, the API's status and the
// wccpd_build_info metric all say package.json's version and the build commit. Run from a checkout's sources (tsx)
// there is no build record, so the commit is "unknown"; the packaged build's commit is checked by package.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseCommandLine } from '../../src/admin/cli-args.js';
import { API_COMMANDS } from '../../src/admin/wccpctl.js';
import { startDaemon, wccpctl } from '../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';

const VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

function run(cli: string, args: string[]) {
  return spawnSync(process.execPath, ['--import', 'tsx', `src/cli/${cli}.ts`, ...args], { encoding: 'utf8' });
}

test('wccpd --version and -v print the version and the commit, and start nothing', () => {
  for (const flag of ['--version', '-v']) {
    const r = run('wccpd', [flag]);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, `wccpd ${VERSION} (commit unknown)\n`);
  }
  assert.match(run('wccpd', ['--help']).stdout, /wccpd --version/);
});

test("wccpctl --version prints wccpctl's own version without asking a daemon", () => {
  assert.deepEqual(parseCommandLine(['--version'], {}, API_COMMANDS), { kind: 'version' });
  assert.deepEqual(parseCommandLine(['status', '-v'], {}, API_COMMANDS), { kind: 'version' });
  // No daemon listens on this URL: the version needs none.
  const r = run('wccpctl', ['--url', 'http://127.0.0.1:9', '--version']);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, `wccpctl ${VERSION} (commit unknown)\n`);
});

test('the running daemon says its version in the status, in wccpctl status and in wccpd_build_info', async () => {
  const d = await startDaemon();
  try {
    const status = (await (await fetch(`${d.url}/api/v1/status`)).json()) as { build: unknown };
    assert.deepEqual(status.build, { version: VERSION, commit: 'unknown' });
    const { samples } = parsePrometheusText(await (await fetch(`${d.url}/metrics`)).text());
    assert.equal(sampleValue(samples, 'wccpd_build_info', { version: VERSION, commit: 'unknown' }), 1);
    assert.equal(samples.filter((s) => s.name === 'wccpd_build_info').length, 1);
    const ctl = await wccpctl(['--url', d.url, 'status']);
    assert.equal(ctl.code, 0, ctl.stderr);
    assert.match(ctl.stdout, new RegExp(`wccpd version: +${VERSION.replaceAll('.', '\\.')} \\(commit unknown\\)`));
    assert.match(d.output.join(''), new RegExp(`"version":"${VERSION}","commit":"unknown"`), 'the start line');
  } finally {
    await d.stop();
  }
});
