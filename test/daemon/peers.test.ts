// Two gateways on loopback (router 127.0.0.1 and 127.0.0.2), each listing the other under `peers`, with the same
// engines registered with both in different orders. In mode consistent both publish the same table through every
// membership change (read from both APIs), the Router View lists both routers, and `wccpctl status` on each says
// whether the other agrees, read from the other's API.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { TestEngine } from '../helpers/wccp-engine.js';
import { freeTcpPort, startDaemon, TOKEN, waitFor, wccpctl, type RunningDaemon } from '../helpers/daemon.js';
import type { BucketsView, StatusView } from '../../src/admin/api-types.js';

const ENGINES = ['127.0.0.41', '127.0.0.42', '127.0.0.43', '127.0.0.44'];
let a: RunningDaemon;
let b: RunningDaemon;
// One engine socket per gateway, as Squid sends HERE_I_AM to every wccp2_router.
const onA = new Map<string, TestEngine>();
const onB = new Map<string, TestEngine>();
const joined = new Set<TestEngine>();
let keepAlive: ReturnType<typeof setInterval> | undefined;

async function table(d: RunningDaemon): Promise<BucketsView> {
  return (await (await fetch(`${d.url}/api/v1/services/0/buckets`)).json()) as BucketsView;
}

async function join(e: TestEngine): Promise<void> {
  joined.add(e);
  await e.hereIAm();
  await e.hereIAm();
}

