// Interop: Wireshark's dissectors read our GRE redirection and our ICP messages the way we meant them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeGreRedirect, encodeIpv4Tcp } from '../../src/wire/gre.js';
import { encodeIcp, ICP_OPCODES, type IcpMessage } from '../../src/wire/icp.js';
import { greFrame, udpFrame } from '../helpers/pcap-file.js';
import { complaints, field, haveTshark, tsharkFrames } from '../helpers/tshark.js';
import { need } from '../helpers/require.js';
import { fixtureBytes } from '../helpers/fixtures.js';

const skip = need(haveTshark, 'tshark (Debian package tshark)');

test('the harness reports a malformed WCCP datagram and expert errors (it can fail)', { skip }, () => {
  const squid = fixtureBytes('squid-5.7/here-i-am-hash-192.0.2.11.hex');
  const overlong = Buffer.from(squid);
  overlong.writeUInt16BE(200, 46); // WC_ID_INFO claims 200 bytes, has 44
  const [clean, long, cut] = tsharkFrames([
    udpFrame({ payload: squid }),
    udpFrame({ payload: overlong }),
    udpFrame({ payload: squid.subarray(0, 50) }),
  ]);
  assert.ok(clean && long && cut);
  assert.equal(field(clean, 'wccp.message'), '10');
  assert.equal(clean.malformed, false);
  assert.ok(
    long.experts.some((e) => e.severity === 'error' && e.layer === 'wccp'),
    complaints(long),
  );
  assert.equal(cut.malformed, true, complaints(cut));
  // A broken UDP checksum in the wrapping is caught too (checksum validation is on).
  const frame = udpFrame({ payload: squid });
  frame.writeUInt16BE(frame.readUInt16BE(40) ^ 0x0101, 40);
  const [badSum] = tsharkFrames([frame]);
  assert.ok(
    badSum?.experts.some((e) => e.layer === 'udp'),
    badSum && complaints(badSum),
  );
});

test(
  'tshark decodes our GRE redirection: service id, D and A bits, buckets, and the inner IPv4/TCP packet',
  { skip },
  () => {
    const cases = [
      { serviceId: 0, dynamic: false, alternate: false, altBucket: 0, priBucket: 0 },
      { serviceId: 90, dynamic: true, alternate: false, altBucket: 17, priBucket: 200 },
      { serviceId: 255, dynamic: true, alternate: true, altBucket: 255, priBucket: 1 },
      { serviceId: 5, dynamic: false, alternate: true, altBucket: 128, priBucket: 64 },
    ];
    const inner = cases.map((_, i) =>
      encodeIpv4Tcp({
        src: '203.0.113.10',
        dst: `198.51.100.${80 + i}`,
        srcPort: 40000 + i,
        dstPort: 80,
        seq: 1000 * i,
        payload: i % 2 === 0 ? Buffer.from('GET / HTTP/1.1\r\n\r\n') : undefined,
      }),
    );
    const packets = tsharkFrames(cases.map((h, i) => greFrame(encodeGreRedirect(h, inner[i] ?? Buffer.alloc(0)))));
    assert.equal(packets.length, cases.length);
    packets.forEach((p, i) => {
      const h = cases[i];
      assert.ok(h);
      assert.equal(p.malformed, false, complaints(p));
      assert.deepEqual(p.experts, [], complaints(p));
      assert.deepEqual(p.protocols.slice(0, 5), ['eth', 'ethertype', 'ip', 'gre', 'ip']);
      assert.equal(field(p, 'gre.proto'), '0x883e');
      assert.equal(field(p, 'gre.wccp.service_id'), String(h.serviceId));
      assert.equal(field(p, 'gre.wccp.dynamic_service'), h.dynamic ? '1' : '0');
      assert.equal(field(p, 'gre.wccp.alternative_bucket_used'), h.alternate ? '1' : '0');
      assert.equal(field(p, 'gre.wccp.alternative_bucket'), String(h.altBucket));
      assert.equal(field(p, 'gre.wccp.primary_bucket'), String(h.priBucket));
      assert.deepEqual(p.fields.get('ip.dst'), ['192.0.2.11', `198.51.100.${80 + i}`]);
      assert.equal(field(p, 'tcp.srcport'), String(40000 + i));
      assert.equal(field(p, 'tcp.checksum.status'), '1'); // 1 = good
      assert.deepEqual(p.fields.get('ip.checksum.status'), ['1', '1']);
    });
  },
);

test(
  'tshark decodes our ICP messages (UDP 3130): every opcode, request number, addresses, URL, HIT_OBJ object',
  { skip },
  () => {
    const base = { options: 0, optionData: 0, senderAddress: '192.0.2.1' };
    const msgs: IcpMessage[] = [
      { ...base, opcode: 'QUERY', requestNumber: 1, requesterAddress: '192.0.2.1', url: 'http://198.51.100.80/probe' },
      ...(['HIT', 'MISS', 'ERR', 'SECHO', 'DECHO', 'MISS_NOFETCH', 'DENIED'] as const).map((opcode, i): IcpMessage => ({
        ...base,
        senderAddress: '192.0.2.11',
        opcode,
        requestNumber: 100 + i,
        url: `http://198.51.100.80/${opcode}`,
      })),
      {
        ...base,
        opcode: 'HIT_OBJ',
        requestNumber: 9,
        options: 0x80000000,
        url: 'http://198.51.100.80/o',
        object: Buffer.from('hello'),
      },
    ];
    const packets = tsharkFrames(msgs.map((m) => udpFrame({ payload: encodeIcp(m), srcPort: 3130, dstPort: 3130 })));
    assert.equal(packets.length, msgs.length);
    packets.forEach((p, i) => {
      const m = msgs[i];
      assert.ok(m);
      assert.equal(p.malformed, false, complaints(p));
      assert.deepEqual(p.experts, [], complaints(p));
      assert.ok(p.protocols.includes('icp'), p.protocols.join(':'));
      assert.equal(Number(field(p, 'icp.opcode')), ICP_OPCODES[m.opcode], m.opcode);
      assert.equal(field(p, 'icp.version'), '2');
      assert.equal(field(p, 'icp.length'), String(encodeIcp(m).length));
      assert.equal(field(p, 'icp.nr'), String(m.requestNumber));
      assert.equal(field(p, 'icp.sender_host_ip_address'), m.senderAddress);
      assert.equal(field(p, 'icp.url'), m.url);
      if (m.opcode === 'QUERY') assert.equal(field(p, 'icp.requester_host_address'), m.requesterAddress);
      if (m.opcode === 'HIT_OBJ') {
        assert.equal(field(p, 'icp.object_length'), '5');
        assert.equal(field(p, 'icp.object_data')?.replace(/:/g, ''), Buffer.from('hello').toString('hex'));
      }
    });
  },
);
