// Hot insertion with warm-up, with Debian's Squid 5.7 on both sides: two engines started together cache one object
// per bucket (and warm nothing from each other), a third is hot-inserted, the same objects are requested again. The
// newcomer asks the broker about every miss; each of its objects comes from its previous owner through the broker
// (SIBLING_HIT, the origin's count unchanged) unless a timeout the broker or Squid logged sent it to the origin once;
// a second replay is served from the newcomer's own cache. A non-member gets ICP DENIED and HTTP 403, and nothing is
// fetched for it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { originAddressForBucket, ROUTER_ADDRESS } from './lab.js';
import { getJson, skipE2e } from '../e2e/harness.js';
import type { StatusView } from '../../src/admin/api-types.js';
import { split, startWarmupLab, type WarmupLab } from './warmup-lab.js';

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
  let w: WarmupLab;
  before(async () => {
    w = await startWarmupLab('warm', `${process.pid}`);
  });
  after(async () => {
    if (w && process.env.WARM_DEBUG)
      console.log(
        `wccpd running=${w.daemon.proc.running()}; its output:\n${w.daemon.proc
          .output()
          .split('\n')
          .filter((l) => !l.includes('"level":30'))
          .join('\n')
          .slice(-6000)}`,
      );
    await w?.lab.destroy();
  });

  it("serves the newcomer's buckets from their previous owners, not the origin; then from its own cache", async () => {
    const { lab, urls } = w;
    const first = await lab.curlMany(urls, { timeoutMs: 10_000 });
    assert.deepEqual(
      first.filter((r) => r.status !== 200).map((r) => r.url),
      [],
    );
    const before = await w.originCounts();
    assert.ok(
      urls.every((u) => before(u) === 1),
      'each object fetched from the origin once',
    );

    const { now, newcomer } = await w.insertNewcomer();
    const mine = urls.filter((_, b) => now[b] === newcomer);
    const c0 = await w.broker();
    const logged = lab.squidAccessLog(3).length;
    const replay = await lab.curlMany(urls, { timeoutMs: 10_000 });
    assert.deepEqual(
      replay.filter((r) => r.status !== 200).map((r) => r.url),
      [],
      'no client request failed',
    );
    const c1 = await w.broker();
    const d = (k: string): number => (c1[k] ?? 0) - (c0[k] ?? 0);
    const after = await w.originCounts();
    const got = split(await w.newcomerLines(logged, mine), mine);
    const counters = `broker: ${JSON.stringify(c1)}`;
    console.log(
      `newcomer's buckets: ${mine.length} objects; through the broker ${got.viaBroker.length}, after an ICP timeout ` +
        `${got.icpTimeout.length}, direct after a MISS ${got.direct.length}; broker: source hit ${d('icp-source-hit')}, ` +
        `source timeout ${d('icp-source-timeout')}, source miss ${d('icp-source-miss')}`,
    );

    // The newcomer asked the broker about every miss, and the broker asked the previous owner about each (the other
    // engines hold their own objects: local hits, no query).
    assert.equal(d('icp-received'), mine.length, `one ICP query per miss of the newcomer; ${counters}`);
    assert.equal(
      d('icp-source-hit') + d('icp-source-timeout') + d('icp-source-miss') + d('icp-source-failed'),
      mine.length,
      counters,
    );
    // The previous owners hold every object fresh: none of them says MISS.
    assert.equal(d('icp-source-miss'), 0, counters);
    // Through the broker: not fetched from the origin again. Otherwise fetched once, and only because a timeout
    // intervened: the source's answer came after peerTimeout (the broker said MISS), or the broker's after Squid's
    // icp_query_timeout (TIMEOUT_ in its access.log).
    assert.deepEqual(
      got.viaBroker.filter((u) => after(u) !== 1),
      [],
      'objects through the broker came from their previous owner',
    );
    assert.deepEqual(
      [...got.icpTimeout, ...got.direct].filter((u) => after(u) !== 2),
      [],
      'the others were fetched from the origin once',
    );
    assert.ok(
      got.direct.length <= d('icp-source-timeout'),
      `an origin fetch after an ICP MISS only when the source timed out; ${counters}`,
    );
    assert.equal(d('http-relayed'), got.viaBroker.length, counters);
    assert.ok(got.viaBroker.length > 0, 'the warm-up served the newcomer');

    // The second replay's lines are those after the first's (all there: counted above); a time filter would catch
    // the first replay's last lines, which end within the same second.
    const logged2 = lab.squidAccessLog(3).length;
    const again = await lab.curlMany(mine, { timeoutMs: 10_000 });
    assert.deepEqual(
      again.filter((r) => r.status !== 200).map((r) => r.url),
      [],
    );
    const own = [...(await w.newcomerLines(logged2, mine)).values()];
    const notOwn = own.filter((e) => !/HIT/.test(e.result) || e.hierarchy !== 'HIER_NONE');
    assert.deepEqual(notOwn, [], "the second replay is served from the newcomer's own cache");
    const final = await w.originCounts();
    assert.ok(
      mine.every((u) => final(u) === after(u)),
      'the second replay fetched nothing',
    );
  });

  it('a non-member gets ICP DENIED and HTTP 403, and nothing is fetched for it', async () => {
    const { lab } = w;
    const url = `http://${originAddressForBucket(7)}/long/warm/${process.pid}/stranger`;
    const icp = await lab.exec(lab.ns.client, process.execPath, ['-e', ICP_QUERY_SCRIPT, url], { timeoutMs: 10_000 });
    assert.equal(icp.stdout.trim(), 'DENIED');
    const http = await lab.curl(url, { proxy: `http://${ROUTER_ADDRESS}:3128` });
    assert.equal(http.status, 403);
    assert.equal((await w.originCounts())(url), 0, 'the origin never saw it');
    const s = (await getJson<StatusView>(lab, 'status')).warmup ?? {};
    assert.ok((s['icp-denied'] ?? 0) >= 1 && (s['http-denied'] ?? 0) >= 1);
  });
});
