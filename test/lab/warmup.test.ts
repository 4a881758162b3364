// Hot insertion with warm-up, with Debian's Squid 5.7 on both sides: two engines cache one object per bucket, a third
// is hot-inserted, the same objects are requested again. Objects in the newcomer's buckets come from their previous
// owner through wccpd's broker (SIBLING_HIT), not from the origin (which counts fetches per object); a second replay
// is served from the newcomer's own cache. A non-member gets ICP DENIED and HTTP 403, and nothing is fetched for it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createLab, originAddressForBucket, ROUTER_ADDRESS, type Lab } from './lab.js';
import { getBuckets, getJson, skipE2e, startDaemon, waitUntil, ADMIN_PORT, TOKEN, shares } from '../e2e/harness.js';
import type { EnginesView, StatusView } from '../../src/admin/api-types.js';

const ICP_QUERY_SCRIPT = `
const dgram = require('node:dgram');
const url = Buffer.from(process.argv[1] + '\\0');
const b = Buffer.alloc(24 + url.length);
b.writeUInt8(1, 0); b.writeUInt8(2, 1); b.writeUInt16BE(b.length, 2); b.writeUInt32BE(4242, 4);
url.copy(b, 24);
const s = dgram.createSocket('udp4');
const t = setTimeout(() => { console.log('timeout'); process.exit(0); }, 3000);
s.on('message', (m) => { console.log(['', 'QUERY', 'HIT', 'MISS', 'ERR'][m[0]] ?? (m[0] === 22 ? 'DENIED' : String(m[0]))); clearTimeout(t); s.close(); });
s.send(b, 3130, '${ROUTER_ADDRESS}');
`;

