// Interop: every WCCPv2 message our encoder builds, as Wireshark's dissector reads it. No malformed packet, no expert
// warning or error, and the key fields (message type, service id, router id, Receive ID, buckets) read as we meant.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  encodeMessage,
  CapabilityType,
  CommandType,
  ForwardingCapability,
  AssignmentCapability,
  ReturnCapability,
  ServiceFlag,
  type Component,
  type Wccp2Message,
  type MaskValueSet,
  type WebCacheIdentityElement,
  type AssignmentBucket,
} from '../../src/wire/wccp2/index.js';
import { udpFrame } from '../helpers/pcap-file.js';
import { complaints, field, haveTshark, tsharkFrames, type TsharkPacket } from '../helpers/tshark.js';
import { need } from '../helpers/require.js';
import { NO_SECURITY, WEB_CACHE_SERVICE } from '../helpers/wccp2.js';

const skip = need(haveTshark, 'tshark (Debian package tshark)');

const ROUTER = '192.0.2.1';
const CACHES = ['192.0.2.11', '192.0.2.12'] as const;
const RECEIVE_ID = 7;

const dynamic: Component = {
  kind: 'service',
  serviceType: 'dynamic',
  serviceId: 90,
  priority: 240,
  protocol: 6,
  flags: ServiceFlag.DST_IP_HASH | ServiceFlag.PORTS_DEFINED,
  ports: [80, 8080, 0, 0, 0, 0, 0, 0],
};
const capabilities: Component = {
  kind: 'capabilities',
  elements: [
    { form: 'value', type: CapabilityType.FORWARDING_METHOD, value: ForwardingCapability.L2 },
    {
      form: 'value',
      type: CapabilityType.ASSIGNMENT_METHOD,
      value: AssignmentCapability.HASH | AssignmentCapability.MASK,
    },
    { form: 'value', type: CapabilityType.PACKET_RETURN_METHOD, value: ReturnCapability.GRE | ReturnCapability.L2 },
  ],
};
const hexIp = (ip: string): string => Buffer.from(ip.split('.').map(Number)).toString('hex');

/** Buckets 0..127 to the first cache, 128..255 to the second. */
const bucketsOf = (i: number): number[] => Array.from({ length: 128 }, (_, b) => b + 128 * i);
const hashElement = (i: number): WebCacheIdentityElement => ({
  address: CACHES[i] ?? '',
  hashRevision: 0,
  flags: 0,
  assignment: { type: 'hash', buckets: bucketsOf(i) },
  weight: 100,
  status: 0,
});
const sets: MaskValueSet[] = [
  {
    mask: { srcAddrMask: 0, dstAddrMask: 0x1741, srcPortMask: 0, dstPortMask: 0 },
    values: [0, 1].map((v, i) => ({
      srcAddrValue: 0,
      dstAddrValue: v,
      srcPortValue: 0,
      dstPortValue: 0,
      webCache: CACHES[i] ?? '',
    })),
  },
];
const maskElement = (i: number): WebCacheIdentityElement => ({
  address: CACHES[i] ?? '',
  hashRevision: 0,
  flags: 0,
  assignment: { type: 'mask', sets },
  weight: 0,
  status: 0,
});
const key = { address: CACHES[0], changeNumber: 4 };
const buckets: AssignmentBucket[] = Array.from({ length: 256 }, (_, b) =>
  b < 128
    ? { cache: 0, alternate: false }
    : b < 250
      ? { cache: 1, alternate: false }
      : b < 255
        ? { cache: 1, alternate: true }
        : null,
);
const assignment = {
  key,
  routers: [{ routerId: ROUTER, receiveId: RECEIVE_ID, changeNumber: 3 }],
  caches: [...CACHES],
  buckets,
};
/** An I_SEE_YOU's view of both caches, hash assignment. */
const hashRouterView: Component = {
  kind: 'router-view',
  memberChangeNumber: 2,
  assignmentKey: key,
  routers: [ROUTER],
  caches: [hashElement(0), hashElement(1)],
};
const routerIdentity: Component = {
  kind: 'router-identity',
  router: { routerId: ROUTER, receiveId: RECEIVE_ID },
  sentTo: ROUTER,
  receivedFrom: [...CACHES],
};
/** What a hash I_SEE_YOU to both caches opens with, before its assignment. */
const hashSeeYou: readonly Component[] = [NO_SECURITY, WEB_CACHE_SERVICE, routerIdentity, hashRouterView];

