// The real daemon under the signals an admin or a tool sends by habit (issue 30, item 9): none of them stops wccpd.
// SIGHUP reloads the config (test/daemon/reload.test.ts has what a reload applies);
// SIGUSR1 (Node's inspector), SIGUSR2 and SIGPIPE are ignored. SIGTERM still stops it with status 0.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startDaemon, waitFor } from '../helpers/daemon.js';
import type { RunningDaemon } from '../helpers/daemon.js';

function withDaemon(): {
  daemon: () => RunningDaemon;
  config: () => string;
  original: () => string;
  signal: (name: NodeJS.Signals, line: RegExp) => Promise<void>;
  alive: (after: string) => Promise<void>;
  output: () => string;
} {
  let daemon: RunningDaemon;
  let config = '';
  let original = '';
  before(async () => {
    daemon = await startDaemon();
    config = join(daemon.dir, 'wccpd.yaml');
    original = readFileSync(config, 'utf8');
  });
  after(async () => {
    await daemon?.stop();
  });
  const output = (): string => daemon.output.join('');
  const alive = async (after: string): Promise<void> => {
    assert.equal(daemon.child.signalCode, null, `wccpd ended by ${daemon.child.signalCode} after ${after}`);
    assert.equal(daemon.child.exitCode, null, `wccpd exited after ${after}:\n${output().slice(-1500)}`);
    const r = await fetch(`${daemon.url}/api/v1/status`);
    assert.equal(r.status, 200, `the admin API answers after ${after}`);
  };
  const ended = (): boolean => daemon.child.exitCode !== null || daemon.child.signalCode !== null;
  const signal = async (name: NodeJS.Signals, line: RegExp): Promise<void> => {
    const from = output().length;
    daemon.child.kill(name);
    const seen = (): string => output().slice(from);
    await waitFor(`${name}'s log line ${line} or wccpd's end`, async () =>
      line.test(seen()) || ended() || /Debugger listening/.test(seen()) ? true : null,
    );
    await alive(name);
    assert.doesNotMatch(seen(), /Debugger listening/, `${name} started the inspector`);
    assert.match(seen(), line);
  };

  return { daemon: () => daemon, config: () => config, original: () => original, signal, alive, output };
}

describe('wccpd and SIGHUP', () => {
  const d = withDaemon();
  it('SIGHUP with the config unchanged: valid, nothing changed', async () => {
    await d.signal('SIGHUP', /reload: \S+wccpd\.yaml is valid; nothing changed/);
  });

  it('SIGHUP after an edit: applies what a reload may change, refuses what needs a restart', async () => {
    writeFileSync(d.config(), d.original().replace('hereIAm: 10s', 'hereIAm: 5s'));
    await d.signal('SIGHUP', /reload: \S+wccpd\.yaml applied: timers\.hereIAm/);
    writeFileSync(d.config(), d.original().replace('assignment: hash', 'assignment: mask'));
    await d.signal(
      'SIGHUP',
      /reload refused: \S+wccpd\.yaml: services\[0\]\.assignment: changed in service 0; restart wccpd/,
    );
  });

  it('SIGHUP with an invalid config: its problem is logged and the running config stays', async () => {
    writeFileSync(d.config(), d.original().replace('backend: none', 'backend: nope'));
    await d.signal('SIGHUP', /reload refused: \S+wccpd\.yaml: dataplane\.backend/);
    writeFileSync(d.config(), d.original());
  });
});

describe('wccpd and SIGUSR1, SIGUSR2, SIGPIPE', () => {
  const d = withDaemon();

  it('SIGPIPE is ignored (Node ignores it itself)', async () => {
    d.daemon().child.kill('SIGPIPE');
    await new Promise((r) => setTimeout(r, 500));
    await d.alive('SIGPIPE');
  });

  it('SIGUSR1 does not start the inspector', async () => {
    await d.signal('SIGUSR1', /SIGUSR1 ignored: the Node inspector is never started/);
  });

  it('SIGUSR2 is ignored', async () => {
    await d.signal('SIGUSR2', /SIGUSR2 ignored: it has no meaning to wccpd/);
  });

  it('SIGTERM still stops it, with status 0', async () => {
    assert.equal(await d.daemon().terminate(), 0);
  });
});
