// The userland backend on the in-process shims (no root): classification by the WCCP hash, GRE and L2 output,
// stickiness, fail modes, counters.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { EventEmitter } from 'node:events';
import { Wire } from '../../../native-free-shims/wire.js';
import * as pcap from '../../../native-free-shims/pcap/index.js';
import * as raw from '../../../native-free-shims/raw-socket/index.js';
import { UserlandRedirector, type UserlandOptions } from '../../../src/dataplane/userland/userland.js';
import { captureFilter } from '../../../src/dataplane/userland/plane.js';
import { recordingLog } from '../../../src/log.js';
import { guardRuleset } from '../../../src/dataplane/userland/guard.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import type { Links } from '../../../src/dataplane/userland/links.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import { SQUID_MASK, matchMask } from '../../../src/buckets/mask.js';
import { ipv4ToNumber } from '../../../src/address.js';
import { BUCKET_COUNT, type EngineAddress } from '../../../src/buckets/table.js';
import { decodeGreRedirect, decodeIpv4Header, TCP_FLAGS } from '../../../src/wire/gre.js';
import { maskSet, webCache } from '../service-fixture.js';
import { GW_MAC, RecordingGuard, failingSends, macBytes, shimIo, tcpFrame, tick } from '../../shims/harness.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const MACS: Record<string, string> = { [E1]: '02:00:00:00:01:11', [E2]: '02:00:00:00:01:12' };
const ENGINE_DEVICE_MAC = '02:00:00:00:00:e0';

/** Bucket b -> engines[b % n], or null for buckets listed in `holes`. */
function table(engines: readonly EngineAddress[], changeNumber = 1, holes: readonly number[] = []) {
  return {
    changeNumber,
    buckets: Array.from({ length: BUCKET_COUNT }, (_, b) =>
      engines.length === 0 || holes.includes(b) ? null : (engines[b % engines.length] ?? null),
    ),
  };
}

const service = (over: Partial<ServiceRedirect> = {}): ServiceRedirect =>
  webCache(() => null, [E1, E2], { forwarding: 'gre', table: table([E1, E2]), ...over });

/** A destination in 198.51.100.0/24 whose bucket is b (the hash is the XOR of the bytes). */
function destinationInBucket(b: number): string {
  const last = b ^ 198 ^ 51 ^ 100;
  return `198.51.100.${last}`;
}

interface Gre {
  engine: string;
  serviceId: number;
  dynamic: boolean;
  alternate: boolean;
  priBucket: number;
  inner: Buffer;
}

function setup(links?: Links, over: (wire: Wire) => Partial<UserlandOptions> = () => ({})) {
  const wire = new Wire({ localAddress: '192.0.2.1' });
  const guard = new RecordingGuard();
  let clock = 1_000_000;
  const r = new UserlandRedirector({
    io: shimIo(wire),
    guard,
    now: () => clock,
    flows: { idleTimeoutMs: 60_000, finLingerMs: 5_000 },
    ...(links === undefined ? {} : { links }),
    ...over(wire),
  });
  const client = pcap.createSession('c0', { wire }); // the client's side of the wire: injects frames on c0
  const engines = raw.createSocket({ protocol: 47, wire }); // what the engines receive (the IP layer of the wire)
  const gre: Gre[] = [];
  engines.on('message', (packet: Buffer) => {
    const ip = decodeIpv4Header(packet);
    assert.ok(ip.ok);
    const d = decodeGreRedirect(packet.subarray(20));
    assert.ok(d.ok, d.ok ? '' : d.error.detail);
    gre.push({
      engine: ip.value.dst,
      serviceId: d.value.serviceId,
      dynamic: d.value.dynamic,
      alternate: d.value.alternate,
      priBucket: d.value.priBucket,
      inner: Buffer.from(d.value.inner),
    });
  });
  const direct = raw.createSocket({ protocol: 6, wire }); // packets re-sent on the direct path (protocol 255 -> TCP)
  const directs: Buffer[] = [];
  direct.on('message', (p: Buffer) => directs.push(p));
  const l2 = pcap.createSession('e0', { wire });
  const frames: Buffer[] = [];
  l2.on('packet', (p: pcap.PacketWithHeader) => frames.push(Buffer.from(p.buf.subarray(0, p.header.readUInt32LE(8)))));
  return {
    wire,
    guard,
    r,
    gre,
    directs,
    frames,
    advance: (ms: number) => {
      clock += ms;
    },
    send: (frame: Buffer) => client.inject(frame),
    close: async () => {
      await r.stop();
      for (const s of [client, l2]) s.close();
      engines.close();
      direct.close();
      assert.equal(wire.openTaps, 0, 'every session and socket closed');
    },
  };
}

