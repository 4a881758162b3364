// DNS rebinding protection as a browser or an attacker meets it: the daemon answers only Host headers that name it
// (its listen address and port, localhost on loopback, names in admin.hosts); any other gets 421 with a clear body,
// on every path, and is counted in status and /metrics. wccpctl keeps working.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { hostAllowed, parseHost } from '../../src/admin/host-check.js';
import { startDaemon, TOKEN, wccpctl, type RunningDaemon } from '../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import type { StatusView } from '../../src/admin/api-types.js';

describe('hostAllowed', () => {
  const loopback = { listenHost: '127.0.0.1', names: [] };
  it('on loopback: the listen address and localhost with our port, nothing else', () => {
    for (const h of ['127.0.0.1:8080', 'localhost:8080', 'LOCALHOST:8080', 'localhost.:8080'])
      assert.ok(hostAllowed(h, 8080, loopback), h);
    for (const h of [
      undefined,
      '',
      '127.0.0.1',
      '127.0.0.1:8081',
      'localhost',
      'rebind.example:8080',
      '127.0.0.2:8080',
      '[::1]:8080',
      '127.0.0.1:8080:1',
      '127.0.0.1:99999',
      'a b:8080',
      '0.0.0.0:8080',
    ]) {
      assert.equal(hostAllowed(h, 8080, loopback), false, String(h));
    }
  });
  it('on a gateway address: only that address (port 80 may be left out), and the listed names on any port', () => {
    const gw = { listenHost: '192.0.2.1', names: ['wccpd.example', 'gw-1.example'] };
    for (const h of ['192.0.2.1:80', '192.0.2.1', 'wccpd.example', 'WCCPD.Example.:8443', 'gw-1.example:80'])
      assert.ok(hostAllowed(h, 80, gw), h);
    for (const h of ['localhost:80', '127.0.0.1:80', '192.0.2.2', 'x.wccpd.example', 'wccpd.example.evil.example']) {
      assert.equal(hostAllowed(h, 80, gw), false, h);
    }
  });
  it('on 0.0.0.0: any IPv4 literal with our port (a literal cannot be rebound), names only when listed', () => {
    const any = { listenHost: '0.0.0.0', names: [] };
    assert.ok(hostAllowed('198.51.100.7:8080', 8080, any));
    assert.equal(hostAllowed('198.51.100.7:8081', 8080, any), false);
    assert.equal(hostAllowed('gateway.example:8080', 8080, any), false);
    assert.equal(hostAllowed('localhost:8080', 8080, any), false);
  });
  it('parses name and port, defaulting to 80', () => {
    assert.deepEqual(parseHost('Example.COM.'), { name: 'example.com', port: 80 });
    assert.deepEqual(parseHost('example.com:8080'), { name: 'example.com', port: 8080 });
    assert.equal(parseHost('example.com:0'), null);
    assert.equal(parseHost('user@example.com'), null);
  });
});

/** A raw request with exactly this Host header (null: none at all, as HTTP/1.0 allows). */
function raw(
  url: string,
  path: string,
  host: string | null,
  init: { method?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: string; headers: Record<string, string | string[] | undefined> }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path,
        method: init.method ?? 'GET',
        setHost: host !== null,
        headers: { ...(host !== null ? { host } : {}), ...init.headers },
      },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => {
          body += d.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.setTimeout(5000, () => req.destroy(new Error(`no answer to ${path} within 5 s`)));
    req.end();
  });
}

describe('the admin server behind a rebinding name', () => {
  let daemon: RunningDaemon;
  let port = '';
  const rawStatus = async (host: string | null) => (await raw(daemon.url, '/api/v1/status', host)).status;
  before(async () => {
    daemon = await startDaemon([], { admin: ['hosts: [wccpd.example]'] });
    port = new URL(daemon.url).port;
  });
  after(async () => {
    await daemon?.stop();
  });

  it('refuses a foreign Host with 421 on every path, SSE and changes included, and counts each', async () => {
    const before = (JSON.parse((await raw(daemon.url, '/api/v1/status', `127.0.0.1:${port}`)).body) as StatusView).admin
      .hostRefused;
    assert.equal(before, 0);
    const attempts: Array<[string, string | null, { method?: string; headers?: Record<string, string> }]> = [
      ['/api/v1/status', `rebind.example:${port}`, {}],
      ['/', `rebind.example:${port}`, {}],
      ['/metrics', `rebind.example:${port}`, {}],
      ['/api/v1/services/0/engines', `127.0.0.1.rebind.example:${port}`, {}],
      ['/api/v1/events', `rebind.example:${port}`, { headers: { accept: 'text/event-stream' } }],
      [
        '/api/v1/services/0/engines/127.0.0.11/drain',
        `rebind.example:${port}`,
        { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } },
      ],
      ['/api/v1/status', `127.0.0.1:${Number(port) + 1}`, {}],
    ];
    for (const [path, host, init] of attempts) {
      const r = await raw(daemon.url, path, host, init);
      assert.equal(r.status, 421, `${init.method ?? 'GET'} ${path} with Host ${String(host)}`);
      const body = JSON.parse(r.body) as { error: string; message: string };
      assert.equal(body.error, 'misdirected-request');
      assert.match(
        body.message,
        /is not this server's address or a name in admin\.hosts; wccpd answers only requests for 127\.0\.0\.1:\d+ or a listed name \(DNS rebinding protection/,
      );
    }
    // No Host at all: node's HTTP/1.1 parser answers 400 before wccpd sees the request.
    assert.equal(await rawStatus(null), 400);
    const status = JSON.parse((await raw(daemon.url, '/api/v1/status', `127.0.0.1:${port}`)).body) as StatusView;
    assert.equal(status.admin.hostRefused, attempts.length);
    const { samples } = parsePrometheusText((await raw(daemon.url, '/metrics', `localhost:${port}`)).body);
    assert.equal(sampleValue(samples, 'wccpd_admin_host_refused_total', {}), attempts.length);
    // One warning line for the burst, not one per request.
    const warnings = daemon.output
      .join('')
      .split('\n')
      .filter((l) => l.includes('DNS rebinding protection; names to accept go in admin.hosts'));
    assert.equal(warnings.length, 1, warnings.join('\n'));
  });

  it('answers its own address, localhost and a name from admin.hosts; wccpctl works', async () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'wccpd.example', `WCCPD.example.:${port}`]) {
      assert.equal(await rawStatus(host), 200, host);
    }
    assert.equal((await raw(daemon.url, '/', `localhost:${port}`)).status, 200);
    const ctl = await wccpctl(['--url', daemon.url, 'status']);
    assert.equal(ctl.code, 0, ctl.stderr);
    assert.match(ctl.stdout, /Requests refused for their Host: +\d+/);
    const viaLocalhost = await wccpctl(['--url', `http://localhost:${port}`, '--json', 'status']);
    assert.equal(viaLocalhost.code, 0, viaLocalhost.stderr);
  });
});
