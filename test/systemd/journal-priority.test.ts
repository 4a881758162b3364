// Logs journald can sort (issue 31): under systemd (stdout is the journal stream, JOURNAL_STREAM) every line wccpd
// writes starts with its syslog priority, which journald reads with the unit's SyslogLevelPrefix=yes, so
// `journalctl -p warning -u wccpd` shows warnings and errors only. No journald runs here (systemd is not PID 1), so
// the test does what journald does: gives the real daemon a stdout whose device and inode JOURNAL_STREAM names, reads
// the `<N>` prefixes and filters them as `-p warning` would. JSON stays available (`logging.format: json`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, fstatSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { journalLine, resolveLogFormat, stderrText, syslogPriority } from '../../src/log.js';
import { serviceSection } from './unit-file.js';
import { waitFor, writeLoopbackConfig } from '../helpers/daemon.js';

const UNIT = readFileSync(new URL('../../systemd/wccpd.service', import.meta.url), 'utf8');

test('a pino level becomes the syslog priority journald files it under', () => {
  assert.deepEqual(
    [60, 50, 40, 30, 20, 10].map(syslogPriority),
    [2, 3, 4, 6, 7, 7],
    'fatal crit, error err, warn warning, info, debug, trace',
  );
  const line = journalLine(
    JSON.stringify({
      level: 40,
      time: 1,
      pid: 2,
      hostname: 'gw',
      name: 'wccpd',
      service: 0,
      engine: '192.0.2.11',
      reason: 'probe failed twice',
      msg: 'engine 192.0.2.11 usable -> suspect\nsecond line',
    }),
  );
  assert.equal(
    line,
    '<4>engine 192.0.2.11 usable -> suspect\\nsecond line service=0 engine=192.0.2.11 reason="probe failed twice"\n',
    'one line: a newline in the message would start a line at the default priority',
  );
  assert.equal(journalLine('not json\n'), '<6>not json\n');
  assert.equal(
    stderrText('a: b: warning: x\nc: d: is not allowed\n', true),
    '<4>a: b: warning: x\n<3>c: d: is not allowed\n',
  );
  assert.equal(stderrText('as it is\n', false), 'as it is\n');
});

test('the format: --pretty wins, then logging.format; auto is journal only when stdout is the journal', () => {
  assert.equal(resolveLogFormat('auto', false, true), 'journal');
  assert.equal(resolveLogFormat('auto', false, false), 'json');
  assert.equal(resolveLogFormat('json', false, true), 'json', 'a log shipper keeps its JSON under systemd');
  assert.equal(resolveLogFormat('journal', false, false), 'journal');
  assert.equal(resolveLogFormat('journal', true, true), 'pretty');
});

test('the unit leaves stdout and stderr to the journal and has journald read the priority prefix', () => {
  const s = serviceSection(UNIT);
  assert.equal(s.get('SyslogLevelPrefix')?.at(-1), 'yes');
  for (const k of ['StandardOutput', 'StandardError'])
    assert.ok(!s.has(k) || s.get(k)?.at(-1) === 'journal', `${k} must be the journal`);
  for (const exec of s.get('ExecStart') ?? []) assert.doesNotMatch(exec, /--pretty/);
});

/** Runs wccpd (sources, `none` data plane) with stdout and stderr on a file; JOURNAL_STREAM names it when `journal`. */
async function runDaemon(dir: string, configLines: string[], journal: 'own' | 'other' | 'none'): Promise<string> {
  const { path } = await writeLoopbackConfig(dir, {
    moreServices: ['- id: 51', '  protocol: tcp', '  ports: [8080]', '  engines:', '    allow: [0.0.0.0/0]'],
  });
  writeFileSync(path, `${readFileSync(path, 'utf8')}${configLines.join('\n')}\n`);
  const out = join(dir, `out-${journal}-${configLines.length}`);
  const fd = openSync(out, 'w');
  const st = fstatSync(fd, { bigint: true });
  const env: Record<string, string | undefined> = { ...process.env };
  delete env['JOURNAL_STREAM'];
  if (journal === 'own') env['JOURNAL_STREAM'] = `${st.dev}:${st.ino}`;
  if (journal === 'other') env['JOURNAL_STREAM'] = `${st.dev}:${st.ino + 1n}`;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/wccpd.ts', '--config', path], {
    stdio: ['ignore', fd, fd],
    env,
  });
  closeSync(fd);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  try {
    await waitFor(
      'wccpd started',
      async () => (readFileSync(out, 'utf8').includes('wccpd started') ? true : null),
      20_000,
    );
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
  return readFileSync(out, 'utf8');
}