test('GRE: each new connection goes to the engine its bucket names, with the redirect header and the packet intact', async () => {
  const t = setup();
  await t.r.start();
  const s = service({ serviceId: 51, table: table([E1, E2], 7) });
  await t.r.apply(s);
  const sent: { dst: string; ip: Buffer }[] = [];
  for (let i = 0; i < 64; i++) {
    const dst = `198.51.100.${((i * 37) % 254) + 1}`;
    const { frame, ip } = tcpFrame({ src: '203.0.113.10', dst, srcPort: 30000 + i, dstPort: 80, seq: i * 1000 });
    sent.push({ dst, ip });
    t.send(frame);
  }
  // Not the service's port, and a packet from an engine: neither is ours.
  t.send(tcpFrame({ src: '203.0.113.10', dst: '198.51.100.9', srcPort: 1, dstPort: 443 }).frame);
  t.send(tcpFrame({ src: E1, dst: '198.51.100.9', srcPort: 2, dstPort: 80 }).frame);
  await tick();
  assert.equal(t.gre.length, sent.length);
  t.gre.forEach((g, i) => {
    const want = sent[i];
    assert.ok(want !== undefined);
    const bucket = bucketOf(want.dst);
    assert.equal(g.priBucket, bucket, `bucket of ${want.dst}`);
    assert.equal(g.engine, s.table.buckets[bucket], `engine of bucket ${bucket}`);
    assert.equal(g.serviceId, 51);
    assert.equal(g.dynamic, true);
    assert.equal(g.alternate, false);
    assert.deepEqual(g.inner, want.ip, 'inner packet byte-identical');
  });
  const c = await t.r.counters();
  const perEngine = c.engines.get(51);
  assert.deepEqual([...(perEngine?.keys() ?? [])].sort(), [E1, E2]);
  const packets = [...(perEngine?.values() ?? [])].reduce((n, x) => n + x.packets, 0);
  const bytes = [...(perEngine?.values() ?? [])].reduce((n, x) => n + x.bytes, 0);
  assert.equal(packets, t.gre.length);
  assert.equal(
    bytes,
    sent.reduce((n, x) => n + x.ip.length, 0),
  );
  const buckets = c.buckets.get(51) ?? [];
  assert.equal(
    buckets.reduce((n, x) => n + x.packets, 0),
    sent.length,
    'one new connection per SYN',
  );
  for (const { dst } of sent) assert.ok((buckets[bucketOf(dst)]?.packets ?? 0) > 0);
  assert.equal(t.guard.modeOf(51), 'redirect');
  await t.close();
  assert.ok(t.guard.removed >= 2, 'start and stop both clear the kernel rule');
});

test('the standard service 0 carries D=0', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service());
  t.send(tcpFrame({ src: '203.0.113.10', dst: '198.51.100.80', srcPort: 5555, dstPort: 80 }).frame);
  await tick();
  assert.deepEqual(
    t.gre.map((g) => [g.serviceId, g.dynamic]),
    [[0, false]],
  );
  await t.close();
});

