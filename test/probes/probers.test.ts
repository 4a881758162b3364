// The probers against real sockets on loopback: a TCP listener that accepts and then goes away, a listener whose
// accept queue is full (connect times out), an ICP responder built with src/wire/icp.ts, ICMP echo as root.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { createSocket } from 'node:dgram';
import { spawn } from 'node:child_process';
import { decodeIcp, encodeIcp } from '../../src/wire/icp.js';
import { icpProber, icmpChecksum, echoRequest, openIcmpProber, tcpProber } from '../../src/control/probes/index.js';
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
  assert.deepEqual(down, { kind: 'tcp', ok: false, detail: `connection refused (port ${port})` });
  assert.ok(performance.now() - started < 1000, 'refused at once, not at the timeout');
});

test('TCP: a listener that never accepts (full accept queue) fails with a connect timeout', { skip: need(haveCommand('python3'), 'python3 (a listener that never accepts)') }, async () => {
  const py = spawn('python3', ['-c',
    'import socket,sys,time\ns=socket.socket()\ns.bind(("127.0.0.1",0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(30)'],
  { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      py.stdout.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
      py.once('exit', (code) => reject(new Error(`python3 exited ${code}`)));
    });
    // Each probe's connection stays in the never-read accept queue; once it is full, SYNs are dropped.
    const probe = tcpProber(port);
    let outcome = await probe(HOST, 300);
    for (let i = 0; i < 4 && outcome.ok; i++) outcome = await probe(HOST, 300);
    assert.deepEqual(outcome, { kind: 'tcp', ok: false, detail: `connect timeout 300ms (port ${port})` });
  } finally {
    py.kill('SIGKILL');
  }
});

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
  const r = await icpResponder((q) => [icpReply('MISS', q.requestNumber + 1, q.url), icpReply('MISS_NOFETCH', q.requestNumber, q.url)]);
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
    assert.deepEqual(await icpProber({ port: silent.port })(HOST, 200), { kind: 'icp', ok: false, detail: `no ICP reply in 200ms (port ${silent.port})` });
  } finally {
    await silent.close();
  }
  const started = performance.now();
  const refused = await icpProber({ port: silent.port })(HOST, 1000);
  assert.deepEqual(refused, { kind: 'icp', ok: false, detail: `connection refused (port ${silent.port})` });
  assert.ok(performance.now() - started < 1000);
});

test('ICMP: the echo request carries a valid Internet checksum', () => {
  const req = echoRequest(0x1234, 7);
  assert.equal(req[0], 8);
  assert.equal(icmpChecksum(req), 0, 'a message with its checksum sums to zero');
  assert.equal(req.readUInt16BE(4), 0x1234);
  assert.equal(req.readUInt16BE(6), 7);
});

test('ICMP: echo to 127.0.0.1 passes with an RTT (root)', { skip: need(isRoot, 'root (raw ICMP socket)') }, async () => {
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
});
