// The probers against real sockets on loopback: a TCP listener that accepts and then goes away, a listener whose
// accept queue is full (connect times out), an ICP responder built with src/wire/icp.ts, ICMP echo as root, and HTTP
// servers that answer like Squid, hang, or answer something that is not HTTP.
import { test } from 'node:test';
import { EventEmitter } from 'node:events';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import { createSocket } from 'node:dgram';
import { spawn } from 'node:child_process';
import { decodeIcp, encodeIcp } from '../../src/wire/icp.js';
import {
  checkHead,
  echoRequest,
  httpProbeRequest,
  httpProber,
  icmpChecksum,
  icpProber,
  openIcmpProber,
  tcpProber,
} from '../../src/control/probes/index.js';
import { haveCommand, isRoot, need } from '../helpers/require.js';

const HOST = '127.0.0.1';

test('TCP: passes with an RTT while the listener accepts; fails "connection refused" well within the timeout once it is gone', async () => {
  const server = createServer((s) => s.destroy());
  await new Promise<void>((r) => server.listen(0, HOST, () => r()));
  const port = (server.address() as AddressInfo).port;
  const probe = tcpProber(port);
  try {
    const up = await probe(HOST, 1000);
    assert.equal(up.ok, true);
    assert.ok(up.ok && up.rttMs >= 0 && up.rttMs < 1000, `RTT ${up.ok ? up.rttMs : '-'} ms`);
  } finally {
    await new Promise<void>((r) => server.close(() => r()));
  }
  const started = performance.now();
  const down = await probe(HOST, 1000);
  assert.deepEqual(down, { kind: 'tcp', ok: false, detail: `connection refused (port ${port})`, hard: true });
  assert.ok(performance.now() - started < 1000, 'refused at once, not at the timeout');
});

test(
  'TCP: a listener that never accepts (full accept queue) fails with a connect timeout',
  { skip: need(haveCommand('python3'), 'python3 (a listener that never accepts)') },
  async () => {
    const py = spawn(
      'python3',
      [
        '-c',
        'import socket,sys,time\ns=socket.socket()\ns.bind(("127.0.0.1",0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(30)',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      const port = await new Promise<number>((resolve, reject) => {
        py.stdout.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
        py.once('exit', (code) => reject(new Error(`python3 exited ${code}`)));
      });
      // Each probe's connection stays in the never-read accept queue; once it is full, SYNs are dropped.
      const probe = tcpProber(port);
      let outcome = await probe(HOST, 300);
      for (let i = 0; i < 4 && outcome.ok; i++) outcome = await probe(HOST, 300);
      assert.deepEqual(outcome, { kind: 'tcp', ok: false, detail: `connect timeout 300 ms (port ${port})` });
    } finally {
      py.kill('SIGKILL');
    }
  },
);

async function icpResponder(reply: (query: { requestNumber: number; url: string }) => Buffer[]) {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, HOST, () => r()));
  const queries: string[] = [];
  s.on('message', (buf, from) => {
    const d = decodeIcp(buf);
    if (!d.ok || d.value.opcode !== 'QUERY') return;
    queries.push(d.value.url);
    for (const out of reply(d.value)) s.send(out, from.port, from.address);
  });
  return { port: s.address().port, queries, close: () => new Promise<void>((r) => s.close(() => r())) };
}

const icpReply = (opcode: 'MISS' | 'MISS_NOFETCH' | 'HIT', requestNumber: number, url: string) =>
  encodeIcp({ opcode, requestNumber, options: 0, optionData: 0, senderAddress: HOST, url });

test('ICP: a MISS_NOFETCH reply is a pass carrying its opcode; a reply to another request number is ignored', async () => {
  const r = await icpResponder((q) => [
    icpReply('MISS', q.requestNumber + 1, q.url),
    icpReply('MISS_NOFETCH', q.requestNumber, q.url),
  ]);
  try {
    const outcome = await icpProber({ port: r.port })(HOST, 1000);
    assert.equal(outcome.ok, true);
    assert.equal(outcome.ok && outcome.icpOpcode, 'MISS_NOFETCH');
    assert.deepEqual(r.queries, ['http://wccpd-probe.invalid/']);
  } finally {
    await r.close();
  }
});