test('L2: the frame goes out on the engine segment with the engine MAC, the IP packet unchanged', async () => {
  const asked: string[] = [];
  const links: Links = {
    async engineLink(engine) {
      asked.push(engine);
      const mac = MACS[engine];
      if (mac === undefined) throw new Error(`unknown engine ${engine}`);
      return { device: 'e0', deviceMac: ENGINE_DEVICE_MAC, engineMac: mac };
    },
  };
  const t = setup(links);
  await t.r.start();
  const s = service({ forwarding: 'l2' });
  await t.r.apply(s);
  assert.deepEqual(asked.sort(), [E1, E2]);
  const sent: { dst: string; frame: Buffer }[] = [];
  for (let i = 0; i < 16; i++) {
    const dst = destinationInBucket(i * 13);
    const { frame } = tcpFrame({ src: '203.0.113.10', dst, srcPort: 40000 + i, dstPort: 80 });
    sent.push({ dst, frame });
    t.send(frame);
  }
  assert.equal(t.frames.length, sent.length);
  assert.equal(t.gre.length, 0);
  t.frames.forEach((f, i) => {
    const want = sent[i];
    assert.ok(want !== undefined);
    const engine = s.table.buckets[bucketOf(want.dst)];
    assert.ok(typeof engine === 'string');
    assert.deepEqual(f.subarray(0, 6), macBytes(MACS[engine] ?? ''), 'destination MAC = engine');
    assert.deepEqual(f.subarray(6, 12), macBytes(ENGINE_DEVICE_MAC), 'source MAC = the egress device');
    assert.deepEqual(f.subarray(12), want.frame.subarray(12), 'EtherType and IP packet unchanged');
  });
  assert.notDeepEqual(t.frames[0]?.subarray(0, 6), macBytes(GW_MAC));
  await t.close();
});

test('a flow keeps its engine after a rebalance until it ends; new flows follow the new table', async () => {
  const t = setup();
  await t.r.start();
  const b = 42;
  const dst = destinationInBucket(b);
  const first = table([E1, E2]);
  assert.equal(first.buckets[b], E1);
  await t.r.apply(service({ table: first }));
  const pkt = (sport: number, flags: number) =>
    tcpFrame({ src: '203.0.113.10', dst, srcPort: sport, dstPort: 80, flags }).frame;
  t.send(pkt(50000, TCP_FLAGS.SYN));
  // Rebalance: bucket 42 moves to E2, both engines still usable.
  await t.r.apply(service({ table: table([E2, E1], 2) }));
  t.send(pkt(50000, TCP_FLAGS.ACK));
  t.send(pkt(50001, TCP_FLAGS.SYN)); // a new connection in the same bucket
  t.send(pkt(50000, TCP_FLAGS.FIN | TCP_FLAGS.ACK));
  t.send(pkt(50000, TCP_FLAGS.ACK)); // the last ACK of the close, within the linger
  t.advance(5_000);
  t.r.sweep();
  t.send(pkt(50000, TCP_FLAGS.ACK)); // the old flow has ended: classified again
  await tick();
  assert.deepEqual(
    t.gre.map((g) => g.engine),
    [E1, E1, E2, E1, E1, E2],
  );
  assert.ok(t.gre.every((g) => g.priBucket === b));
  await t.close();
});

test('a flow leaves its engine at once when the engine is gone, and after its idle timeout', async () => {
  const t = setup();
  await t.r.start();
  const dst = destinationInBucket(10); // bucket 10 -> E1 in table([E1, E2])
  await t.r.apply(service());
  const ack = (sport: number) =>
    tcpFrame({ src: '203.0.113.10', dst, srcPort: sport, dstPort: 80, flags: TCP_FLAGS.ACK }).frame;
  t.send(tcpFrame({ src: '203.0.113.10', dst, srcPort: 1000, dstPort: 80 }).frame);
  t.send(tcpFrame({ src: '203.0.113.10', dst, srcPort: 2000, dstPort: 80 }).frame);
  await t.r.apply(service({ table: table([E2, E1], 2) })); // bucket 10 -> E2, E1 still usable
  t.send(ack(1000));
  t.advance(60_000); // idle timeout of flow 2000 (and 1000)
  t.send(ack(2000));
  await t.r.apply(service({ table: table([E2], 3), engines: [E2] })); // E1 gone
  t.send(tcpFrame({ src: '203.0.113.10', dst, srcPort: 3000, dstPort: 80 }).frame);
  t.send(ack(1000));
  await tick();
  assert.deepEqual(
    t.gre.map((g) => g.engine),
    [E1, E1, E1, E2, E2, E2],
  );
  await t.close();
});

