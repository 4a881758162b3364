import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Wire } from '../../native-free-shims/wire.js';
import * as pcap from '../../native-free-shims/pcap/index.js';
import * as raw from '../../native-free-shims/raw-socket/index.js';
import { decodeIpv4Header, encodeIpv4Tcp } from '../../src/wire/gre.js';
import { ethernet, tick } from './harness.js';

test('a pcap shim session gets the frames others inject on its device, filtered, with a libpcap-style header', () => {
  const wire = new Wire();
  const a = pcap.createSession('c0', { filter: 'tcp and dst port 80', buffer_timeout: 0, wire });
  const b = pcap.createSession('c0', { wire });
  const other = pcap.createSession('e0', { wire });
  const seen: { who: string; len: number; caplen: number }[] = [];
  for (const [who, s] of [
    ['a', a],
    ['b', b],
    ['other', other],
  ] as const) {
    s.on('packet', (p: pcap.PacketWithHeader) =>
      seen.push({ who, len: p.buf.length, caplen: p.header.readUInt32LE(8) }),
    );
  }
  const web = ethernet(encodeIpv4Tcp({ src: '203.0.113.10', dst: '198.51.100.1', srcPort: 1234, dstPort: 80 }));
  const ssh = ethernet(encodeIpv4Tcp({ src: '203.0.113.10', dst: '198.51.100.1', srcPort: 1234, dstPort: 22 }));
  b.inject(web);
  b.inject(ssh);
  a.inject(web);
  assert.deepEqual(seen, [
    { who: 'a', len: web.length, caplen: web.length },
    { who: 'b', len: web.length, caplen: web.length },
  ]);
  a.close();
  b.close();
  other.close();
  assert.equal(wire.openTaps, 0);
  assert.throws(() => a.inject(web), /closed session/);
});

test('a raw-socket shim wraps payloads in a valid IPv4 header, or sends them whole with protocol 255', async () => {
  const wire = new Wire({ localAddress: '192.0.2.1' });
  const sender = raw.createSocket({ protocol: 47, wire });
  const engine = raw.createSocket({ protocol: 47, wire });
  const all = raw.createSocket({ protocol: 255, wire });
  const got: { who: string; packet: Buffer; source: string }[] = [];
  engine.on('message', (packet: Buffer, source: string) => got.push({ who: 'engine', packet, source }));
  all.on('message', (packet: Buffer, source: string) => got.push({ who: 'all', packet, source }));
  const payload = Buffer.from('0000883e00000005', 'hex');
  const sent = await new Promise<number>((resolve, reject) =>
    sender.send(payload, 0, payload.length, '192.0.2.11', null, (e, n) => (e === null ? resolve(n) : reject(e))),
  );
  assert.equal(sent, payload.length);
  assert.equal(got.length, 2);
  for (const g of got) {
    const h = decodeIpv4Header(g.packet);
    assert.ok(h.ok);
    assert.equal(h.value.src, '192.0.2.1');
    assert.equal(h.value.dst, '192.0.2.11');
    assert.equal(h.value.protocol, 47);
    assert.equal((h.value as { checksumOk?: boolean }).checksumOk, true);
    assert.deepEqual(g.packet.subarray(20), payload);
    assert.equal(g.source, '192.0.2.1');
  }
  got.length = 0;
  const whole = encodeIpv4Tcp({ src: '203.0.113.10', dst: '198.51.100.1', srcPort: 1, dstPort: 80 });
  all.send(whole, 0, whole.length, '198.51.100.1', null, () => undefined);
  const tcpTap = raw.createSocket({ protocol: 6, wire });
  tcpTap.on('message', (packet: Buffer, source: string) => got.push({ who: 'tcp', packet, source }));
  sender.send(whole, 0, whole.length, 'not-an-ip', null, (e) =>
    got.push({ who: String(e?.message), packet: whole, source: '' }),
  );
  await tick();
  assert.deepEqual(
    got.map((g) => g.who),
    ["Invalid IP address 'not-an-ip'"],
  );
  all.send(whole, 0, whole.length, '198.51.100.1', null, () => undefined);
  assert.deepEqual(got.at(-1)?.packet, whole);
  for (const s of [sender, engine, all, tcpTap]) s.close();
  assert.equal(wire.openTaps, 0);
});
