// The ingress backend's buckets in a move (docs/dataplane/ingress.md, "Recorded only where a bucket moved") as the
// admin sees them: the buckets view of the API, the status count, /metrics and wccpctl's grid name each moved bucket,
// the engine it went to before and when the move ends; once it ended they are gone; a backend that keeps no moves shows
// none.
// The redirector is the real one over fake nft and ip, on the model's fake clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ClusterModel, type ClusterModelDeps } from '../../src/admin/cluster-model.js';
import { createMetrics } from '../../src/admin/metrics.js';
import { matchRoute } from '../../src/admin/api.js';
import { renderBuckets, renderStatus } from '../../src/admin/render.js';
import type { BucketsView } from '../../src/admin/api-types.js';
import { IngressRedirector } from '../../src/dataplane/ingress/ingress.js';
import type { NftListings, NftTransactions } from '../../src/dataplane/kernel/nft-session.js';
import { idleDeps } from './model-fixture.js';
import { fakeClock, testCluster } from '../cluster/helpers.js';
import { webCache } from '../dataplane/service-fixture.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

function ingress(now: () => number): IngressRedirector {
  const session: NftTransactions = {
    describe: 'a fake',
    pid: () => undefined,
    run: async () => {},
    stop: async () => {},
  };
  const reader: NftListings = { list: async () => '{"nftables":[]}', stop: async () => {}, pid: () => undefined };
  const exec = async (_cmd: string, args: readonly string[]): Promise<string> =>
    JSON.stringify([{ dst: args.at(-1), dev: 'br0', prefsrc: '192.0.2.1' }]);
  return new IngressRedirector({ session, reader, exec, now });
}

function model(clock: ReturnType<typeof fakeClock>, bucketMoves?: ClusterModelDeps['bucketMoves']): ClusterModel {
  return new ClusterModel({
    cluster: testCluster({ clock }).cluster,
    clock,
    dataplane: () => ({ backend: bucketMoves ? 'ingress' : 'nft', detail: '', bridgeNetfilter: null }),
    ...idleDeps,
    ...(bucketMoves ? { bucketMoves } : {}),
    traffic: () => Promise.resolve({ engines: new Map() }),
  });
}

/** GET /api/v1/services/0/buckets through the API's route table. */
async function getBuckets(m: ClusterModel): Promise<BucketsView> {
  const found = matchRoute('GET', '/api/v1/services/0/buckets');
  assert.ok(found !== null && found !== 'method');
  const r = await found.route.handle(
    found.params,
    { model: m, metrics: createMetrics(m) },
    new URLSearchParams(),
    null,
  );
  assert.equal(r.status, 200);
  assert.ok('body' in r);
  return JSON.parse(JSON.stringify(r.body)) as BucketsView;
}

const gridCells = (text: string) =>
  text
    .split('\n')
    .filter((l) => /^ {2}[0-9a-f]{2} {2}/.test(l))
    .flatMap((l) => l.slice(6).match(/.{2}( |$)/g) ?? [])
    .map((c) => c.slice(0, 2));

