// What the admin API refuses is counted where an operator looks: node's parser refusals (400, 431) were answered
// and closed with no trace, and neither they, our own 400s nor a 401 for a missing token had a counter.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rawExchange, startDaemon, TOKEN } from '../helpers/daemon.js';
import type { RunningDaemon } from '../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';

async function counters(url: string): Promise<{ bad: number; unauthorized: number }> {
  const { samples } = parsePrometheusText(await (await fetch(`${url}/metrics`)).text());
  return {
    bad: sampleValue(samples, 'wccpd_admin_bad_requests_total', {}) ?? NaN,
    unauthorized: sampleValue(samples, 'wccpd_admin_unauthorized_total', {}) ?? NaN,
  };
}

describe('the admin API counts what it refuses', () => {
  let daemon: RunningDaemon;
  before(async () => {
    daemon = await startDaemon();
  });
  after(async () => {
    await daemon?.stop();
  });

  it("node's parser refusals are answered as before, closed and counted: 400 for garbage, 431 for huge headers", async () => {
    const host = new URL(daemon.url).host;
    const garbage = await rawExchange(daemon.url, 'NOT HTTP AT ALL\r\n\r\n');
    assert.match(garbage, /^HTTP\/1\.1 400 /, garbage);
    const huge = await rawExchange(
      daemon.url,
      `GET / HTTP/1.1\r\nHost: ${host}\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    assert.match(huge, /^HTTP\/1\.1 431 /, huge);
    const badChunk = await rawExchange(
      daemon.url,
      `POST /api/v1/services/0/engines/192.0.2.10/drain HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n`,
    );
    assert.match(badChunk, /^HTTP\/1\.1 (400|401) /, badChunk);
    const c = await counters(daemon.url);
    assert.ok(c.bad >= 2, `wccpd_admin_bad_requests_total ${c.bad}, expected at least the garbage and the 431`);
    assert.equal(daemon.child.exitCode, null);
  });

  it('our own 400s (a target that is no URL, a body that is not JSON) and a 401 without the token are counted', async () => {
    const before = await counters(daemon.url);
    const target = await rawExchange(
      daemon.url,
      `GET http://[ HTTP/1.1\r\nHost: ${new URL(daemon.url).host}\r\nConnection: close\r\n\r\n`,
    );
    assert.match(target, /^HTTP\/1\.1 400 /, target);
    const notJson = await fetch(`${daemon.url}/api/v1/services/0/engines/192.0.2.10/drain`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
      body: '{not json',
    });
    assert.equal(notJson.status, 400);
    const noToken = await fetch(`${daemon.url}/api/v1/services/0/engines/192.0.2.10/drain`, { method: 'POST' });
    assert.equal(noToken.status, 401);
    const wrongToken = await fetch(`${daemon.url}/api/v1/services/0/engines/192.0.2.10/drain`, {
      method: 'POST',
      headers: { authorization: 'Bearer guessed' },
    });
    assert.equal(wrongToken.status, 401);
    const after = await counters(daemon.url);
    assert.equal(after.bad - before.bad, 2, 'the two 400s');
    assert.equal(after.unauthorized - before.unauthorized, 2, 'the two 401s');
    const status = (await (await fetch(`${daemon.url}/api/v1/status`)).json()) as {
      admin: { badRequests: number; unauthorized: number };
    };
    assert.equal(status.admin.badRequests, after.bad);
    assert.equal(status.admin.unauthorized, after.unauthorized);
  });
});
