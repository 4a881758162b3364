import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRedirector, explain, DataplaneError, UserlandRedirector } from '../../src/dataplane/index.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import { recordingLog } from '../../src/log.js';
import { webCache } from './service-fixture.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

test('explain answers a mask service with its Mask/Value Sets, not the bucket table', () => {
  const v = (d: number, engine: string) => ({
    sourceAddress: 0,
    destinationAddress: d,
    sourcePort: 0,
    destinationPort: 0,
    engine,
  });
  const dst = { sourceAddressMask: 0, destinationAddressMask: 0x1741, sourcePortMask: 0, destinationPortMask: 0 };
  // The bucket table names E2 everywhere; the sets say 198.51.100.80 (& 0.0.23.65 = 0.0.4.64) is E1's.
  const s = webCache(() => E2, [E1, E2], { maskSets: [{ mask: dst, values: [v(0x440, E1), v(0x441, E2)] }] });
  assert.deepEqual(explain(s, '198.51.100.80'), {
    serviceId: 0,
    address: '198.51.100.80',
    bucket: 193,
    engine: E1,
    family: 'ipv4',
    why: 'assigned',
  });
  assert.equal(explain(s, '198.51.100.81').engine, E2);
  assert.equal(explain(s, '198.51.100.1').why, 'unassigned', 'no value matches: forwarded normally');
  assert.equal(explain({ ...s, engines: [E2] }, '198.51.100.80').why, 'unassigned', 'its engine is gone');
  assert.equal(explain({ ...s, engines: [], failMode: 'closed' }, '198.51.100.80').why, 'closed');
  // A source mask: the address given is the client's.
  const src = { ...dst, sourceAddressMask: 0xf, destinationAddressMask: 0 };
  const bySource = webCache(() => E2, [E1, E2], {
    maskSets: [{ mask: src, values: [{ ...v(0, E1), sourceAddress: 0xa }] }],
  });
  assert.equal(explain(bySource, '203.0.113.10').engine, E1);
});

test('explain names the bucket (XOR of the address bytes), the engine and why', () => {
  const s = webCache((b) => (b % 2 === 0 ? E1 : b % 3 === 0 ? E2 : null), [E1, E2]);
  // 198^51^100 = 145 and 145^80 = 193: odd and not a multiple of 3, so unassigned
  assert.deepEqual(explain(s, '198.51.100.80'), {
    serviceId: 0,
    address: '198.51.100.80',
    bucket: 193,
    engine: null,
    family: 'ipv4',
    why: 'unassigned',
  });
  assert.deepEqual(explain(s, '198.51.100.81'), {
    serviceId: 0,
    address: '198.51.100.81',
    bucket: 192,
    engine: E1,
    family: 'ipv4',
    why: 'assigned',
  });
  assert.equal(explain(s, '198.51.100.82').engine, E2); // bucket 195 = 3 * 65
  // An engine the group no longer counts as usable serves nothing.
  assert.equal(explain({ ...s, engines: [E2] }, '198.51.100.81').why, 'unassigned');
});

test('an IPv6 destination: its folded bucket in the same table when the service redirects IPv6, else family', () => {
  const s = webCache((b) => (b === 0x95 ? E2 : E1), [E1, E2]);
  // 2001:db8::1: 0x20 ^ 0x01 ^ 0x0d ^ 0xb8 ^ 0x01 = 0x95
  assert.deepEqual(explain(s, '2001:db8::1'), {
    serviceId: 0,
    address: '2001:db8::1',
    bucket: 0x95,
    engine: null,
    family: 'ipv6',
    why: 'family',
  });
  const dual = { ...s, families: ['ipv4', 'ipv6'] as const };
  assert.deepEqual(explain(dual, '2001:db8::1'), { ...explain(s, '2001:db8::1'), engine: E2, why: 'assigned' });
  assert.equal(explain(dual, '2001:db8::2').engine, E1);
  assert.equal(explain({ ...dual, engines: [], failMode: 'closed' }, '2001:db8::1').why, 'closed');
  assert.equal(explain({ ...dual, engines: [] }, '2001:db8::1').why, 'bypass');
  // IPv6 alone: IPv4 goes direct, said so.
  assert.equal(explain({ ...s, families: ['ipv6'] }, '198.51.100.81').why, 'family');
  assert.throws(() => explain(dual, 'fe80::1%eth0'), /is not an IPv4 or IPv6 address/);
});

test('with no usable engine, explain says bypass (fail open) or closed', () => {
  const s = webCache(() => E1, []);
  assert.equal(explain(s, '203.0.113.7').why, 'bypass');
  assert.equal(explain({ ...s, failMode: 'closed' }, '203.0.113.7').why, 'closed');
  assert.equal(explain({ ...s, failMode: 'closed' }, '203.0.113.7').engine, null);
});

test('the memory backend records applies and counts what a test feeds it', async () => {
  const r = new MemoryRedirector();
  await assert.rejects(r.apply(webCache(() => E1, [E1])), DataplaneError);
  await r.start();
  await r.apply(webCache((b) => (b < 128 ? E1 : E2), [E1, E2]));
  assert.equal(r.applied.length, 1);
  assert.equal(r.classify(0, '198.51.100.81')?.engine, E2); // bucket 192
  assert.equal(r.classify(0, '198.51.100.145')?.engine, E1); // bucket 0
  assert.equal(r.classify(0, '198.51.100.145')?.bucket, 0);
  const c = await r.counters();
  assert.equal(c.buckets.get(0)?.[0]?.packets, 2);
  assert.equal(c.buckets.get(0)?.[192]?.packets, 1);
  assert.equal(c.engines.get(0)?.get(E1)?.packets, 2);
  await r.removeService(0);
  assert.equal(r.classify(0, '198.51.100.81'), null);
});

test('the factory knows every backend; userland loads its packet I/O at start', async () => {
  assert.equal(createRedirector('nft').name, 'nft');
  assert.equal(createRedirector('none').name, 'none');
  const none = createRedirector('none');
  await none.apply(webCache(() => E1, [E1]));
  assert.deepEqual((await none.counters()).buckets.size, 0);
  const log = recordingLog();
  const nftCalls: string[] = [];
  const userland = createRedirector('userland', {
    userland: {
      prefer: 'shims',
      log,
      exec: async (cmd, args) => {
        nftCalls.push([cmd, ...args].join(' '));
        return '';
      },
    },
  });
  assert.ok(userland instanceof UserlandRedirector);
  assert.equal(userland.name, 'userland');
  assert.equal(userland.packetIo(), null, 'nothing loaded before start()');
  await assert.rejects(userland.apply(webCache(() => E1, [E1])), /not started/);
  await userland.start();
  assert.equal(userland.packetIo()?.native, false);
  assert.match(userland.status().detail, /^native-free shims: /, 'status says which packet I/O');
  assert.deepEqual(nftCalls, ['nft -f -'], 'start() removed a leftover guard table');
  assert.match(JSON.stringify(log.lines), /native-free shims \(no packets leave this process\): shims requested/);
  await userland.stop();
});