test('no engine: open lets the kernel forward (no rule, nothing sent by us); closed asks for a reject', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service({ table: table([]), engines: [] }));
  assert.equal(t.guard.modeOf(0), 'none');
  t.send(tcpFrame({ src: '203.0.113.10', dst: '198.51.100.7', srcPort: 1, dstPort: 80 }).frame);
  // A table that still names engines that are no longer usable is "no engine" too.
  await t.r.apply(service({ engines: [] }));
  t.send(tcpFrame({ src: '203.0.113.10', dst: '198.51.100.8', srcPort: 1, dstPort: 80 }).frame);
  await tick();
  assert.equal(t.gre.length + t.directs.length + t.frames.length, 0, 'nothing forwarded by userland');
  assert.equal(t.guard.modeOf(0), 'none');
  await t.r.apply(service({ engines: [], failMode: 'closed' }));
  assert.equal(t.guard.modeOf(0), 'refuse');
  await t.r.removeService(0);
  assert.equal(t.guard.modeOf(0), 'absent');
  const c = await t.r.counters();
  assert.equal(c.buckets.size, 0);
  await t.close();
});

test('buckets without an engine are re-sent unchanged on the direct path while the others are redirected', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service({ table: table([E1, E2], 1, [5]) }));
  const hole = tcpFrame({ src: '203.0.113.10', dst: destinationInBucket(5), srcPort: 7, dstPort: 80 });
  const served = tcpFrame({ src: '203.0.113.10', dst: destinationInBucket(6), srcPort: 8, dstPort: 80 });
  t.send(hole.frame);
  t.send(served.frame);
  await tick();
  assert.deepEqual(t.directs, [hole.ip]);
  assert.deepEqual(
    t.gre.map((g) => g.inner),
    [served.ip],
  );
  assert.equal(t.r.stats().bypassed, 1);
  const c = await t.r.counters();
  assert.equal(c.buckets.get(0)?.[5]?.packets, 1, 'the bypassed connection is still counted in its bucket');
  assert.equal(
    [...(c.engines.get(0)?.values() ?? [])].reduce((n, x) => n + x.packets, 0),
    1,
  );
  await t.close();
});

test('send failures are counted and logged through the given logger: one line per 10 s, then the count it hid', async () => {
  const log = recordingLog();
  const t = setup(undefined, (wire) => {
    return { log, io: failingSends(shimIo(wire)) };
  });
  await t.r.start();
  await t.r.apply(service());
  const failures = () => log.lines.filter((l) => /could not send/.test(l.msg ?? ''));
  for (let i = 0; i < 500; i++) {
    t.send(tcpFrame({ src: '203.0.113.10', dst: destinationInBucket(i % 2), srcPort: 1000 + i, dstPort: 80 }).frame);
  }
  await tick();
  assert.equal(t.r.stats().sendErrors, 500);
  assert.equal(failures().length, 1, 'the first failure at once, the next 499 held back');
  assert.match(failures()[0]?.msg ?? '', /userland could not send a packet \(gre\) to 192\.0\.2\.1[12]: ENOBUFS/);
  assert.equal(failures()[0]?.level, 'warn');
  t.advance(10_000);
  t.send(tcpFrame({ src: '203.0.113.10', dst: destinationInBucket(0), srcPort: 9999, dstPort: 80 }).frame);
  await tick();
  assert.equal(failures().length, 2);
  assert.match(failures()[1]?.msg ?? '', /and 499 more like it from 2 sources since the last report/);
  assert.equal(t.gre.length, 0);
  await t.close();
});

test("a raw socket's receive error (raw-socket emits 'error', then closes it) is a counted send error; the next packet opens a new socket", async () => {
  const sockets: EventEmitter[] = [];
  const t = setup(undefined, (wire) => {
    const io = shimIo(wire);
    return {
      io: {
        ...io,
        rawSocket: {
          ...io.rawSocket,
          createSocket: (o) => {
            const socket = io.rawSocket.createSocket(o);
            sockets.push(socket);
            return socket;
          },
        },
      },
    };
  });
  await t.r.start();
  await t.r.apply(service());
  const frame = (port: number) =>
    tcpFrame({ src: '203.0.113.10', dst: destinationInBucket(0), srcPort: port, dstPort: 80 }).frame;
  t.send(frame(1));
  await tick();
  assert.equal(t.gre.length, 1);
  const before = sockets.length;
  // With no listener, EventEmitter throws this out of the socket's callback: the process ended.
  for (const s of sockets) s.emit('error', new Error('recvfrom: ENOMEM'));
  assert.equal(t.r.stats().sendErrors, sockets.length);
  t.send(frame(2));
  await tick();
  assert.equal(t.gre.length, 2, 'sent through a new socket');
  assert.ok(sockets.length > before);
  await t.close();
});