test('ICP: no reply fails at the timeout; a closed port fails at once with connection refused', async () => {
  const silent = await icpResponder(() => []);
  try {
    assert.deepEqual(await icpProber({ port: silent.port })(HOST, 200), {
      kind: 'icp',
      ok: false,
      detail: `no ICP reply in 200 ms (port ${silent.port})`,
    });
  } finally {
    await silent.close();
  }
  const started = performance.now();
  const refused = await icpProber({ port: silent.port })(HOST, 1000);
  assert.deepEqual(refused, { kind: 'icp', ok: false, detail: `connection refused (port ${silent.port})`, hard: true });
  assert.ok(performance.now() - started < 1000);
});

test('ICMP: the echo request carries a valid Internet checksum', () => {
  const req = echoRequest(0x1234, 7);
  assert.equal(req[0], 8);
  assert.equal(icmpChecksum(req), 0, 'a message with its checksum sums to zero');
  assert.equal(req.readUInt16BE(4), 0x1234);
  assert.equal(req.readUInt16BE(6), 7);
});

test(
  'ICMP: echo to 127.0.0.1 passes with an RTT (root)',
  { skip: need(isRoot, 'root (raw ICMP socket)') },
  async () => {
    const opened = await openIcmpProber();
    assert.ok(opened.ok, opened.ok ? '' : opened.reason);
    try {
      const outcomes = await Promise.all([opened.prober.probe(HOST, 1000), opened.prober.probe(HOST, 1000)]);
      for (const o of outcomes) {
        assert.equal(o.kind, 'icmp');
        assert.ok(o.ok && o.rttMs >= 0 && o.rttMs < 1000, JSON.stringify(o));
      }
    } finally {
      opened.prober.close();
    }
  },
);

/** A TCP server on loopback whose connections get `answer` (or nothing, to hang); records what it was sent. */
async function httpish(
  answer: ((sock: Socket) => void) | null,
): Promise<{ port: number; requests: string[]; close(): Promise<void> }> {
  const requests: string[] = [];
  const sockets = new Set<Socket>();
  const srv = createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.once('data', (d: Buffer) => {
      requests.push(d.toString('latin1'));
      answer?.(sock);
    });
    sock.on('error', () => {});
  });
  await new Promise<void>((r) => srv.listen(0, HOST, () => r()));
  const port = (srv.address() as { port: number }).port;
  return {
    port,
    requests,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        srv.close(() => r());
      }),
  };
}

// What Debian's Squid 5.7 answers (measured in the lab): its own 501, never forwarded.
const SQUID_501 =
  'HTTP/1.1 501 Not Implemented\r\nServer: squid/5.7\r\nContent-Length: 0\r\nX-Squid-Error: ERR_UNSUP_REQ 0\r\nConnection: close\r\n\r\n';

test("ICMP: a receive error (raw-socket emits 'error' and closes the socket) ends nothing; the next probe opens a new socket", async () => {
  const sockets: { emitter: EventEmitter; sent: Buffer[] }[] = [];
  const fake = {
    createSocket: () => {
      const emitter = new EventEmitter();
      const entry = { emitter, sent: [] as Buffer[] };
      sockets.push(entry);
      return Object.assign(emitter, {
        send: (b: Buffer, _o: number, _l: number, _a: string, _before: unknown, after: (e: Error | null) => void) => {
          entry.sent.push(b);
          setImmediate(() => {
            after(null);
            // The engine's echo reply, behind the IP header a raw socket delivers.
            const reply = Buffer.concat([Buffer.from([0x45]), Buffer.alloc(19), b]);
            reply[20] = 0;
            emitter.emit('message', reply, '192.0.2.7');
          });
        },
        close: () => undefined,
      });
    },
  };
  const r = await openIcmpProber(async () => fake as unknown as Pick<typeof import('raw-socket'), 'createSocket'>);
  assert.ok(r.ok);
  // With no listener, EventEmitter throws this out of the socket's callback (the process ends); with a listener that
  // kept the closed socket, every later echo request failed and every engine turned suspect.
  sockets[0]?.emitter.emit('error', new Error('recvfrom: ENOMEM'));
  const outcome = await r.prober.probe('192.0.2.7', 5_000);
  assert.equal(outcome.ok, true, JSON.stringify(outcome));
  assert.equal(sockets.length, 2);
  assert.equal(sockets[1]?.sent.length, 1, 'the echo request went out on the new socket');
  r.prober.close();
});

