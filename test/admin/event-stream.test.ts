// The Server-Sent Events stream under abuse, as clients see it: at most admin.eventClients at once (503 with a clear
// body beyond, counted); a client that stops reading is dropped once its unsent bytes pass the bound (counted), while
// clients that read get every event.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { setImmediate as tick } from 'node:timers/promises';
import { AdminServer, EVENT_BUFFER_LIMIT } from '../../src/admin/http.js';
import type { AdminModel } from '../../src/admin/model.js';
import type { Metrics } from '../../src/admin/metrics.js';
import type { EventView } from '../../src/admin/api-types.js';
import { waitFor } from '../helpers/daemon.js';

/** The model's event feed only; nothing else is read by the stream. */
function eventModel(): { model: AdminModel; emit(e: EventView): void } {
  const listeners = new Set<(e: EventView) => void>();
  const unused = () => {
    throw new Error('not used by the event stream');
  };
  const model: AdminModel = {
    status: unused,
    statusWithTraffic: unused,
    buckets: unused,
    engines: unused,
    which: unused,
    recentEvents: unused,
    drain: unused,
    undrain: unused,
    setWeight: unused,
    plan: unused,
    planRebalance: unused,
    loadEpoch: unused,
    loadSoFar: unused,
    subscribe(l) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
  };
  return {
    model,
    emit: (e) => {
      for (const l of listeners) l(e);
    },
  };
}

interface Client {
  readonly socket: Socket;
  /** The status line, once the head arrived. */
  status(): Promise<string>;
  text(): string;
  events(): number;
  closed(): boolean;
}

function open(port: number, reading = true): Client {
  const socket = connect(port, '127.0.0.1');
  let text = '';
  let events = 0;
  let closed = false;
  socket.on('data', (d: Buffer) => {
    const s = d.toString('latin1');
    text = (text + s).slice(-4096);
    events += s.split('\ndata: ').length - 1 + (s.startsWith('data: ') ? 1 : 0);
    if (!reading && text.includes('\r\n\r\n')) socket.pause();
  });
  socket.on('close', () => {
    closed = true;
  });
  socket.on('error', () => undefined);
  socket.write(`GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAccept: text/event-stream\r\n\r\n`);
  return {
    socket,
    status: () => waitFor('the response head', async () => /^HTTP\/1\.1 \d+ [^\r]*/.exec(text)?.[0] ?? null, 5000),
    text: () => text,
    events: () => events,
    closed: () => closed,
  };
}

describe('the event stream', () => {
  const feed = eventModel();
  const server = new AdminServer({
    host: '127.0.0.1',
    port: 0,
    token: null,
    hosts: [],
    eventClients: 3,
    context: { model: feed.model, metrics: {} as Metrics },
  });
  const clients: Client[] = [];
  const track = (c: Client) => {
    clients.push(c);
    return c;
  };
  before(() => server.start());
  after(async () => {
    for (const c of clients) c.socket.destroy();
    await server.stop();
  });

  it('takes admin.eventClients clients, answers the next with 503 and counts it, and takes one again when one leaves', async () => {
    const first = [track(open(server.port())), track(open(server.port())), track(open(server.port()))];
    for (const c of first) assert.equal(await c.status(), 'HTTP/1.1 200 OK');
    const over = track(open(server.port()));
    assert.equal(await over.status(), 'HTTP/1.1 503 Service Unavailable');
    await waitFor('the 503 body', async () => (over.text().includes('}') ? true : null), 5000);
    assert.match(
      over.text(),
      /"error":"too-many-event-clients","message":"the event stream already has its 3 clients \(admin\.eventClients\); try again later/,
    );
    assert.deepEqual(server.counters(), {
      eventClients: 3,
      eventClientsMax: 3,
      eventClientsRefused: 1,
      eventClientsDropped: 0,
      hostRefused: 0,
      connectionsRefused: 0,
      badRequests: 0,
      unauthorized: 0,
      internalErrors: 0,
    });

    first[2]!.socket.destroy();
    await waitFor(
      'the server to notice the client left',
      async () => (server.counters().eventClients === 2 ? true : null),
      5000,
    );
    assert.equal(await track(open(server.port())).status(), 'HTTP/1.1 200 OK');
    assert.equal(server.counters().eventClientsRefused, 1);
  });

  it('drops a client that does not read once its unsent bytes pass the bound; readers get all 20,000 events', async () => {
    for (const c of clients.splice(0)) c.socket.destroy();
    await waitFor('no clients', async () => (server.counters().eventClients === 0 ? true : null), 5000);
    const readers = [track(open(server.port())), track(open(server.port()))];
    const stalled = track(open(server.port(), false));
    for (const c of [...readers, stalled]) assert.equal(await c.status(), 'HTTP/1.1 200 OK');

    // ~300 bytes each: 6 MB in all, more than the kernel's socket buffers and the bound together.
    const N = 20_000;
    const pad = 'x'.repeat(200);
    for (let i = 0; i < N; i++) {
      feed.emit({
        time: i,
        type: 'engine-state',
        service: 0,
        engine: '192.0.2.11',
        from: 'usable',
        to: 'draining',
        reason: pad,
      });
      if (i % 100 === 99) await tick();
    }
    await waitFor(
      'every event at the readers',
      async () => (readers.every((r) => r.events() === N) ? true : null),
      20_000,
    );
    assert.deepEqual(
      readers.map((r) => [r.closed(), r.events()]),
      [
        [false, N],
        [false, N],
      ],
    );
    const c = server.counters();
    assert.deepEqual(
      [c.eventClients, c.eventClientsDropped],
      [2, 1],
      'the stalled client was dropped, the readers stay',
    );
    // The dropped client sees its stream end (after what the kernel had buffered) once it reads again.
    stalled.socket.resume();
    await waitFor('the stalled client sees the connection close', async () => (stalled.closed() ? true : null), 10_000);
    assert.ok(stalled.events() < N, `the stalled client got ${stalled.events()} of ${N} events`);
    assert.ok(stalled.events() * 300 > EVENT_BUFFER_LIMIT, 'it was dropped only after more than the bound was sent');
  });
});