test('a failed kernel rule change leaves the previous table in force', async () => {
  const t = setup();
  await t.r.start();
  const dst = destinationInBucket(0);
  await t.r.apply(service());
  t.guard.failNext = true;
  await assert.rejects(t.r.apply(service({ table: table([E2, E1], 2) })), /simulated failure/);
  t.send(tcpFrame({ src: '203.0.113.10', dst, srcPort: 9, dstPort: 80 }).frame);
  await tick();
  assert.deepEqual(
    t.gre.map((g) => g.engine),
    [E1],
  );
  // A failed change of the port (new captures) closes what it opened and keeps capturing port 80.
  const taps = t.wire.openTaps;
  t.guard.failNext = true;
  await assert.rejects(t.r.apply(service({ ports: [8080], table: table([E2, E1], 3) })), /simulated failure/);
  assert.equal(t.wire.openTaps, taps, 'the failed apply closed the capture it opened');
  t.send(tcpFrame({ src: '203.0.113.10', dst, srcPort: 10, dstPort: 80 }).frame);
  t.send(tcpFrame({ src: '203.0.113.10', dst, srcPort: 11, dstPort: 8080 }).frame);
  await tick();
  assert.deepEqual(
    t.gre.map((g) => g.engine),
    [E1, E1],
    'port 80 still to E1, port 8080 not taken',
  );
  // A failed first apply of another service leaves no trace of it.
  t.guard.failNext = true;
  await assert.rejects(t.r.apply(service({ serviceId: 52, ports: [443] })), /simulated failure/);
  assert.deepEqual([...t.r.stats().flows.keys()], [0]);
  assert.deepEqual([...(await t.r.counters()).buckets.keys()], [0]);
  assert.deepEqual(
    t.guard.installs.at(-1)?.map((g) => g.service.serviceId),
    [0],
  );
  await t.close();
});

test('applies called together run one after the other, each from the state the previous one left', async () => {
  const t = setup();
  await t.r.start();
  await Promise.all([
    t.r.apply(service({ serviceId: 51, ports: [81] })),
    t.r.apply(service({ serviceId: 52, ports: [82] })),
    t.r.apply(service({ serviceId: 53, ports: [83] })),
  ]);
  assert.deepEqual(
    t.guard.installs.map((i) => i.map((g) => g.service.serviceId)),
    [[51], [51, 52], [51, 52, 53]],
  );
  t.guard.failNext = true;
  const failed = t.r.apply(service({ serviceId: 54, ports: [84] }));
  const removed = t.r.removeService(51);
  await assert.rejects(failed, /simulated failure/);
  await removed;
  assert.deepEqual(
    t.guard.installs.at(-1)?.map((g) => g.service.serviceId),
    [52, 53],
  );
  await t.close();
});

test('apply before start is a typed error; the capture filter and the kernel rule name the service exactly', async () => {
  const t = setup();
  await assert.rejects(t.r.apply(service()), { name: 'DataplaneError', reason: 'not-started' });
  await t.close();
  assert.equal(captureFilter(service({ ports: [80, 8080] })), 'ip and tcp and (dst port 80 or dst port 8080)');
  assert.equal(captureFilter(service({ ports: [] })), 'ip and tcp');
  assert.equal(
    captureFilter(service({ protocol: 17, ports: [53], portsAreSource: true })),
    'ip and udp and (src port 53)',
  );
  const text = guardRuleset([
    { service: service({ clientInterfaces: ['c0', 'c1'] }), mode: 'redirect' },
    { service: service({ serviceId: 52, ports: [443], engines: [] }), mode: 'refuse' },
  ]);
  assert.match(
    text,
    /iifname \{ "c0", "c1" \} meta nfproto ipv4 ip saddr != \{ 192\.0\.2\.11, 192\.0\.2\.12 \} meta l4proto 6 tcp dport \{ 80 \} drop/,
  );
  assert.match(
    text,
    /oifname \{ "c0", "c1" \} .* tcp sport \{ 80 \} ct state new ct mark set ct mark and 0x7ffff or 0xfff80000 /,
  );
  assert.match(text, /iifname \{ "c0" \} meta nfproto ipv4 meta l4proto 6 tcp dport \{ 443 \} reject with tcp reset/);
});