interface Case {
  readonly name: string;
  readonly msg: Wccp2Message;
  readonly md5: boolean;
  readonly serviceId: number;
  readonly dynamic: boolean;
  /** Expert names tshark raises where Wireshark disagrees with the draft, not with our bytes (see docs/decode.md). */
  readonly tsharkDisagrees?: readonly string[];
}

const messages: Omit<Case, 'md5'>[] = [
  {
    name: 'HERE_I_AM hash, capabilities, command extension',
    serviceId: 0,
    dynamic: false,
    msg: {
      type: 'HERE_I_AM',
      version: 0x200,
      components: [
        NO_SECURITY,
        WEB_CACHE_SERVICE,
        { kind: 'web-cache-identity', element: hashElement(0) },
        {
          kind: 'web-cache-view',
          changeNumber: 3,
          routers: [{ routerId: ROUTER, receiveId: RECEIVE_ID }],
          caches: [...CACHES],
        },
        capabilities,
        { kind: 'command-extension', commandType: CommandType.SHUTDOWN, data: hexIp(CACHES[0]) },
      ],
    },
  },
  {
    name: 'HERE_I_AM mask, dynamic service',
    serviceId: 90,
    dynamic: true,
    msg: {
      type: 'HERE_I_AM',
      version: 0x200,
      components: [
        NO_SECURITY,
        dynamic,
        { kind: 'web-cache-identity', element: maskElement(1) },
        {
          kind: 'web-cache-view',
          changeNumber: 1,
          routers: [{ routerId: ROUTER, receiveId: RECEIVE_ID }],
          caches: [CACHES[1]],
        },
        capabilities,
      ],
    },
  },
  {
    // Draft §5.2 allows Assignment Info in I_SEE_YOU (Squid skips it); Wireshark 4.0 flags it as an error
    // (wccp.contains.redirect_assignment) and expects Alternate Assignment or Assignment Map there instead. The
    // codec can still build the draft's form; the router never sends it (test/control/tshark-router.test.ts).
    name: 'I_SEE_YOU with Assignment Info',
    serviceId: 0,
    dynamic: false,
    tsharkDisagrees: ['wccp.contains.redirect_assignment'],
    msg: {
      type: 'I_SEE_YOU',
      version: 0x200,
      components: [
        ...hashSeeYou,
        { kind: 'assignment-info', ...assignment },
        capabilities,
        { kind: 'command-extension', commandType: CommandType.SHUTDOWN_RESPONSE, data: hexIp(CACHES[1]) },
      ],
    },
  },
  {
    name: 'I_SEE_YOU with Alternate Assignment (hash)',
    serviceId: 0,
    dynamic: false,
    msg: {
      type: 'I_SEE_YOU',
      version: 0x200,
      components: [
        ...hashSeeYou,
        { kind: 'alternate-assignment', assignment: { type: 'hash', ...assignment } },
        capabilities,
      ],
    },
  },
  {
    name: 'I_SEE_YOU with Assignment Map (mask)',
    serviceId: 90,
    dynamic: true,
    msg: {
      type: 'I_SEE_YOU',
      version: 0x200,
      components: [
        NO_SECURITY,
        dynamic,
        routerIdentity,
        {
          kind: 'router-view',
          memberChangeNumber: 2,
          assignmentKey: key,
          routers: [ROUTER],
          caches: [maskElement(0), maskElement(1)],
        },
        { kind: 'assignment-map', sets },
        capabilities,
      ],
    },
  },
  {
    name: 'REDIRECT_ASSIGN with Assignment Info',
    serviceId: 0,
    dynamic: false,
    msg: {
      type: 'REDIRECT_ASSIGN',
      version: 0x200,
      components: [NO_SECURITY, WEB_CACHE_SERVICE, { kind: 'assignment-info', ...assignment }],
    },
  },
  {
    name: 'REDIRECT_ASSIGN with Alternate Assignment (mask)',
    serviceId: 90,
    dynamic: true,
    msg: {
      type: 'REDIRECT_ASSIGN',
      version: 0x200,
      components: [
        NO_SECURITY,
        dynamic,
        { kind: 'alternate-assignment', assignment: { type: 'mask', key, routers: assignment.routers, sets } },
      ],
    },
  },
  {
    name: 'REMOVAL_QUERY',
    serviceId: 0,
    dynamic: false,
    msg: {
      type: 'REMOVAL_QUERY',
      version: 0x200,
      components: [
        NO_SECURITY,
        WEB_CACHE_SERVICE,
        { kind: 'router-query', routerId: ROUTER, receiveId: RECEIVE_ID, sentTo: ROUTER, target: CACHES[1] },
      ],
    },
  },
];
const cases: Case[] = messages.flatMap((m) => [
  { ...m, md5: false },
  { ...m, md5: true },
]);