describe('lab: warm-up broker with Squid 5.7 on both sides', { skip: skipE2e }, () => {
  let lab: Lab;
  let daemon: Awaited<ReturnType<typeof startDaemon>> | undefined;
  const tag = `${process.pid}`;
  const urls = Array.from({ length: 256 }, (_, b) => `http://${originAddressForBucket(b)}/warm/${tag}/${b}`);
  const counts = async (): Promise<Record<string, number>> => {
    const r = await lab.curl(`http://${originAddressForBucket(0)}/_counts`, { ns: lab.ns.origin });
    assert.equal(r.status, 200, r.error);
    return r.json as Record<string, number>;
  };
  // The API may be slow on a loaded machine: a timed-out read is retried by waitUntil, not a failure.
  const buckets = () => getBuckets(lab).catch(() => null);
  const countOf = (c: Record<string, number>, url: string): number => {
    const u = new URL(url);
    return c[`${u.hostname} ${u.pathname}`] ?? 0;
  };

  before(async () => {
    lab = await createLab({ engines: 3, name: 'warm' });
    await lab.startOrigin();
    const stateDir = join(lab.dir, 'state');
    mkdirSync(stateDir, { recursive: true });
    const config = join(lab.dir, 'wccpd.yaml');
    writeFileSync(config, [
      'router:', `  address: ${ROUTER_ADDRESS}`,
      'admin:', `  listen: 127.0.0.1:${ADMIN_PORT}`, `  token: ${TOKEN}`,
      `stateDir: ${stateDir}`,
      'dataplane:', '  backend: nft',
      'warmup:', `  listen: ${ROUTER_ADDRESS}`,
      'services:', '  - id: 0', '    clientInterfaces: [c0]', '    engines:', '      allow: [192.0.2.0/24]',
      '    warmup: { duration: 5m }', '',
    ].join('\n'));
    daemon = await startDaemon(lab, config);
    await Promise.all([1, 2].map((i) => lab.startSquid(i, { sibling: ROUTER_ADDRESS })));
    await waitUntil(buckets, (v) => v !== null && shares(v.buckets).get(lab.engineAddress(1)) === 128,
      { timeoutMs: 60_000, intervalMs: 200, what: 'two Squids sharing the buckets' });
  });
  after(async () => {
    if (daemon && process.env.WARM_DEBUG) console.log(`wccpd running=${daemon.proc.running()}; its output:\n${daemon.proc.output().split("\n").filter((l) => !l.includes(`"level":30`)).join("\n").slice(-6000)}`);
    await lab?.destroy();
  });

  it('serves the newcomer\'s buckets from their previous owners, not the origin; then from its own cache', async () => {
    const first = await lab.curlMany(urls, { timeoutMs: 10_000 });
    assert.deepEqual(first.filter((r) => r.status !== 200).map((r) => r.url), []);
    const before = await counts();
    assert.ok(urls.every((u) => countOf(before, u) === 1), 'each object fetched from the origin once');

    await lab.startSquid(3, { sibling: ROUTER_ADDRESS });
    const newcomer = lab.engineAddress(3);
    const table = await waitUntil(buckets, (v) => v !== null && (shares(v.buckets).get(newcomer) ?? 0) >= 85,
      { timeoutMs: 60_000, intervalMs: 200, what: 'the newcomer holding its share' });
    const mine = urls.filter((_, b) => table.value?.buckets[b] === newcomer);
    const engines = await getJson<EnginesView>(lab, 'services/0/engines');
    assert.equal(engines.engines.find((e) => e.address === newcomer)?.flags.warming, true, 'the newcomer is warming');

    const replay = await lab.curlMany(urls, { timeoutMs: 10_000 });
    assert.deepEqual(replay.filter((r) => r.status !== 200).map((r) => r.url), [], 'no client request failed');
    const after = await counts();
    const refetched = mine.filter((u) => countOf(after, u) > 1);
    console.log(`newcomer's buckets: ${mine.length} objects, ${refetched.length} fetched again from the origin`);
    assert.deepEqual(refetched, [], 'objects in the newcomer\'s buckets came from their previous owner');
    const log = lab.squidAccessLog(3).filter((e) => mine.includes(e.url));
    const siblingHits = log.filter((e) => e.hierarchy === 'SIBLING_HIT' && e.peer === ROUTER_ADDRESS);
    assert.equal(siblingHits.length, mine.length, `newcomer's access.log: ${JSON.stringify(log.slice(0, 3))}`);

    // The second replay's lines are those after the first's (all there: counted above); a time filter would catch
    // the first replay's last lines, which end within the same second.
    const logged = lab.squidAccessLog(3).length;
    const again = await lab.curlMany(mine, { timeoutMs: 10_000 });
    assert.deepEqual(again.filter((r) => r.status !== 200).map((r) => r.url), []);
    // Squid writes access.log lines when each transaction ends: wait (bounded) until all are there.
    const own = (await waitUntil(async () => lab.squidAccessLog(3).slice(logged).filter((e) => mine.includes(e.url)),
      (l) => l.length >= mine.length, { timeoutMs: 10_000, intervalMs: 200, what: 'the second replay in access.log' })).value;
    const notOwn = own.filter((e) => !/HIT/.test(e.result) || e.hierarchy !== 'HIER_NONE');
    assert.deepEqual(notOwn, [], 'the second replay is served from the newcomer\'s own cache');
    const final = await counts();
    assert.ok(mine.every((u) => countOf(final, u) === 1));

    const status = await getJson<StatusView>(lab, 'status');
    const w = status.warmup ?? {};
    console.log(`broker: ${JSON.stringify(w)}`);
    assert.ok((w['http-relayed'] ?? 0) >= mine.length);
  });

  it('a non-member gets ICP DENIED and HTTP 403, and nothing is fetched for it', async () => {
    const url = `http://${originAddressForBucket(7)}/warm/${tag}/stranger`;
    const icp = await lab.exec(lab.ns.client, process.execPath, ['-e', ICP_QUERY_SCRIPT, url], { timeoutMs: 10_000 });
    assert.equal(icp.stdout.trim(), 'DENIED');
    const http = await lab.curl(url, { proxy: `http://${ROUTER_ADDRESS}:3128` });
    assert.equal(http.status, 403);
    assert.equal(countOf(await counts(), url), 0, 'the origin never saw it');
    const w = (await getJson<StatusView>(lab, 'status')).warmup ?? {};
    assert.ok((w['icp-denied'] ?? 0) >= 1 && (w['http-denied'] ?? 0) >= 1);
  });
});