test('overlapping services: the higher priority takes every connection it matches, the other counts none of them', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service({ serviceId: 0, priority: 240, table: table([E1]), engines: [E1] }));
  await t.r.apply(service({ serviceId: 70, priority: 250, table: table([E2], 1, [5]), engines: [E2] }));
  for (let b = 0; b < 16; b++) {
    t.send(tcpFrame({ src: '203.0.113.10', dst: destinationInBucket(b), srcPort: 40000 + b, dstPort: 80 }).frame);
  }
  await tick();
  // Bucket 5 is unassigned in service 70: it goes direct, never to service 0's engine.
  assert.deepEqual(
    t.gre.map((g) => `${g.serviceId} ${g.engine}`),
    Array(15).fill(`70 ${E2}`),
  );
  assert.equal(t.directs.length, 1);
  const c = await t.r.counters();
  assert.equal(
    (c.buckets.get(70) ?? []).reduce((n, x) => n + x.packets, 0),
    16,
  );
  assert.equal(
    (c.buckets.get(0) ?? []).reduce((n, x) => n + x.packets, 0),
    0,
  );
  assert.equal(c.engines.get(0)?.size ?? 0, 0);
  assert.deepEqual(
    t.guard.installs.at(-1)?.map((g) => g.service.serviceId),
    [70, 0],
    'kernel rules in priority order',
  );
  await t.close();
});

