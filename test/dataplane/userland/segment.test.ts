// Oversized captured frames (GRO/GSO super-frames, as pcap sees bulk TCP on a veth or a GRO NIC) through the userland
// backend on the shims: TCP is cut into segments that fit the egress MTU, with the headers a receiver checks; what
// cannot be segmented is dropped and counted with its reason.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Wire } from '../../../native-free-shims/wire.js';
import * as pcap from '../../../native-free-shims/pcap/index.js';
import * as raw from '../../../native-free-shims/raw-socket/index.js';
import { UserlandRedirector, type UserlandOptions } from '../../../src/dataplane/userland/userland.js';
import { fitToMtu } from '../../../src/dataplane/userland/segment.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import type { Links } from '../../../src/dataplane/userland/links.js';
import { BUCKET_COUNT } from '../../../src/buckets/table.js';
import { bucketOf } from '../../../src/buckets/hash.js';
import {
  decodeGreRedirect,
  encodeIpv4,
  internetChecksum,
  onesComplementSum,
  ipv4ToBytes,
  transportChecksum,
  TCP_FLAGS,
} from '../../../src/wire/gre.js';
import { webCache } from '../service-fixture.js';
import { RecordingGuard, ethernet, macBytes, shimIo, tick } from '../../shims/harness.js';
import { recordingLog } from '../../../src/log.js';

const ENGINE = '192.0.2.11';
const ENGINE_MAC = '02:00:00:00:01:11';
const DEVICE_MAC = '02:00:00:00:00:e0';
const CLIENT = '203.0.113.10';
const ORIGIN = '198.51.100.80';
const SEQ = 0xffff_f000; // wraps inside the super-frame: sequence arithmetic must be modulo 2^32
const IP_ID = 0xfffe;

const service = (over: Partial<ServiceRedirect> = {}): ServiceRedirect =>
  webCache(() => ENGINE, [ENGINE], { serviceId: 90, ...over });

/**
 * A captured bulk-TCP super-frame: 20-byte IP header (DF), 32-byte TCP header (NOP NOP timestamps, as Linux sends),
 * `payloadLength` bytes of a recognisable pattern, and only the pseudo-header sum in the TCP checksum (checksum
 * offload: what pcap really captures from a local sender).
 */
function superFrame(payloadLength: number, flags = TCP_FLAGS.ACK | TCP_FLAGS.PSH): { ip: Buffer; payload: Buffer } {
  const payload = Buffer.from(Array.from({ length: payloadLength }, (_, i) => (i * 7 + (i >> 8)) & 0xff));
  const tcp = Buffer.alloc(32 + payloadLength);
  tcp.writeUInt16BE(40000, 0);
  tcp.writeUInt16BE(80, 2);
  tcp.writeUInt32BE(SEQ, 4);
  tcp.writeUInt32BE(12345, 8);
  tcp[12] = 8 << 4;
  tcp[13] = flags;
  tcp.writeUInt16BE(502, 14);
  Buffer.from([1, 1, 8, 10, 0, 0, 0, 42, 0, 0, 0, 7]).copy(tcp, 20);
  payload.copy(tcp, 32);
  const pseudo = Buffer.concat([
    Buffer.from(ipv4ToBytes(CLIENT)),
    Buffer.from(ipv4ToBytes(ORIGIN)),
    Buffer.from([0, 6, tcp.length >> 8, tcp.length & 0xff]),
  ]);
  tcp.writeUInt16BE(onesComplementSum(pseudo), 16); // partial, as the sender's NIC would finish it
  return { ip: encodeIpv4({ src: CLIENT, dst: ORIGIN, protocol: 6, payload: tcp, id: IP_ID }), payload };
}

interface Segment {
  total: number;
  id: number;
  seq: number;
  flags: number;
  payload: Buffer;
  options: Buffer;
}

/** Reads one IPv4/TCP packet and checks both checksums, as the receiving host would. */
function readSegment(ip: Buffer): Segment {
  assert.equal(ip.readUInt16BE(2), ip.length, 'IPv4 total length = the packet');
  assert.equal(internetChecksum(ip.subarray(0, 20)), 0, 'IPv4 header checksum verifies');
  assert.equal(ip.readUInt16BE(6), 0x4000, 'DF kept, no fragment');
  const tcp = ip.subarray(20);
  assert.equal(transportChecksum(CLIENT, ORIGIN, 6, tcp), 0, 'TCP checksum verifies');
  const headerLength = ((tcp[12] ?? 0) >> 4) * 4;
  return {
    total: ip.length,
    id: ip.readUInt16BE(4),
    seq: tcp.readUInt32BE(4),
    flags: tcp[13] ?? 0,
    payload: Buffer.from(tcp.subarray(headerLength)),
    options: Buffer.from(tcp.subarray(20, headerLength)),
  };
}

