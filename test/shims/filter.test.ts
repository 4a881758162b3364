import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileFilter, ShimFilterError } from '../../native-free-shims/pcap/filter.js';
import { encodeIpv4Tcp, encodeIpv4 } from '../../src/wire/gre.js';
import { ethernet } from './harness.js';

const syn = (dst: string, dport: number, sport = 40000): Buffer =>
  ethernet(encodeIpv4Tcp({ src: '203.0.113.10', dst, srcPort: sport, dstPort: dport }));
const udp = (dport: number): Buffer => {
  const l4 = Buffer.alloc(8);
  l4.writeUInt16BE(5000, 0);
  l4.writeUInt16BE(dport, 2);
  l4.writeUInt16BE(8, 4);
  return ethernet(encodeIpv4({ src: '203.0.113.10', dst: '198.51.100.1', protocol: 17, payload: l4 }));
};
const arp = (): Buffer => {
  const f = Buffer.alloc(42);
  f.writeUInt16BE(0x0806, 12);
  return f;
};

test('the supported subset selects by protocol, port, host, with and/or/not and parentheses', () => {
  const web = compileFilter('ip and tcp and (dst port 80 or dst port 8080)');
  assert.equal(web(syn('198.51.100.1', 80)), true);
  assert.equal(web(syn('198.51.100.1', 8080)), true);
  assert.equal(web(syn('198.51.100.1', 443)), false);
  assert.equal(web(udp(80)), false);
  assert.equal(web(arp()), false);
  assert.equal(compileFilter('src port 80')(syn('198.51.100.1', 80)), false);
  assert.equal(compileFilter('port 40000')(syn('198.51.100.1', 80)), true);
  assert.equal(compileFilter('udp && dst port 53')(udp(53)), true);
  assert.equal(compileFilter('ip proto 17')(udp(53)), true);
  assert.equal(compileFilter('not tcp')(udp(53)), true);
  assert.equal(compileFilter('!tcp')(syn('198.51.100.1', 80)), false);
  assert.equal(compileFilter('dst host 198.51.100.1 and src host 203.0.113.10')(syn('198.51.100.1', 80)), true);
  assert.equal(compileFilter('host 198.51.100.2')(syn('198.51.100.1', 80)), false);
  assert.equal(compileFilter('')(arp()), true);
});

test('anything outside the subset is an error naming the word, never a filter that matches everything', () => {
  for (const [filter, word] of [
    ['tcp[13] & 2 != 0', 'tcp[13]'],
    ['inbound', 'inbound'],
    ['ether host aa:bb', 'ether'],
    ['tcp and', '<end>'],
    ['dst port 70000', '70000'],
    ['(tcp', '<end>'],
    ['tcp tcp', 'tcp'],
    ['net 10.0.0.0/8', 'net'],
  ]) {
    assert.throws(
      () => compileFilter(filter as string),
      (e: unknown) => {
        assert.ok(e instanceof ShimFilterError, `${filter}: ${String(e)}`);
        assert.match(e.message, new RegExp(`at "${(word as string).replace(/[[\]]/g, '\\$&')}"`));
        return true;
      },
      filter,
    );
  }
});