test("overlapping services in the kernel guard: a higher fail-open service without engines lets its connections through ahead of a lower one's reject", () => {
  const text = guardRuleset([
    { service: service({ serviceId: 70, engines: [] }), mode: 'none' },
    { service: service({ serviceId: 0, engines: [] }), mode: 'refuse' },
  ]);
  const rules = text
    .split('\n')
    .filter((l) => /comment "wccpd userland service/.test(l))
    .map((l) => l.trim());
  assert.equal(rules.length, 2);
  assert.match(
    rules[0] ?? '',
    /^iifname \{ "c0" \} .* tcp dport \{ 80 \} ct mark and 0xfff80000 != 0xfff80000 accept comment "wccpd userland service 70"$/,
  );
  assert.match(rules[1] ?? '', /reject with tcp reset comment "wccpd userland service 0"$/);
  // Alone, a service without engines that fails open needs no rule at all.
  assert.doesNotMatch(guardRuleset([{ service: service({ engines: [] }), mode: 'none' }]), /accept comment/);
});

test("a source-port service redirects the origin's answers by its flags' hash, but never those of a connection another service claimed", async () => {
  const t = setup();
  const origin = pcap.createSession('o0', { wire: t.wire });
  await t.r.start();
  // Service 80 (client side) with bucket 5 unassigned; service 90 (origin side): source port 80, Source IP Hash.
  await t.r.apply(
    service({ serviceId: 80, priority: 240, serviceFlags: 0x12, table: table([E1], 1, [5]), engines: [E1] }),
  );
  await t.r.apply(
    service({
      serviceId: 90,
      priority: 240,
      serviceFlags: 0x31,
      portsAreSource: true,
      clientInterfaces: ['o0'],
      table: table([E1], 1, [5]),
      engines: [E1],
    }),
  );
  const synAck = { flags: TCP_FLAGS.SYN | TCP_FLAGS.ACK, srcPort: 80, dst: '203.0.113.10' };
  // An engine's own (TPROXY) connection: its answer from the origin goes to the engine, bucket = the origin's.
  const answer = tcpFrame({ ...synAck, src: destinationInBucket(6), dstPort: 50001 });
  origin.inject(answer.frame);
  // A client connection service 80 let through (bucket 5): its answer is passed on unchanged, not redirected.
  const hole = tcpFrame({ src: '203.0.113.10', dst: destinationInBucket(5), srcPort: 50002, dstPort: 80 });
  t.send(hole.frame);
  await tick();
  const holeAnswer = tcpFrame({ ...synAck, src: destinationInBucket(5), dstPort: 50002 });
  origin.inject(holeAnswer.frame);
  await tick();
  assert.deepEqual(
    t.gre.map((g) => [g.serviceId, g.engine, g.priBucket]),
    [[90, E1, 6]],
  );
  assert.deepEqual(t.gre[0]?.inner, answer.ip);
  assert.deepEqual(t.directs, [hole.ip, holeAnswer.ip]);
  assert.equal(t.r.stats().othersPassedOn, 1);
  const c = await t.r.counters();
  assert.equal(
    (c.buckets.get(90) ?? []).reduce((n, x) => n + x.packets, 0),
    1,
    'service 90 counted only its own',
  );
  origin.close();
  await t.close();
});

/** Where the draft's lookup sends a new connection: an engine of the group, or null (the direct path). */
function maskWant(
  s: ServiceRedirect,
  source: string,
  destination: string,
  sourcePort: number,
  destinationPort = 80,
): EngineAddress | null {
  const e = matchMask(s.maskSets ?? [], {
    sourceIp: ipv4ToNumber(source) ?? NaN,
    destinationIp: ipv4ToNumber(destination) ?? NaN,
    sourcePort,
    destinationPort,
  });
  return e !== null && s.engines.includes(e) ? e : null;
}

test("mask assignment: each of 256 destinations and 64 more goes where Squid's mask 0x1741 names, not where the hash would", async () => {
  const t = setup();
  await t.r.start();
  // The bucket table says "everything to E2": a classifier that used the hash would send every packet there.
  const s = service({
    serviceId: 51,
    table: table([E2]),
    maskSets: [maskSet(SQUID_MASK, (i) => (i % 7 === 3 ? null : i % 2 === 0 ? E1 : E2))],
  });
  await t.r.apply(s);
  const destinations = [
    ...Array.from({ length: 256 }, (_, i) => `198.51.100.${i}`),
    ...Array.from({ length: 64 }, (_, i) => `203.0.113.${64 + i}`),
  ];
  const wanted = destinations.map((d, i) => maskWant(s, '203.0.113.10', d, 20000 + i));
  destinations.forEach((d, i) =>
    t.send(tcpFrame({ src: '203.0.113.10', dst: d, srcPort: 20000 + i, dstPort: 80 }).frame),
  );
  await tick();
  const toEngines = wanted.filter((w) => w !== null);
  assert.ok(
    toEngines.includes(E1) && toEngines.includes(E2) && toEngines.length < wanted.length,
    'both engines and the direct path',
  );
  assert.deepEqual(
    t.gre.map((g) => g.engine),
    toEngines,
    'each redirected connection went to the engine its value names',
  );
  assert.ok(
    t.gre.every((g) => g.priBucket === 0 && !g.alternate),
    'the redirect header carries no bucket for mask assignment',
  );
  assert.equal(t.directs.length, wanted.length - toEngines.length, 'no value: forwarded normally');
  const c = await t.r.counters();
  assert.equal(c.engines.get(51)?.get(E1)?.packets, toEngines.filter((e) => e === E1).length);
  assert.equal(
    (c.buckets.get(51) ?? []).reduce((n, b) => n + b.packets, 0),
    0,
    'no bucket counts for a mask service',
  );
  await t.close();
});

test('mask assignment: a source mask, several sets in order (first match wins), a gone engine, fail closed', async () => {
  const t = setup();
  await t.r.start();
  const source = { sourceAddressMask: 0xf, destinationAddressMask: 0, sourcePortMask: 0, destinationPortMask: 0 };
  const bySource = service({ table: table([E2]), maskSets: [maskSet(source, (i) => (i % 2 === 0 ? E1 : E2))] });
  await t.r.apply(bySource);
  for (let i = 0; i < 16; i++)
    t.send(tcpFrame({ src: `203.0.113.${i}`, dst: '198.51.100.7', srcPort: 3000, dstPort: 80 }).frame);
  await tick();
  assert.deepEqual(
    t.gre.map((g) => g.engine),
    Array.from({ length: 16 }, (_, i) => (i % 2 === 0 ? E1 : E2)),
  );

  // Set 1 names odd destinations (E2); set 2 the rest by destination bits 1-2, its first value twice (the first
  // counts).
  const odd = { ...SQUID_MASK, destinationAddressMask: 0x1 };
  const low = { ...SQUID_MASK, destinationAddressMask: 0x6 };
  const second = maskSet(low, (i) => (i === 3 ? null : i % 2 === 0 ? E1 : E2));
  const several = service({
    table: table([E2]),
    maskSets: [
      maskSet(odd, (i) => (i === 1 ? E2 : null)),
      { mask: low, values: [{ ...second.values[0]!, engine: E2 }, ...second.values] },
    ],
  });
  await t.r.apply(several);
  t.gre.length = 0;
  const before = t.directs.length;
  const wanted = Array.from({ length: 64 }, (_, i) => maskWant(several, '203.0.113.10', `198.51.100.${i}`, 4000 + i));
  for (let i = 0; i < 64; i++)
    t.send(tcpFrame({ src: '203.0.113.10', dst: `198.51.100.${i}`, srcPort: 4000 + i, dstPort: 80 }).frame);
  await tick();
  assert.deepEqual(
    t.gre.map((g) => g.engine),
    wanted.filter((w) => w !== null),
  );
  assert.equal(maskWant(several, '203.0.113.10', '198.51.100.0', 1), E2, 'the duplicate value: the first one counts');
  assert.equal(t.directs.length - before, wanted.filter((w) => w === null).length);

  // E1 is gone: its values go direct, E2's still to E2; its established flows leave it at once.
  const gone = service({ ...several, engines: [E2] });
  await t.r.apply(gone);
  t.gre.length = 0;
  const directsBefore = t.directs.length;
  for (let i = 0; i < 64; i++)
    t.send(tcpFrame({ src: '203.0.113.10', dst: `198.51.100.${i}`, srcPort: 5000 + i, dstPort: 80 }).frame);
  await tick();
  assert.deepEqual(
    t.gre.map((g) => g.engine),
    wanted.filter((w) => w === E2),
  );
  assert.equal(t.directs.length - directsBefore, wanted.filter((w) => w !== E2).length);

  // No value names a live engine: fail closed refuses, fail open lets the kernel forward.
  await t.r.apply(service({ ...several, engines: [], failMode: 'closed' }));
  assert.equal(t.guard.modeOf(0), 'refuse');
  await t.r.apply(service({ ...several, engines: [] }));
  assert.equal(t.guard.modeOf(0), 'none');
  await t.close();
});

test('applyAll swaps several services in at once: one kernel guard install, and a failed one leaves every old table', async () => {
  const t = setup();
  await t.r.start();
  await t.r.applyAll([service({ serviceId: 51, ports: [80] }), service({ serviceId: 52, ports: [8080] })]);
  const installs = t.guard.installs.length;
  // Both move to engine 2 only; the guard's transaction fails: neither service's new table is in force.
  t.guard.failNext = true;
  const onlyE2 = (id: number, port: number) =>
    service({ serviceId: id, ports: [port], table: table([E2], 2), engines: [E2] });
  await assert.rejects(t.r.applyAll([onlyE2(51, 80), onlyE2(52, 8080)]), /simulated failure/);
  const dst = destinationInBucket(0);
  let srcPort = 40000;
  const sendTo = async (port: number) => {
    t.send(tcpFrame({ src: '203.0.113.10', dst, srcPort: srcPort++, dstPort: port }).frame);
    await tick();
    return t.gre.at(-1)?.engine;
  };
  assert.equal(await sendTo(80), E1, "service 51's old table still steers");
  assert.equal(await sendTo(8080), E1, "service 52's old table still steers");
  // Applied again: both in force after one more install.
  await t.r.applyAll([onlyE2(51, 80), onlyE2(52, 8080)]);
  assert.equal(t.guard.installs.length, installs + 1);
  assert.equal(await sendTo(80), E2);
  assert.equal(await sendTo(8080), E2);
  await t.close();
});