/** The segments must be the super-frame cut at `mss`, in order, each a valid TCP segment of the same connection. */
function assertSegmentsOf(segments: readonly Segment[], original: Buffer, mss: number, originalFlags: number): void {
  assert.equal(segments.length, Math.ceil(original.length / mss));
  assert.deepEqual(Buffer.concat(segments.map((s) => s.payload)), original, 'payloads concatenate to the original');
  segments.forEach((s, i) => {
    const last = i === segments.length - 1;
    assert.equal(s.payload.length, last ? original.length - i * mss : mss, `segment ${i} carries one MSS`);
    assert.equal(s.seq, (SEQ + i * mss) >>> 0, `segment ${i} sequence number`);
    assert.equal(s.id, (IP_ID + i) & 0xffff, `segment ${i} IP id`);
    assert.equal(
      s.flags & TCP_FLAGS.PSH,
      last ? originalFlags & TCP_FLAGS.PSH : 0,
      `PSH on the last segment only (${i})`,
    );
    assert.equal(
      s.flags & TCP_FLAGS.FIN,
      last ? originalFlags & TCP_FLAGS.FIN : 0,
      `FIN on the last segment only (${i})`,
    );
    assert.equal(
      s.flags & TCP_FLAGS.CWR,
      i === 0 ? originalFlags & TCP_FLAGS.CWR : 0,
      `CWR on the first segment only (${i})`,
    );
    assert.equal(s.flags & TCP_FLAGS.ACK, TCP_FLAGS.ACK);
    assert.deepEqual(s.options, Buffer.from([1, 1, 8, 10, 0, 0, 0, 42, 0, 0, 0, 7]), 'TCP options copied');
  });
}

function setup(over: Partial<UserlandOptions> = {}) {
  const wire = new Wire({ localAddress: '192.0.2.1' });
  const links: Links = {
    engineLink: async () => ({ device: 'e0', deviceMac: DEVICE_MAC, engineMac: ENGINE_MAC, mtu: 1500 }),
    routeMtu: async () => 1500,
  };
  const log = recordingLog();
  const r = new UserlandRedirector({ io: shimIo(wire), guard: new RecordingGuard(), links, log, ...over });
  const client = pcap.createSession('c0', { wire });
  const l2 = pcap.createSession('e0', { wire, snap_length: 262144 });
  const frames: Buffer[] = [];
  l2.on('packet', (p: pcap.PacketWithHeader) => frames.push(Buffer.from(p.buf.subarray(0, p.header.readUInt32LE(8)))));
  const engines = raw.createSocket({ protocol: 47, wire });
  const gre: Buffer[] = [];
  engines.on('message', (packet: Buffer) => gre.push(Buffer.from(packet)));
  const direct = raw.createSocket({ protocol: 6, wire });
  const directs: Buffer[] = [];
  direct.on('message', (p: Buffer) => directs.push(Buffer.from(p)));
  return {
    r,
    frames,
    gre,
    directs,
    log,
    send: (ip: Buffer) => client.inject(ethernet(ip)),
    close: async () => {
      await r.stop();
      client.close();
      l2.close();
      engines.close();
      direct.close();
      assert.equal(wire.openTaps, 0);
    },
  };
}

test('L2: a 7,240-byte super-frame leaves as 5 MTU-sized frames with the engine MAC, valid checksums and sequence', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service());
  const { ip, payload } = superFrame(7240);
  t.send(ip);
  await tick();
  assert.equal(t.frames.length, 5, '7,240 = 5 x 1,448 (MTU 1500 - 20 IP - 32 TCP)');
  for (const f of t.frames) {
    assert.ok(f.length <= 1514, `frame of ${f.length} bytes fits MTU 1500`);
    assert.deepEqual(f.subarray(0, 6), macBytes(ENGINE_MAC));
    assert.deepEqual(f.subarray(6, 12), macBytes(DEVICE_MAC));
    assert.equal(f.readUInt16BE(12), 0x0800);
  }
  assertSegmentsOf(
    t.frames.map((f) => readSegment(f.subarray(14))),
    payload,
    1448,
    TCP_FLAGS.ACK | TCP_FLAGS.PSH,
  );
  const st = t.r.stats();
  assert.equal(st.segmented, 1);
  assert.equal(st.segments, 5);
  assert.equal(st.sendErrors, 0);
  const c = (await t.r.counters()).engines.get(90)?.get(ENGINE);
  assert.deepEqual(c, { packets: 5, bytes: ip.length + 4 * 52 }, 'each segment is a packet to the engine');
  await t.close();
});

