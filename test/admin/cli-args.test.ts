// wccpctl's command line: global options before or after the command, each command's own options, unknown ones
// refused; then the real process, as an admin types it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseCommandLine, type Parsed } from '../../src/admin/cli-args.js';
import { API_COMMANDS } from '../../src/admin/wccpctl.js';
import { wccpctl } from '../helpers/daemon.js';

const parse = (argv: string[], env: Record<string, string> = {}): Parsed => parseCommandLine(argv, env, API_COMMANDS);
const line = (argv: string[], env: Record<string, string> = {}) => {
  const p = parse(argv, env);
  assert.equal(p.kind, 'run', JSON.stringify(p));
  return p.kind === 'run' ? p.line : assert.fail();
};

test('global options stand before or after the command, and mean the same', () => {
  const before = line(['--url', 'http://192.0.2.1:8080', '--json', 'buckets', '--service', '51']);
  const after = line(['buckets', '--json', '--service', '51', '--url', 'http://192.0.2.1:8080']);
  assert.deepEqual(after, before);
  assert.equal(after.global.json, true);
  assert.equal(after.service, 51);
  assert.equal(line(['drain', '192.0.2.11', '--token=t']).global.token, 't');
  assert.deepEqual(line(['weight', '192.0.2.11', '0']).args, ['192.0.2.11', '0']);
});

test('defaults come from the environment, and the command line wins over it', () => {
  const d = line(['status'], { WCCPD_URL: 'http://192.0.2.9:80', WCCPD_TOKEN: 'env' });
  assert.deepEqual(d.global, { url: 'http://192.0.2.9:80', token: 'env', json: false });
  assert.equal(line(['status']).global.url, 'http://127.0.0.1:8080');
  assert.equal(line(['status', '--token', 'cli'], { WCCPD_TOKEN: 'env' }).global.token, 'cli');
});

test('unknown options, options of another command, bad values and unknown commands are refused', () => {
  const refused: [string[], RegExp][] = [
    [['buckets', '--bogus'], /Unknown option '--bogus'/],
    [['decode', '--hex'], /decode: unknown option --hex/],
    [['status', '--icp'], /status: unknown option --icp/],
    [['engines', '--service', '256'], /not a service id \(0-255\): 256/],
    [['decode', '--icp', '--gre'], /exclude each other/],
    [['status', '--url'], /argument missing/],
    [['frobnicate'], /unknown command 'frobnicate'/],
    [[], /no command given/],
  ];
  for (const [argv, message] of refused) {
    const p = parse(argv);
    assert.equal(p.kind, 'error', argv.join(' '));
    assert.match(p.kind === 'error' ? p.message : '', message, argv.join(' '));
  }
  assert.deepEqual(parse(['decode', '-h']), { kind: 'help', command: 'decode' });
  assert.equal(line(['decode', '--gre', '-']).protocol, 'gre');
});

test('the real wccpctl: buckets --json after the command reaches for the daemon; an unknown flag exits 1', async () => {
  const r = await wccpctl(['buckets', '--json', '--url', 'http://127.0.0.1:9']);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /cannot reach wccpd at http:\/\/127\.0\.0\.1:9/);
  const bad = await wccpctl(['buckets', '--jsn', '--url', 'http://127.0.0.1:9']);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /Unknown option '--jsn'/);
  assert.match(bad.stderr, /usage: wccpctl/);
});
