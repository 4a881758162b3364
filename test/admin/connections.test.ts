// The admin server under a crowd of idle or stalled connections, as clients see it: at most admin.eventClients + 128
// at once (the next is closed without an answer, counted), and a client that does not finish its request headers in
// time is closed, so the crowd cannot use up the daemon's file descriptors and the API answers again.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { AdminServer, MAX_REQUEST_CONNECTIONS } from '../../src/admin/http.js';
import type { AdminModel } from '../../src/admin/model.js';
import type { Metrics } from '../../src/admin/metrics.js';
import { recordingLog } from '../../src/log.js';
import { waitFor } from '../helpers/daemon.js';

const EVENT_CLIENTS = 2;
const HEADERS_TIMEOUT_MS = 1500;

interface Conn {
  readonly socket: Socket;
  text(): string;
  closed(): boolean;
}

function open(port: number, send: string): Conn {
  const socket = connect(port, '127.0.0.1');
  let text = '';
  let closed = false;
  socket.on('data', (d: Buffer) => {
    text += d.toString('latin1');
  });
  socket.on('close', () => {
    closed = true;
  });
  socket.on('error', () => undefined);
  if (send !== '') socket.write(send);
  return { socket, text: () => text, closed: () => closed };
}

describe('admin connections', () => {
  const log = recordingLog();
  const server = new AdminServer({
    host: '127.0.0.1',
    port: 0,
    token: null,
    hosts: [],
    eventClients: EVENT_CLIENTS,
    headersTimeoutMs: HEADERS_TIMEOUT_MS,
    context: { model: { subscribe: () => () => undefined } as unknown as AdminModel, metrics: {} as Metrics },
    log,
  });
  const conns: Conn[] = [];
  before(() => server.start());
  after(async () => {
    for (const c of conns) c.socket.destroy();
    await server.stop();
  });
  const request = () => `GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1:${server.port()}\r\nConnection: close\r\n\r\n`;

  it('a crowd of stalled clients: the one past the cap is closed and counted; the stalled ones are closed in time; then the API answers', async () => {
    const cap = EVENT_CLIENTS + MAX_REQUEST_CONNECTIONS;
    // Half a request line each, never finished (slowloris), and some that send nothing at all.
    for (let i = 0; i < cap; i++) conns.push(open(server.port(), i % 2 === 0 ? 'GET / HTTP/1.1\r\nHost: 12' : ''));
    await waitFor(
      'every stalled connection accepted',
      async () => (conns.every((c) => c.socket.readyState === 'open') ? true : null),
      5000,
    );
    await new Promise((r) => setTimeout(r, 100));
    const over = open(server.port(), request());
    conns.push(over);
    await waitFor('the connection past the cap to be closed', async () => (over.closed() ? true : null), 5000);
    assert.equal(over.text(), '', 'closed without an answer');
    assert.equal(server.counters().connectionsRefused, 1);
    assert.ok(
      log.lines.some((l) =>
        /admin: refused 1 connection\(s\), e\.g\. from 127\.0\.0\.1: 130 are open/.test(l.msg ?? ''),
      ),
      'logged',
    );

    await waitFor(
      'the stalled clients to be closed',
      async () => (conns.slice(0, cap).every((c) => c.closed()) ? true : null),
      HEADERS_TIMEOUT_MS + 5000,
    );
    const after = open(server.port(), request());
    conns.push(after);
    await waitFor('an answer', async () => (after.closed() ? true : null), 5000);
    assert.match(after.text(), /^HTTP\/1\.1 404 /);
  });
});