const TYPE_CODE = { HERE_I_AM: '10', I_SEE_YOU: '11', REDIRECT_ASSIGN: '12', REMOVAL_QUERY: '13' } as const;

function frameOf(c: Case): Buffer {
  const payload = encodeMessage(c.msg, c.md5 ? { password: 'secret' } : {});
  const fromRouter = c.msg.type === 'I_SEE_YOU' || c.msg.type === 'REMOVAL_QUERY';
  return udpFrame({ payload, src: fromRouter ? ROUTER : CACHES[0], dst: fromRouter ? CACHES[0] : ROUTER });
}

let decoded: TsharkPacket[] = [];
const packet = (i: number): TsharkPacket => {
  if (decoded.length === 0) decoded = tsharkFrames(cases.map(frameOf));
  const p = decoded[i];
  assert.ok(p, `tshark returned ${decoded.length} packets for ${cases.length} frames`);
  return p;
};

cases.forEach((c, i) => {
  test(`tshark reads our ${c.name}${c.md5 ? ' (MD5)' : ''} with no complaint and the key fields`, { skip }, () => {
    const p = packet(i);
    assert.ok(p.protocols.includes('wccp'), p.protocols.join(':'));
    assert.equal(p.malformed, false, complaints(p));
    const allowed = new Set(c.tsharkDisagrees ?? []);
    assert.deepEqual(
      p.experts.filter((e) => !allowed.has(e.name)),
      [],
      complaints(p),
    );
    // A known disagreement must still be there: if Wireshark changes its mind, this list must shrink.
    for (const name of allowed)
      assert.ok(
        p.experts.some((e) => e.name === name),
        `expected tshark to flag ${name}`,
      );
    assert.equal(field(p, 'wccp.message'), TYPE_CODE[c.msg.type]);
    assert.equal(field(p, 'wccp.security_info_option'), c.md5 ? '1' : '0');
    if (c.md5) assert.ok(field(p, 'wccp.security_md5_checksum'), 'MD5 digest shown');
    assert.equal(field(p, c.dynamic ? 'wccp.service_info_dyn_id' : 'wccp.service_info_std_id'), String(c.serviceId));
  });
});

const bucketByte = (b: AssignmentBucket): string => String(b === null ? 0xff : b.cache | (b.alternate ? 0x80 : 0));
const at = (name: string, md5 = false): TsharkPacket => {
  const i = cases.findIndex((c) => c.name === name && c.md5 === md5);
  assert.ok(i >= 0, name);
  return packet(i);
};

