// The persistent `nft -i` session with a fake nft: each transaction is one included file in a private directory,
// nft's error becomes the DataplaneError callers had from `nft -f -`, a wedged nft is killed by the timeout, a dead
// one is started again for the next transaction, and nothing (file, directory, process) is left after stop().
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { DataplaneError } from '../../../src/dataplane/index.js';
import {
  SENTINEL_COMMAND,
  SENTINEL_LINE,
  createNftReader,
  createNftSession,
} from '../../../src/dataplane/kernel/nft-session.js';
import type { SessionChild } from '../../../src/dataplane/kernel/nft-session.js';

/** Calls `onLine` with each whole line written to `stdin` (what a fake nft reads). */
function eachLine(stdin: PassThrough, onLine: (line: string) => void): void {
  let buf = '';
  stdin.setEncoding('utf8');
  stdin.on('data', (chunk: string) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      onLine(line);
    }
  });
}

/** A fake `nft -i`: answers each `include` line with what `answer` says (or nothing: wedged). */
class FakeNft extends EventEmitter {
  readonly stdin = new PassThrough();
  readonly stdout = new PassThrough();
  readonly pid = 4242;
  killed: string | null = null;
  ended = false;
  readonly received: { line: string; file: string; text: string; dirMode: number; fileMode: number }[] = [];
  constructor(answer: (text: string) => string | null) {
    super();
    eachLine(this.stdin, (line) => {
      const m = /^include "(.*)"$/.exec(line);
      if (m !== null) {
        const file = m[1] ?? '';
        const text = readFileSync(file, 'utf8');
        this.received.push({
          line,
          file,
          text,
          dirMode: statSync(join(file, '..')).mode & 0o777,
          fileMode: statSync(file).mode & 0o777,
        });
        const out = answer(text);
        if (out === 'DIE') {
          setImmediate(() => this.emit('exit', null, 'SIGSEGV'));
          return;
        }
        if (out === null) return;
        if (out !== '') this.stdout.write(`${out}\n`);
      } else if (line === SENTINEL_COMMAND && this.received.length > 0) {
        const out = answer(this.received.at(-1)?.text ?? '');
        if (out !== null && out !== 'DIE') this.stdout.write(`${SENTINEL_LINE}\n`);
      }
    });
    this.stdin.on('end', () => {
      this.ended = true;
      this.emit('exit', 0, null);
    });
  }
  kill(signal?: NodeJS.Signals): boolean {
    this.killed = signal ?? 'SIGTERM';
    setImmediate(() => this.emit('exit', null, this.killed));
    return true;
  }
}

function harness(answer: (text: string) => string | null, timeoutMs = 10_000) {
  // A state directory that does not exist yet: the first transaction makes it.
  const top = mkdtempSync(join(tmpdir(), 'wccpd-session-test-'));
  const parentDir = join(top, 'state');
  const children: FakeNft[] = [];
  const session = createNftSession({
    timeoutMs,
    parentDir,
    spawnChild: () => {
      const c = new FakeNft(answer);
      children.push(c);
      return c as unknown as SessionChild;
    },
  });
  return { session, children, parentDir, cleanup: () => rmSync(top, { recursive: true, force: true }) };
}

test('a transaction is one included file in a private directory, both removed once nft has answered', async () => {
  const h = harness(() => '');
  try {
    await h.session.run('add table inet wccpd\n');
    await h.session.run('add chain inet wccpd c\n');
    assert.equal(h.children.length, 1, 'one nft process for both');
    const [a, b] = h.children[0]?.received ?? [];
    assert.equal(a?.text, 'add table inet wccpd\n');
    assert.equal(b?.text, 'add chain inet wccpd c\n');
    assert.equal(a?.dirMode, 0o700, 'the directory is private');
    assert.equal(a?.fileMode, 0o600);
    assert.match(a?.line ?? '', /^include "\/.*\/wccpd-nft-[^/]+\/transaction-1\.nft"$/);
    assert.notEqual(join(a?.file ?? '', '..'), join(b?.file ?? '', '..'), 'a directory per transaction');
    assert.deepEqual(readdirSync(h.parentDir), [], 'no transaction file or directory stays');
    await h.session.stop();
    assert.equal(h.children[0]?.ended, true, 'stop() ends nft (end of its input)');
  } finally {
    h.cleanup();
  }
});

test("nft's error is a command-failed DataplaneError with nft's message; the session goes on", async () => {
  const h = harness((text) =>
    text.includes('nosuch')
      ? 'In file included from <cmdline>:1:1-60:\n/tmp/x/transaction-1.nft:2:21-26: Error: Could not process rule: No such file or directory\ndelete chain inet t nosuch\n                    ^^^^^^'
      : '',
  );
  try {
    await assert.rejects(h.session.run('add chain inet t d\ndelete chain inet t nosuch\n'), (e: unknown) => {
      assert.ok(e instanceof DataplaneError);
      assert.equal(e.reason, 'command-failed');
      assert.match(e.message, /failed: \/tmp\/x\/transaction-1\.nft:2:21-26: Error: Could not process rule/);
      assert.doesNotMatch(e.message, /In file included/);
      assert.match(e.stderr ?? '', /delete chain inet t nosuch/);
      return true;
    });
    await h.session.run('add chain inet t e\n');
    assert.equal(h.children.length, 1, 'an error does not end the session');
    await h.session.stop();
  } finally {
    h.cleanup();
  }
});