test("HTTP: OPTIONS with Max-Forwards: 0 to a never-resolvable URL; the proxy's own answer passes with an RTT", async () => {
  const s = await httpish((sock) => sock.end(SQUID_501));
  try {
    const o = await httpProber(s.port)(HOST, 1000);
    assert.equal(o.ok, true, JSON.stringify(o));
    assert.ok(o.ok && o.rttMs >= 0 && o.rttMs < 1000);
    assert.deepEqual(s.requests, [httpProbeRequest()]);
    assert.match(s.requests[0] ?? '', /^OPTIONS http:\/\/wccpd-probe\.invalid\/ HTTP\/1\.1\r\n/);
    assert.match(s.requests[0] ?? '', /\r\nMax-Forwards: 0\r\n/);
  } finally {
    await s.close();
  }
});

test('HTTP: a hung proxy (the kernel accepts, nothing answers) fails on silence at the timeout, not as hard evidence', async () => {
  const s = await httpish(null);
  try {
    const started = performance.now();
    const o = await httpProber(s.port)(HOST, 250);
    assert.deepEqual(o, { kind: 'http', ok: false, detail: `no HTTP answer in 250 ms (connected; port ${s.port})` });
    assert.ok(performance.now() - started >= 240);
    assert.equal(s.requests.length, 1, 'one connection: no retry once connected');
  } finally {
    await s.close();
  }
});

test('HTTP: refused, an answer that is not HTTP, and a close before the headers end are hard evidence, at once', async () => {
  const gone = await httpish(null);
  const port = gone.port;
  await gone.close();
  assert.deepEqual(await httpProber(port)(HOST, 1000), {
    kind: 'http',
    ok: false,
    detail: `connection refused (port ${port})`,
    hard: true,
  });
  const ssh = await httpish((sock) => sock.write('SSH-2.0-OpenSSH_9.2\r\n'));
  const half = await httpish((sock) => sock.end('HTTP/1.1 200 OK\r\nServer: x\r\n'));
  const badStatus = await httpish((sock) => sock.end('HTTP/1.1 2000 OK\r\n\r\n'));
  try {
    const started = performance.now();
    assert.deepEqual(await httpProber(ssh.port)(HOST, 1000), {
      kind: 'http',
      ok: false,
      hard: true,
      detail: `answer is not HTTP (starts "SSH-2.0-OpenSSH_")` + ` (port ${ssh.port})`,
    });
    assert.deepEqual(await httpProber(half.port)(HOST, 1000), {
      kind: 'http',
      ok: false,
      hard: true,
      detail: `connection closed after 28 bytes, before a complete HTTP answer (port ${half.port})`,
    });
    assert.deepEqual(await httpProber(badStatus.port)(HOST, 1000), {
      kind: 'http',
      ok: false,
      hard: true,
      detail: `bad status line "HTTP/1.1 2000 OK" (port ${badStatus.port})`,
    });
    assert.ok(performance.now() - started < 1000, 'none waited for the timeout');
  } finally {
    await ssh.close();
    await half.close();
    await badStatus.close();
  }
});

test('HTTP: checkHead accepts a head split over reads and refuses bad header lines and endless heads', () => {
  assert.deepEqual(checkHead(Buffer.from('HTT')), { kind: 'incomplete' });
  assert.deepEqual(checkHead(Buffer.from('HTTP/1.0 403 Forbidden\r\nX: 1\r\n')), { kind: 'incomplete' });
  assert.deepEqual(checkHead(Buffer.from('HTTP/1.0 403 Forbidden\r\nX: 1\r\n\r\nbody')), {
    kind: 'valid',
    status: 403,
  });
  assert.deepEqual(checkHead(Buffer.from(SQUID_501)), { kind: 'valid', status: 501 });
  assert.deepEqual(checkHead(Buffer.from('HTTP/1.1 200 OK\r\nno colon here\r\n\r\n')), {
    kind: 'invalid',
    why: 'bad header line "no colon here"',
  });
  assert.deepEqual(checkHead(Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\n'), Buffer.alloc(17_000, 'a')])), {
    kind: 'invalid',
    why: 'no end of headers in 16384 bytes',
  });
});