test('tshark shows the HERE_I_AM web cache, its bucket vector, and the Receive ID it echoes', { skip }, () => {
  const p = at('HERE_I_AM hash, capabilities, command extension');
  assert.equal(field(p, 'wccp.wc_identity_ip_address.ipv4'), CACHES[0]);
  assert.deepEqual(p.fields.get('wccp.wc_view_info.router_ip.ipv4'), [ROUTER]);
  assert.deepEqual(p.fields.get('wccp.router_identity.receive_id'), [String(RECEIVE_ID)]);
  // One bit per bucket, LSB first: this cache holds buckets 0..127.
  const bits = p.fields.get('wccp.bucket_bit') ?? [];
  assert.equal(bits.length, 256);
  assert.deepEqual(
    bits.map((v, n) => (Number(v) !== 0 ? n : -1)).filter((n) => n >= 0),
    bucketsOf(0),
  );
  assert.equal(field(p, 'wccp.command_element_shudown_ip_address.ipv4'), CACHES[0]);
});

test('tshark shows the I_SEE_YOU router id, Receive ID, sent-to and received-from addresses', { skip }, () => {
  const p = at('I_SEE_YOU with Alternate Assignment (hash)');
  assert.equal(field(p, 'wccp.router_identity.router_ip.ipv4'), ROUTER);
  assert.ok(p.fields.get('wccp.router_identity.receive_id')?.includes(String(RECEIVE_ID)), 'Receive ID');
  assert.equal(field(p, 'wccp.router_identity.send_to_ip.ipv4'), ROUTER);
  assert.deepEqual(p.fields.get('wccp.router_identity.received_from_ip.ipv4'), [...CACHES]);
  assert.equal(field(p, 'wccp.router_view.member_change_num'), '2');
});

test(
  'tshark shows all 256 buckets of our Assignment Info as we encoded them (index, A flag, 0xFF unassigned)',
  { skip },
  () => {
    for (const name of [
      'REDIRECT_ASSIGN with Assignment Info',
      'I_SEE_YOU with Assignment Info',
      'I_SEE_YOU with Alternate Assignment (hash)',
    ]) {
      for (const md5 of [false, true]) {
        const p = at(name, md5);
        assert.deepEqual(p.fields.get('wccp.bucket'), buckets.map(bucketByte), name);
        if (name.includes('Alternate')) {
          // Inside Alternate Assignment, Wireshark 4.0 prints web-cache IPs byte-swapped (192.0.2.11 as 11.2.0.192)
          // although the bytes are the same big-endian ones it reads correctly in Assignment Info. Accept either.
          const shown = p.fields.get('wccp.cache_ip') ?? [];
          const swapped = CACHES.map((a) => a.split('.').reverse().join('.'));
          assert.ok(
            JSON.stringify(shown) === JSON.stringify(CACHES) || JSON.stringify(shown) === JSON.stringify(swapped),
            shown.join(' '),
          );
        } else {
          assert.deepEqual(p.fields.get('wccp.hash_buckets_assignment.wc_ip.ipv4'), [...CACHES], name);
        }
        assert.equal(field(p, 'wccp.assignment_key.ipv4'), key.address, name);
        assert.equal(field(p, 'wccp.assignment_key.change_num'), String(key.changeNumber), name);
      }
    }
  },
);

test('tshark shows the REMOVAL_QUERY router, Receive ID and target web cache', { skip }, () => {
  const p = at('REMOVAL_QUERY');
  const values = [...p.fields.entries()].filter(([k]) => k.startsWith('wccp.')).flatMap(([, v]) => v);
  assert.ok(
    values.includes(ROUTER) && values.includes(CACHES[1]) && values.includes(String(RECEIVE_ID)),
    values.join(' '),
  );
});
