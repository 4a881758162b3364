// The window before the daemon's own handlers: wccpd reads its config from a FIFO the test holds, so the signals
// arrive while the config is being read, every time. Node's defaults would end wccpd on SIGHUP and SIGUSR2 there
// (e.g. a `systemctl reload` right after a start) and start the inspector on SIGUSR1.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor, writeLoopbackConfig } from '../helpers/daemon.js';

/** Opens the FIFO's write end once a reader has it open (O_NONBLOCK: ENXIO until then). */
async function writerOnceRead(fifo: string): Promise<number> {
  return waitFor(
    'wccpd reading its config from the FIFO',
    async () => {
      try {
        return openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENXIO') return null;
        throw e;
      }
    },
    20_000,
  );
}

/** wccpd (under tsx) reading its config from a FIFO in a new directory; `text` is the config, to write when it will. */
async function startOnFifo() {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-early-${process.pid}-`));
  const { path, httpPort } = await writeLoopbackConfig(dir);
  const text = readFileSync(path);
  const fifo = join(dir, 'wccpd-fifo.yaml');
  execFileSync('mkfifo', [fifo]);
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/wccpd.ts', '--config', fifo], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return { dir, httpPort, text, fifo, child };
}

describe('signals while wccpd starts', () => {
  it('SIGHUP, SIGUSR1 and SIGUSR2 while the config is read are ignored, and the daemon then starts', async () => {
    const { dir, httpPort, text, fifo, child } = await startOnFifo();
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    try {
      const writer = await writerOnceRead(fifo);
      for (const signal of ['SIGHUP', 'SIGUSR1', 'SIGUSR2'] as const) child.kill(signal);
      await waitFor('the three signals noted', async () =>
        /SIGUSR2 while starting/.test(output) || child.exitCode !== null || child.signalCode !== null ? true : null,
      );
      assert.equal(child.signalCode, null, `wccpd ended by ${child.signalCode} while reading its config`);
      writeSync(writer, text);
      closeSync(writer);
      const status = await waitFor(
        'the admin API',
        async () => {
          const r = await fetch(`http://127.0.0.1:${httpPort}/api/v1/status`).catch(() => null);
          return r?.status === 200 ? r.status : null;
        },
        20_000,
      );
      assert.equal(status, 200);
      for (const signal of ['SIGHUP', 'SIGUSR1', 'SIGUSR2'])
        assert.match(output, new RegExp(`wccpd: ${signal} while starting: ignored`));
      assert.doesNotMatch(output, /Debugger listening/);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a SIGHUP while the config is read, with stderr a pipe nobody reads any more, does not end wccpd', async () => {
    const { dir, httpPort, text, fifo, child } = await startOnFifo();
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    // The reader of wccpd's stderr goes away (a journal stream or a shell pipeline ended): its notes now fail, EPIPE.
    child.stderr.destroy();
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    try {
      const writer = await writerOnceRead(fifo);
      // Twice: every write fails anew, not only the first. The error comes a tick after the write: 1 s is ample.
      child.kill('SIGHUP');
      await new Promise((r) => setTimeout(r, 500));
      child.kill('SIGHUP');
      await new Promise((r) => setTimeout(r, 1000));
      assert.equal(
        child.exitCode,
        null,
        `wccpd exited (status ${child.exitCode}) on its stderr note; stdout:\n${output}`,
      );
      assert.equal(child.signalCode, null, `wccpd ended by ${child.signalCode}`);
      writeSync(writer, text);
      closeSync(writer);
      const status = await waitFor(
        'the admin API',
        async () => {
          if (child.exitCode !== null) throw new Error(`wccpd exited (status ${child.exitCode}); stdout:\n${output}`);
          const r = await fetch(`http://127.0.0.1:${httpPort}/api/v1/status`).catch(() => null);
          return r?.status === 200 ? r.status : null;
        },
        20_000,
      );
      assert.equal(status, 200);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