test('a move shows its buckets, the engine before and the end everywhere; after its end, nothing', async () => {
  const clock = fakeClock();
  const r = ingress(() => clock.now());
  await r.start();
  await r.apply(webCache(() => E1, [E1, E2]));
  const m = model(clock, () => r.bucketMoves());
  let view = await getBuckets(m);
  assert.deepEqual(view.moved, [], 'ingress, nothing moved yet');
  assert.equal(m.status().services[0]?.movedBuckets, 0);
  assert.match(await createMetrics(m).render(), /^wccpd_buckets_moved\{service="0"\} 0$/m);

  // E2 takes buckets 0x10-0x13 from E1 (a hot insert): 600 s (flows.idle) of move from now.
  await r.apply(
    webCache((b) => (b >= 0x10 && b < 0x14 ? E2 : E1), [E1, E2], {
      table: { changeNumber: 2, buckets: Array.from({ length: 256 }, (_, b) => (b >= 0x10 && b < 0x14 ? E2 : E1)) },
    }),
  );
  const end = new Date(clock.wall() + 600_000).toISOString();
  view = await getBuckets(m);
  assert.deepEqual(
    view.moved,
    [0x10, 0x11, 0x12, 0x13].map((bucket) => ({
      bucket,
      before: 'engine',
      engineBefore: E1,
      until: end,
      endsInMs: 600_000,
    })),
  );
  const status = m.status();
  assert.equal(status.services[0]?.movedBuckets, 4);
  assert.match(renderStatus(status), /Buckets in a move:\s+4 \(wccpctl buckets lists them\)$/m);
  assert.match(await createMetrics(m).render(), /^wccpd_buckets_moved\{service="0"\} 4$/m);

  // wccpctl's grid: the four cells marked, the old engine (a letter of its own: the cluster's table names no engine
  // here) and the end under the legend, within 100 columns.
  const text = renderBuckets(view, [], { colour: false, hex: false });
  const cells = gridCells(text);
  assert.equal(cells.length, 256);
  assert.deepEqual(
    cells.flatMap((c, b) => (c.startsWith('*') ? [b] : [])),
    [0x10, 0x11, 0x12, 0x13],
  );
  assert.match(text, /^ {3}\* {2}4 buckets in a move: connections older than the move still go where the bucket went/m);
  assert.ok(text.includes(`      from A ${E1} until ${end} (10 min left):\n        10 11 12 13`), text);
  assert.ok(
    text.split('\n').every((l) => l.length <= 100),
    'fits 100 columns',
  );

  // Time passes: the end stays, the time left runs down.
  clock.advance(590_000);
  view = await getBuckets(m);
  assert.equal(view.moved?.[0]?.until, end);
  assert.equal(view.moved?.[0]?.endsInMs, 10_000);
  assert.match(renderBuckets(view, [], { colour: false, hex: false }), /\(10 s left\)/);

  // The move ends: the service is written again with those buckets steady, and nothing is shown.
  clock.advance(10_001);
  await r.expireMoves();
  view = await getBuckets(m);
  assert.deepEqual(view.moved, []);
  assert.equal(m.status().services[0]?.movedBuckets, 0);
  assert.match(await createMetrics(m).render(), /^wccpd_buckets_moved\{service="0"\} 0$/m);
  const after = renderBuckets(view, [], { colour: false, hex: false });
  assert.ok(!gridCells(after).some((c) => c.startsWith('*')), 'no cell marked');
  assert.doesNotMatch(after, /in a move/);
  await r.stop();
});

test('the last engine leaving moves all 256 buckets to no engine: each listed once, from an engine that has left', async () => {
  const clock = fakeClock();
  const r = ingress(() => clock.now());
  await r.start();
  await r.apply(webCache(() => E1, [E1]));
  await r.apply(webCache(() => null, [], { table: { changeNumber: 2, buckets: new Array(256).fill(null) } }));
  const view = await getBuckets(model(clock, () => r.bucketMoves()));
  assert.equal(view.moved?.length, 256);
  assert.deepEqual(
    view.moved?.map((x) => x.bucket),
    Array.from({ length: 256 }, (_, b) => b),
  );
  assert.ok(view.moved?.every((x) => x.before === 'gone' && x.engineBefore === null));
  const text = renderBuckets(view, [], { colour: false, hex: false });
  assert.match(text, /^ {6}from an engine that has left \(reset\) until /m);
  assert.ok(
    text.split('\n').every((l) => l.length <= 100),
    'fits 100 columns',
  );
  await r.stop();
});

test('a data plane that keeps no moves: null in the buckets view and status, no sample, no marker, no row', async () => {
  const m = model(fakeClock());
  const view = await getBuckets(m);
  assert.equal(view.moved, null);
  const status = m.status();
  assert.equal(status.services[0]?.movedBuckets, null);
  assert.doesNotMatch(renderStatus(status), /in a move/);
  assert.doesNotMatch(await createMetrics(m).render(), /^wccpd_buckets_moved\{/m);
  const text = renderBuckets(view, [], { colour: false, hex: false });
  assert.ok(!gridCells(text).some((c) => c.startsWith('*')));
  assert.doesNotMatch(text, /in a move/);
});
