// A request target that is no URL (`GET http://[ HTTP/1.1`: node's parser passes it, `new URL` throws) is the client's
// error, answered 400, not a 500 "internal" as before; an error inside wccpd's handling is counted and logged.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rawExchange, startDaemon } from '../helpers/daemon.js';
import type { RunningDaemon } from '../helpers/daemon.js';

function rawRequest(url: string, target: string): Promise<string> {
  const { host } = new URL(url);
  return rawExchange(url, `GET ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
}

describe('the admin API and request targets that are no URL', () => {
  let daemon: RunningDaemon;
  before(async () => {
    daemon = await startDaemon();
  });
  after(async () => {
    await daemon?.stop();
  });

  for (const target of ['http://[', 'http://a:99999/api/v1/status', 'https://%zz/']) {
    it(`${target}: 400 bad-request`, async () => {
      const answer = await rawRequest(daemon.url, target);
      assert.match(answer, /^HTTP\/1\.1 400 /, answer);
      assert.match(answer, /"error":"bad-request"/);
    });
  }

  it('none of them counts as an internal error, and the daemon still answers', async () => {
    const metrics = await (await fetch(`${daemon.url}/metrics`)).text();
    assert.match(metrics, /^wccpd_admin_internal_errors_total 0$/m);
    assert.equal(daemon.child.exitCode, null);
  });
});
