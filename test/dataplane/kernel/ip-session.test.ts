// The persistent `ip -batch` with a fake ip: each batch's output ends at the sentinel's answer, failed lines are
// numbered within the batch though ip numbers them over its life, a wedged ip is killed at the timeout, a dead one
// is started again, and stop() ends it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { DataplaneError } from '../../../src/dataplane/index.js';
import { createIpSession } from '../../../src/dataplane/kernel/ip-session.js';
import type { SessionChild } from '../../../src/dataplane/kernel/nft-session.js';

/** A fake `ip -j -force -batch -`: `fail ...` lines fail, `get X` prints a route, `hang` never answers. */
class FakeIp extends EventEmitter {
  readonly stdin = new PassThrough();
  readonly stdout = new PassThrough();
  line = 0;
  killed = false;
  ended = false;
  constructor() {
    super();
    let buf = '';
    this.stdin.setEncoding('utf8');
    this.stdin.on('data', (chunk: string) => {
      buf += chunk;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const l = buf.slice(0, i);
        buf = buf.slice(i + 1);
        this.line += 1;
        if (l === 'hang') return;
        if (l === 'die') {
          setImmediate(() => this.emit('exit', 255, null));
          return;
        }
        if (l.startsWith('fail')) this.stdout.write(`RTNETLINK answers: File exists\nCommand failed -:${this.line}\n`);
        else if (l.startsWith('route get ')) this.stdout.write(`[{"dst":"${l.slice(10)}","dev":"br0"}]\n`);
        else if (l === 'link show dev lo') this.stdout.write('[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK"]}]\n');
      }
    });
    this.stdin.on('end', () => {
      this.ended = true;
      this.emit('exit', 0, null);
    });
  }
  kill(): boolean {
    this.killed = true;
    setImmediate(() => this.emit('exit', null, 'SIGKILL'));
    return true;
  }
}

function harness(timeoutMs = 10_000) {
  const children: FakeIp[] = [];
  const s = createIpSession({
    timeoutMs,
    spawnChild: () => {
      const c = new FakeIp();
      children.push(c);
      return c as unknown as SessionChild;
    },
  });
  return { s, children };
}

test('batches share one ip; answers and failed lines are per batch', async () => {
  const { s, children } = harness();
  const a = await s.run(['route get 192.0.2.11', 'rule add x', 'fail y']);
  assert.equal(a.out, '[{"dst":"192.0.2.11","dev":"br0"}]');
  assert.deepEqual([...a.failed], [[3, 'RTNETLINK answers: File exists']]);
  const b = await s.run(['fail z', 'route replace w', 'route get 192.0.2.12']);
  assert.deepEqual([...b.failed], [[1, 'RTNETLINK answers: File exists']], 'numbered within the batch');
  assert.equal(b.out, '[{"dst":"192.0.2.12","dev":"br0"}]');
  assert.equal(children.length, 1);
  await s.stop();
  assert.equal(children[0]?.ended, true);
});

test('a wedged ip is killed at the timeout and a dead one fails its batch; the next batch starts a new ip', async () => {
  const { s, children } = harness(50);
  await assert.rejects(s.run(['hang']), (e: unknown) => e instanceof DataplaneError && e.reason === 'command-timeout');
  assert.equal(children[0]?.killed, true);
  assert.deepEqual([...(await s.run(['fail a'])).failed], [[1, 'RTNETLINK answers: File exists']]);
  await assert.rejects(
    s.run(['rule add b', 'die']),
    (e: unknown) => e instanceof DataplaneError && e.reason === 'command-failed' && /exit 255/.test(e.message),
  );
  const again = await s.run(['fail c']);
  assert.deepEqual([...again.failed], [[1, 'RTNETLINK answers: File exists']], 'a new ip numbers from 1');
  assert.equal(children.length, 3);
  await s.stop();
});

test('a line with a line break is refused (it would be two commands)', async () => {
  const { s, children } = harness();
  await assert.rejects(s.run(['rule add x\nrule del y']), /line break/);
  assert.equal(children.length, 0);
});