test('a wedged nft is killed at the timeout; the next transaction starts a new one', async () => {
  let wedge = true;
  const h = harness(() => (wedge ? null : ''), 50);
  try {
    await assert.rejects(
      h.session.run('add table inet t\n'),
      (e: unknown) => e instanceof DataplaneError && e.reason === 'command-timeout',
    );
    assert.equal(h.children[0]?.killed, 'SIGKILL');
    wedge = false;
    await h.session.run('add table inet t\n');
    assert.equal(h.children.length, 2);
    await h.session.stop();
    assert.deepEqual(readdirSync(h.parentDir), [], 'no directory left');
  } finally {
    h.cleanup();
  }
});

test('nft dying during a transaction fails that transaction; the next one starts a new nft', async () => {
  // nft dies while the transaction waits for its answer.
  const h = harness((text) => (text.includes('die') ? 'DIE' : ''));
  try {
    await assert.rejects(
      h.session.run('die\n'),
      (e: unknown) => e instanceof DataplaneError && e.reason === 'command-failed' && /SIGSEGV/.test(e.message),
    );
    await h.session.run('add table inet t\n');
    assert.equal(h.children.length, 2);
    await h.session.stop();
  } finally {
    h.cleanup();
  }
});

test('10,000 transactions leave no file behind and use one process', async () => {
  const h = harness(() => '');
  try {
    for (let i = 0; i < 10_000; i++) await h.session.run(`add table inet t${i % 7}\n`);
    assert.equal(h.children.length, 1);
    assert.deepEqual(readdirSync(h.parentDir), []);
    await h.session.stop();
    assert.deepEqual(readdirSync(h.parentDir), []);
  } finally {
    h.cleanup();
  }
});

/** A fake `nft -j -i`: answers each listing line with `answer(line)` then the sentinel, or nothing (wedged). */
class FakeReader extends EventEmitter {
  readonly stdin = new PassThrough();
  readonly stdout = new PassThrough();
  readonly pid = 4343;
  readonly lines: string[] = [];
  constructor(answer: (line: string) => string | null) {
    super();
    let wedged = false;
    eachLine(this.stdin, (line) => {
      this.lines.push(line);
      if (line === SENTINEL_COMMAND) {
        if (!wedged) this.stdout.write(`${SENTINEL_LINE}\n`);
        return;
      }
      const out = answer(line);
      wedged = out === null;
      // Some listings arrive in pieces: the session must join them up to the end line.
      if (out !== null) for (const piece of [out.slice(0, 5), `${out.slice(5)}\n`]) this.stdout.write(piece);
    });
    this.stdin.on('end', () => this.emit('exit', 0, null));
  }
  kill(): boolean {
    setImmediate(() => this.emit('exit', null, 'SIGKILL'));
    return true;
  }
}

test("the reader: listings queue in one process, nft's error rejects that one only, a non-listing never reaches nft", async () => {
  const children: FakeReader[] = [];
  const reader = createNftReader({
    spawnChild: () => {
      const c = new FakeReader((line) =>
        line.includes('nosuch') ? 'Error: No such file or directory' : `{"nftables": [{"listed": "${line}"}]}`,
      );
      children.push(c);
      return c as unknown as SessionChild;
    },
  });
  // Ten at once: each gets its own answer, in order, from one process.
  const many = await Promise.all(
    Array.from({ length: 10 }, (_, i) => reader.list(['list', 'set', 'inet', 'wccpd', `bseen_${i}`])),
  );
  many.forEach((out, i) => assert.equal(out, `{"nftables": [{"listed": "list set inet wccpd bseen_${i}"}]}`));
  await assert.rejects(
    reader.list(['list', 'set', 'inet', 'wccpd', 'nosuch']),
    (e: unknown) =>
      e instanceof DataplaneError && e.reason === 'command-failed' && /No such file or directory/.test(e.message),
  );
  assert.match(await reader.list(['list', 'counters', 'table', 'inet', 'wccpd']), /list counters table/);
  await assert.rejects(reader.list(['list', 'set', 'inet', 'wccpd', 'x\nflush ruleset']), /not a listing/);
  assert.equal(children.length, 1);
  assert.ok(!(children[0]?.lines ?? []).some((l) => l.includes('flush')), 'the bad listing was never written');
  await reader.stop();
});

test("the reader: stop() fails a listing in flight with its own error, not the timeout's", async () => {
  const reader = createNftReader({
    timeoutMs: 60_000,
    spawnChild: () => new FakeReader(() => null) as unknown as SessionChild,
  });
  const pending = reader.list(['list', 'counters', 'table', 'inet', 'wccpd']);
  await new Promise((r) => setImmediate(r));
  await reader.stop();
  await assert.rejects(
    pending,
    (e: unknown) => e instanceof DataplaneError && /stopped during a listing/.test(e.message),
  );
});