async function post(d: RunningDaemon, path: string, body: unknown = {}): Promise<void> {
  const r = await fetch(`${d.url}/api/v1/services/0/${path}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
  });
  assert.equal(r.status, 200, await r.text());
}

const members = (t: BucketsView): string => [...new Set(t.buckets.filter((x) => x !== null))].sort().join(',');

/** Waits until both gateways serve exactly `expected`, then checks that their tables are the same, bucket by bucket. */
async function bothServe(expected: readonly string[]): Promise<BucketsView> {
  const want = [...expected].sort().join(',');
  const [ta, tb] = await waitFor(`both gateways to serve ${want}`, async () => {
    const pair = await Promise.all([table(a), table(b)]);
    return pair.every((t) => members(t) === want) ? pair : null;
  });
  assert.deepEqual(tb.buckets, ta.buckets, `the two gateways publish the same table for ${want}`);
  return ta;
}

async function peerStatus(d: RunningDaemon): Promise<NonNullable<StatusView['peers']>[number]> {
  const r = await wccpctl(['--url', d.url, '--json', 'status']);
  assert.equal(r.code, 0, r.stderr);
  const s = JSON.parse(r.stdout) as StatusView;
  assert.equal(s.peers?.length, 1);
  return s.peers![0]!;
}

before(async () => {
  const [portA, portB] = [await freeTcpPort(), await freeTcpPort()];
  const peerLines = (address: string, port: number): string[] => [
    'peers:',
    `  - { address: ${address}, api: "http://127.0.0.1:${port}" }`,
  ];
  a = await startDaemon(['mode: consistent'], {
    routerAddress: '127.0.0.1',
    httpPort: portA,
    top: peerLines('127.0.0.2', portB),
  });
  b = await startDaemon(['mode: consistent'], {
    routerAddress: '127.0.0.2',
    httpPort: portB,
    top: peerLines('127.0.0.1', portA),
  });
  for (const address of ENGINES) {
    for (const [d, map, router] of [
      [a, onA, '127.0.0.1'],
      [b, onB, '127.0.0.2'],
    ] as const) {
      const e = new TestEngine({ address, router: { address: router, port: d.udpPort } });
      await e.start();
      map.set(address, e);
    }
  }
  keepAlive = setInterval(() => {
    for (const e of joined) void e.hereIAm().catch(() => undefined);
  }, 3000);
});

after(async () => {
  clearInterval(keepAlive);
  for (const e of [...onA.values(), ...onB.values()]) await e.stop();
  await a?.stop();
  await b?.stop();
});

test('two gateways in mode consistent publish the same table through joins in different orders, weight changes, drains and returns; wccpctl status says so', async () => {
  const [e41, e42, e43, e44] = ENGINES as [string, string, string, string];
  // The Router View of each gateway lists both routers, ours first.
  await join(onA.get(e41)!);
  const seen = await onA.get(e41)!.hereIAm();
  assert.deepEqual(seen?.routers, ['127.0.0.1', '127.0.0.2']);
  await join(onB.get(e43)!);
  // Different memberships for a moment: status says the tables differ, and where.
  await waitFor('A to serve 41 and B 43', async () =>
    members(await table(a)) === e41 && members(await table(b)) === e43 ? true : null,
  );
  // (waitFor: a read that timed out on a busy machine says null, not false; the next one is asked a second later)
  const differs = await waitFor("A to read B's table", async () => {
    const st = await peerStatus(a);
    return st.services[0]?.agrees === false ? st : null;
  });
  assert.equal(differs.address, '127.0.0.2');
  assert.equal(differs.agrees, false);
  assert.equal(differs.services[0]?.agrees, false);
  assert.equal(differs.services[0]?.differingBuckets, 256);
  const human = await wccpctl(['--url', a.url, 'status']);
  assert.match(human.stdout, /Peer router 127\.0\.0\.2 \(http:\/\/127\.0\.0\.1:\d+\): tables DIFFER/);
  assert.match(human.stdout, /Service 0:\s+DIFFERS in 256 buckets \(0, 1, 2, .*, \.\.\.\)/);

  // Joins in another order on each gateway.
  for (const e of [e42, e43]) await join(onA.get(e)!);
  for (const e of [e41, e44, e42]) await join(onB.get(e)!);
  await join(onA.get(e44)!);
  const four = await bothServe(ENGINES);
  for (const d of [a, b]) {
    const p = await waitFor('the peer to agree', async () => {
      const s = await peerStatus(d);
      return s.agrees ? s : null;
    });
    assert.deepEqual(
      p.services.map((s) => [s.id, s.agrees, s.differingBuckets, s.error]),
      [[0, true, 0, null]],
    );
    assert.ok(p.checks >= 1);
  }
  const metrics = await waitFor('/metrics to show the peer read', async () => {
    const text = await (await fetch(`${a.url}/metrics`)).text();
    return /^wccpd_peer_unread\{peer="127\.0\.0\.2",service="0"\} 0$/m.test(text) ? text : null;
  });
  assert.match(metrics, /^wccpd_peer_differing_buckets\{peer="127\.0\.0\.2",service="0"\} 0$/m);
  const agreeText = await wccpctl(['--url', b.url, 'status']);
  assert.match(agreeText.stdout, /Peer router 127\.0\.0\.1 .*: same tables/);
  assert.match(agreeText.stdout, /Service 0:\s+agrees \(change number \d+ here, \d+ there\)/);

  // A weight change, set on A first: for a moment B differs; then on B too.
  await post(a, `engines/${e42}/weight`, { weight: 30000 });
  const mid = await waitFor('A to apply the weight', async () => {
    const t = await table(a);
    return t.buckets.filter((x) => x === e42).length > 64 ? t : null;
  });
  assert.equal(mid.buckets.filter((x) => x === e42).length, 128, 'engines announce 10000: weight 30000 of 60000');
  const half = await waitFor('A to see that B differs', async () => {
    const st = await peerStatus(a);
    return st.services[0]?.agrees === false ? st : null;
  });
  const onlyA = mid.buckets.filter((x, i) => x !== four.buckets[i]).length;
  assert.ok(onlyA >= 64, `42 gained at least 64 buckets on A (${onlyA} moved)`);
  assert.equal(half.services[0]?.differingBuckets, onlyA, 'B still serves the four-engine table');
  await post(b, `engines/${e42}/weight`, { weight: 30000 });
  await waitFor('B to apply the weight', async () =>
    (await table(b)).buckets.filter((x) => x === e42).length > 64 ? true : null,
  );
  const weighted = await bothServe(ENGINES);
  assert.deepEqual((await table(b)).buckets, weighted.buckets);

  // An engine leaves (drain), in the other order, then returns: both end with the same table, and the four-engine
  // table comes back exactly once the weight is restored.
  await post(b, `engines/${e43}/drain`);
  await post(a, `engines/${e43}/drain`);
  await bothServe([e41, e42, e44]);
  await post(a, `engines/${e43}/undrain`);
  await post(b, `engines/${e43}/undrain`);
  await bothServe(ENGINES);
  for (const d of [b, a]) await post(d, `engines/${e42}/weight`, { weight: 10000 });
  await waitFor('both to drop the weight', async () =>
    (await Promise.all([table(a), table(b)])).every((t) => t.buckets.filter((x) => x === e42).length === 64)
      ? true
      : null,
  );
  assert.deepEqual(
    (await bothServe(ENGINES)).buckets,
    four.buckets,
    'the same members and weights: the same table as before',
  );
});

test('a peer that cannot be read is reported with the reason, and status still answers', async () => {
  await b.terminate();
  const p = await peerStatus(a);
  assert.equal(p.agrees, false);
  assert.equal(p.services[0]?.agrees, null);
  assert.match(
    p.services[0]?.error ?? '',
    /^unreachable: http:\/\/127\.0\.0\.1:\d+\/api\/v1\/services\/0\/buckets: .*ECONNREFUSED/,
  );
  assert.ok(p.failures >= 1);
  const metrics = await (await fetch(`${a.url}/metrics`)).text();
  assert.match(metrics, /^wccpd_peer_unread\{peer="127\.0\.0\.2",service="0"\} 1$/m);
  assert.doesNotMatch(metrics, /^wccpd_peer_differing_buckets\{/m);
  const human = await wccpctl(['--url', a.url, 'status']);
  assert.equal(human.code, 0);
  assert.match(human.stdout, /Service 0:\s+unknown: unreachable/);
});