test('under the journal every line has its priority, and -p warning keeps the warnings alone', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-journal-'));
  try {
    const text = await runDaemon(dir, [], 'own');
    const lines = text.trimEnd().split('\n');
    for (const l of lines) assert.match(l, /^<[0-7]>[^<]/, `every line starts with a priority: ${l}`);
    const started = lines.find((l) => l.includes('wccpd started'));
    assert.match(started ?? '', /^<6>wccpd started router=127\.0\.0\.1:\d+ /);
    // journalctl -p warning: priorities 0-4. They must be exactly the lines pino writes at warn or above (the same
    // daemon in JSON): the risky allow list among them, and no info line.
    const warnings = lines.filter((l) => Number(l.slice(1, 2)) <= 4).map((l) => l.slice(3));
    assert.ok(
      warnings.some((w) => w.includes('allows every address')),
      text,
    );
    assert.ok(
      lines.some((l) => l.startsWith('<6>') && l.includes('stopping')),
      'SIGTERM: an info line',
    );

    const json = await runDaemon(dir, ['logging:', '  format: json'], 'own');
    const records = json
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as { level: number; msg: string });
    const warnedInJson = records.filter((r) => r.level >= 40).map((r) => r.msg);
    // Each run has its own ports: numbers aside.
    const n = (t: string) => t.replace(/\d+/g, 'N');
    assert.deepEqual(
      warnings.map((w) => warnedInJson.map(n).find((m) => n(w).startsWith(m))),
      warnedInJson.map(n),
      `the journal's warnings are the JSON's level >= 40 lines:\n${text}\n${json}`,
    );

    // A JOURNAL_STREAM inherited by a process whose stdout is elsewhere (a shell started from a unit): JSON.
    const inherited = await runDaemon(dir, [], 'other');
    assert.match(inherited.split('\n')[0] ?? '', /^\{"level":/);
    const plain = await runDaemon(dir, [], 'none');
    assert.match(plain.split('\n')[0] ?? '', /^\{"level":/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("check-config's problems on stderr: <3> for an error, <4> for a warning", () => {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-journal-'));
  try {
    const conf = join(dir, 'bad.yaml');
    writeFileSync(
      conf,
      'router:\n  address: 192.0.2.1\ndataplane:\n  backend: none\nservices:\n  - id: 0\n    engines:\n      allow: [0.0.0.0/0]\n',
    );
    const warn = join(dir, 'warn.out');
    const fd = openSync(warn, 'w');
    const st = fstatSync(fd, { bigint: true });
    const run = (file: string) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/wccpd.ts', 'check-config', file], {
        stdio: ['ignore', 'ignore', fd],
        env: { ...process.env, JOURNAL_STREAM: `${st.dev}:${st.ino}` },
      }).status;
    assert.equal(run(conf), 0);
    writeFileSync(conf, 'router:\n  adress: 192.0.2.1\nservices: []\n');
    assert.equal(run(conf), 1);
    closeSync(fd);
    const lines = readFileSync(warn, 'utf8').trimEnd().split('\n');
    const warned = lines.filter((l) => l.includes(': warning: '));
    assert.ok(
      warned.some((l) => /^<4>.*warning: 0\.0\.0\.0\/0 allows every address/.test(l)),
      lines.join('\n'),
    );
    for (const l of warned) assert.match(l, /^<4>/);
    const errors = lines.filter((l) => !l.includes(': warning: '));
    assert.ok(errors.length >= 2, lines.join('\n'));
    for (const l of errors) assert.match(l, /^<3>/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