test('GRE: the same super-frame becomes inner packets that fit MTU - 28, each with the redirect header', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service({ forwarding: 'gre' }));
  const flags = TCP_FLAGS.ACK | TCP_FLAGS.PSH | TCP_FLAGS.FIN | TCP_FLAGS.CWR;
  const { ip, payload } = superFrame(7240, flags);
  t.send(ip);
  await tick();
  const mss = 1500 - 28 - 52; // 1,420
  assert.equal(t.gre.length, 6, '7,240 bytes at an MSS of 1,420');
  const inner = t.gre.map((outer) => {
    assert.ok(outer.length <= 1500, `outer packet of ${outer.length} bytes fits MTU 1500`);
    const d = decodeGreRedirect(outer.subarray(20));
    assert.ok(d.ok);
    assert.equal(d.value.serviceId, 90);
    assert.equal(d.value.priBucket, bucketOf(ORIGIN));
    return readSegment(Buffer.from(d.value.inner));
  });
  assertSegmentsOf(inner, payload, mss, flags);
  assert.equal(t.r.stats().segments, 6);
  await t.close();
});

test('a bypassed super-frame (bucket without engine) is segmented for the direct path at the default MTU', async () => {
  const t = setup({ mtu: 1400 });
  await t.r.start();
  const buckets = new Array<string | null>(BUCKET_COUNT).fill(ENGINE);
  buckets[bucketOf(ORIGIN)] = null;
  await t.r.apply(service({ table: { changeNumber: 1, buckets } }));
  const { ip, payload } = superFrame(4000);
  t.send(ip);
  await tick();
  assert.equal(t.frames.length, 0);
  assertSegmentsOf(t.directs.map(readSegment), payload, 1400 - 52, TCP_FLAGS.ACK | TCP_FLAGS.PSH);
  assert.equal(t.r.stats().bypassed, t.directs.length);
  await t.close();
});

test('an oversized UDP packet and an oversized TCP fragment are dropped, counted and logged with the reason', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service({ protocol: 17, ports: [80] }));
  const udp = Buffer.alloc(8 + 3000);
  udp.writeUInt16BE(5000, 0);
  udp.writeUInt16BE(80, 2);
  udp.writeUInt16BE(udp.length, 4);
  t.send(encodeIpv4({ src: CLIENT, dst: ORIGIN, protocol: 17, payload: udp }));
  const small = Buffer.from(udp.subarray(0, 108));
  small.writeUInt16BE(small.length, 4);
  t.send(encodeIpv4({ src: CLIENT, dst: ORIGIN, protocol: 17, payload: small }));
  await tick();
  assert.equal(t.frames.length, 1, 'only the packet that fits is forwarded');
  const st = t.r.stats();
  assert.equal(st.oversizeDropped['not-tcp'], 1);
  assert.equal(st.segmented, 0);
  const line = t.log.lines.find((l) => l.level === 'warn' && /larger than the MTU/.test(l.msg ?? ''));
  const fields = line?.obj as { oversize?: string; detail?: string } | undefined;
  assert.equal(fields?.oversize, 'not-tcp');
  assert.match(String(fields?.detail), /IP protocol 17 packet of 3028 bytes \(DF set\) exceeds 1500/);
  await t.close();

  const fragment = superFrame(3000).ip;
  fragment.writeUInt16BE(0x2000, 6); // MF
  const r = fitToMtu(fragment, 1500);
  assert.equal(r.kind === 'dropped' ? r.reason : r.kind, 'ip-fragment');
  const syn = fitToMtu(superFrame(3000, TCP_FLAGS.SYN).ip, 1500);
  assert.equal(syn.kind === 'dropped' ? syn.reason : syn.kind, 'syn-or-rst');
  const tiny = fitToMtu(superFrame(3000).ip, 52);
  assert.equal(tiny.kind === 'dropped' ? tiny.reason : tiny.kind, 'headers-exceed-mtu', '52 bytes of headers, no data');
});

test('a packet that fits is sent as captured (one packet, nothing segmented)', () => {
  const { ip } = superFrame(1448);
  assert.equal(ip.length, 1500);
  assert.deepEqual(fitToMtu(ip, 1500), { kind: 'fits' });
});
