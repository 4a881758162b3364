// One address module: the API, config, state, codecs and allowlist accept the same forms. Leading zeros are refused
// everywhere (some parsers read them as octal: 010.0.0.1 = 8.0.0.1).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { addressSet, ipFamily, ipv4ToNumber, isIpv4, numberToIpv4, parseCidr } from '../../src/address.js';
import { routes, type ApiContext } from '../../src/admin/api.js';
import { ConfigError, parseConfig } from '../../src/config/index.js';
import { decodeState, encodeState } from '../../src/state/codec.js';
import { STATE_VERSION } from '../../src/state/types.js';
import { allowlist } from '../../src/control/allowlist.js';
import { encodeMessage, Wccp2EncodeError } from '../../src/wire/wccp2/index.js';
import { parseIpv4 } from '../../src/buckets/ipv4.js';
import { NO_SECURITY, WEB_CACHE_SERVICE } from '../helpers/wccp2.js';

const config = (router: string, allow: string) => `
router:
  address: ${router}
dataplane:
  backend: none
services:
  - id: 0
    engines:
      allow: [${allow}]
`;

function configRefuses(text: string): string {
  try {
    parseConfig(text, 't.yaml');
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    return e.problems.map((p) => p.message).join('; ');
  }
  return assert.fail('the config parsed');
}

async function api(method: 'GET' | 'POST', path: string, query = ''): Promise<{ status: number; body: unknown }> {
  const route = routes.find((r) => r.method === method && r.pattern.test(path));
  assert.ok(route, `no route for ${method} ${path}`);
  const params = route.pattern.exec(path)?.groups ?? {};
  // The address is checked before the model is asked: a context that would throw proves it is never reached.
  const ctx = new Proxy(
    {},
    {
      get: () => {
        throw new Error('the model was asked');
      },
    },
  ) as ApiContext;
  const r = await route.handle(params, ctx, new URLSearchParams(query), undefined);
  assert.ok('body' in r);
  return { status: r.status, body: r.body };
}

test('01.2.3.4 is refused by the API (drain, which) and by the config alike', async () => {
  for (const bad of ['01.2.3.4', '1.2.3.04', '256.1.1.1', '1.2.3', ' 1.2.3.4']) {
    assert.equal((await api('POST', `/api/v1/services/0/engines/${encodeURIComponent(bad)}/drain`)).status, 400, bad);
    assert.equal((await api('GET', '/api/v1/services/0/which', `ip=${encodeURIComponent(bad)}`)).status, 400, bad);
  }
  assert.match(configRefuses(config('01.2.3.4', '192.0.2.0/24')), /01\.2\.3\.4/);
  assert.match(configRefuses(config('192.0.2.1', '010.0.2.0/24')), /010\.0\.2\.0/);
  // The well-formed form passes both: the config parses, and the API gets as far as the model.
  assert.equal(parseConfig(config('192.0.2.1', '192.0.2.0/24'), 't.yaml').router.address, '192.0.2.1');
  await assert.rejects(api('POST', '/api/v1/services/0/engines/192.0.2.11/drain'), /the model was asked/);
});

test('the state file, the allowlist, the codecs and the bucket hash refuse the same forms', () => {
  const allow = allowlist(['192.0.2.0/24']);
  assert.equal(allow.allows('192.0.2.9'), true);
  assert.equal(allow.allows('192.0.2.09'), false);
  assert.equal(allow.allows('198.51.100.9'), false);
  assert.throws(() => allowlist(['192.0.2.1/24']), /host bits set; did you mean 192\.0\.2\.0\/24/);
  assert.throws(() => parseIpv4('192.0.2.09'), /not an IPv4 address/);
  assert.throws(
    () =>
      encodeMessage({
        type: 'REMOVAL_QUERY',
        version: 0x200,
        components: [
          NO_SECURITY,
          WEB_CACHE_SERVICE,
          { kind: 'router-query', routerId: '192.0.2.01', receiveId: 1, sentTo: '192.0.2.1', target: '192.0.2.11' },
        ],
      }),
    Wccp2EncodeError,
  );
  const state = (owner: string) =>
    encodeState({
      version: STATE_VERSION,
      savedAt: 0,
      services: [
        {
          id: 0,
          receiveId: 1,
          counters: {},
          table: { changeNumber: 1, buckets: new Array<string>(256).fill(owner) },
          engines: [],
        },
      ],
    });
  assert.equal(decodeState(state('192.0.2.11')).ok, true);
  assert.deepEqual(decodeState(state('192.0.2.011')), {
    ok: false,
    reason: 'services[0].table.buckets holds something other than an IPv4 address or null',
  });
});

test('address helpers: numbers, CIDRs with their mistakes named, BlockList sets, IPv6 recognised', () => {
  assert.equal(ipv4ToNumber('1.2.3.4'), 0x01020304);
  assert.equal(ipv4ToNumber('255.255.255.255'), 0xffffffff);
  assert.equal(numberToIpv4(0xc0000201), '192.0.2.1');
  assert.equal(isIpv4('0.0.0.0'), true);
  assert.equal(isIpv4(17), false);
  assert.deepEqual(parseCidr('192.0.2.7'), { text: '192.0.2.7/32', family: 4, network: 0xc0000207, prefixLength: 32 });
  assert.match(parseCidr('192.0.2.0/33') as string, /prefix length must be 0-32/);
  assert.match(parseCidr('192.0.2.0/24/1') as string, /not a CIDR block/);
  const block = parseCidr('198.51.100.0/25');
  assert.ok(typeof block !== 'string');
  const set = addressSet([block]);
  assert.equal(set.has('198.51.100.127'), true);
  assert.equal(set.has('198.51.100.128'), false);
  assert.equal(ipFamily('2001:db8::1'), 6);
  assert.equal(ipFamily('192.0.2.1'), 4);
  assert.equal(ipFamily('::ffff:01.2.3.4'), null);
});
