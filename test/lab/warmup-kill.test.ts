// A warm source dies in the middle of a warm-up, with Debian's Squid 5.7 on all three engines: engines 1 and 2 cache
// one object per bucket, engine 3 is hot-inserted and fetches half of its objects through the broker; then engine 1's
// Squid is killed and the newcomer fetches the other half. No client request fails; the broker asks the dead source
// at most once (the query that meets its closed port, unless the health probes saw it die first) and never waits for
// it, so no request waits longer than its origin fetch plus a MISS answered at once; engine 2 is still asked for each
// of its former objects. What came through the broker is not fetched from the origin; everything else is fetched once.
// Latency is printed, not asserted (the machine is shared).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { skipE2e } from '../e2e/harness.js';
import { PEER_TIMEOUT_MS, split, startWarmupLab, type WarmupLab } from './warmup-lab.js';

describe('lab: a warm source killed in the middle of a warm-up (Squid 5.7)', { skip: skipE2e }, () => {
  let w: WarmupLab;
  before(async () => {
    w = await startWarmupLab('warmkill', `${process.pid}`);
  });
  after(async () => {
    await w?.lab.destroy();
  });

  it('no client request fails, and the broker stops asking the dead source at once', async () => {
    const { lab, urls } = w;
    const first = await lab.curlMany(urls, { timeoutMs: 10_000 });
    assert.deepEqual(
      first.filter((r) => r.status !== 200).map((r) => r.url),
      [],
    );

    const { old, now, newcomer } = await w.insertNewcomer();
    const fromOne = urls.filter((_, b) => now[b] === newcomer && old[b] === lab.engineAddress(1));
    const fromTwo = urls.filter((_, b) => now[b] === newcomer && old[b] === lab.engineAddress(2));
    assert.ok(
      fromOne.length >= 20 && fromTwo.length >= 20,
      `gained ${fromOne.length} from engine 1, ${fromTwo.length} from engine 2`,
    );
    const half = (l: string[]): [string[], string[]] => [l.slice(0, l.length >> 1), l.slice(l.length >> 1)];
    const [oneBefore, oneAfter] = half(fromOne);
    const [twoBefore, twoAfter] = half(fromTwo);

    // Before the kill: both sources are asked about each of their objects.
    const c0 = await w.broker();
    const warm = [...oneBefore, ...twoBefore];
    const logged0 = lab.squidAccessLog(3).length;
    const warmed = await lab.curlMany(warm, { timeoutMs: 10_000 });
    assert.deepEqual(
      warmed.filter((r) => r.status !== 200).map((r) => r.url),
      [],
    );
    const c1 = await w.broker();
    const d01 = (k: string): number => (c1[k] ?? 0) - (c0[k] ?? 0);
    assert.equal(d01('icp-received'), warm.length, `one ICP query per miss of the newcomer: ${JSON.stringify(c1)}`);
    assert.equal(
      d01('icp-source-hit') + d01('icp-source-timeout') + d01('icp-source-miss'),
      warm.length,
      JSON.stringify(c1),
    );
    const got0 = split(await w.newcomerLines(logged0, warm), warm);

    await lab.stopSquid(1, { kill: true });
    const logged1 = lab.squidAccessLog(3).length;
    // Interleaved, one at a time: engine 2's objects keep coming through the broker around the dead source's.
    const rest: string[] = [];
    for (let i = 0; i < Math.max(oneAfter.length, twoAfter.length); i++) {
      if (oneAfter[i] !== undefined) rest.push(oneAfter[i] as string);
      if (twoAfter[i] !== undefined) rest.push(twoAfter[i] as string);
    }
    const started = Date.now();
    const replay = await lab.curlMany(rest, { timeoutMs: 10_000 });
    const tookMs = Date.now() - started;
    assert.deepEqual(
      replay.filter((r) => r.status !== 200).map((r) => `${r.url} ${r.status} ${r.error ?? ''}`),
      [],
      'no client request failed',
    );
    const c2 = await w.broker();
    const d = (k: string): number => (c2[k] ?? 0) - (c1[k] ?? 0);
    const lines = await w.newcomerLines(logged1, rest);
    const one = split(lines, oneAfter);
    const two = split(lines, twoAfter);
    const elapsed = rest.map((u) => lines.get(u)?.elapsedMs ?? NaN).sort((a, b) => a - b);
    const elapsedOne = oneAfter.map((u) => lines.get(u)?.elapsedMs ?? NaN).sort((a, b) => a - b);
    console.log(
      `before the kill: ${warm.length} requests, ${got0.viaBroker.length} through the broker; after the kill: ` +
        `${rest.length} requests in ${tookMs} ms; newcomer's elapsed ms median ${elapsed[elapsed.length >> 1]}, max ${elapsed[elapsed.length - 1]}, ` +
        `for the dead source's objects median ${elapsedOne[elapsedOne.length >> 1]}, max ${elapsedOne[elapsedOne.length - 1]} ` +
        `(peerTimeout ${PEER_TIMEOUT_MS} ms, icp_query_timeout 200 ms); Squid's ICP timeouts ${one.icpTimeout.length + two.icpTimeout.length}; ` +
        `broker: source failed ${d('icp-source-failed')}, no live source ${d('icp-miss-no-live-source')}, engine 2: hit ${d('icp-source-hit')}, ` +
        `timed out ${d('icp-source-timeout')}, miss ${d('icp-source-miss')}`,
    );

    const counters = JSON.stringify(c2);
    assert.equal(d('icp-received'), rest.length, `one ICP query per miss of the newcomer: ${counters}`);
    // The dead source is asked at most once, then never again; every query for its objects is answered MISS without
    // waiting for anyone (a hard failure is at once: ICMP port unreachable), never after peerTimeout.
    assert.ok(d('icp-source-failed') <= 1, counters);
    assert.equal(d('icp-source-failed') + d('icp-miss-no-live-source'), oneAfter.length, counters);
    assert.deepEqual(one.viaBroker, [], 'nothing came through the broker from the dead source');
    // Engine 2 is still asked about each of its former objects (a HIT, or on a loaded machine a late answer).
    assert.equal(d('icp-source-hit') + d('icp-source-timeout') + d('icp-source-miss'), twoAfter.length, counters);
    assert.ok(two.direct.length <= d('icp-source-timeout') + d('icp-source-miss'), counters);
    assert.equal(d('http-relayed'), two.viaBroker.length, counters);

    const c = await w.originCounts();
    const viaBroker = [...got0.viaBroker, ...two.viaBroker];
    assert.deepEqual(
      viaBroker.filter((u) => c(u) !== 1),
      [],
      'what came through the broker was not fetched from the origin',
    );
    assert.deepEqual(
      [...warm, ...rest].filter((u) => !viaBroker.includes(u) && c(u) !== 2),
      [],
      'everything else was fetched from the origin once',
    );
    assert.ok(
      got0.viaBroker.length > 0 && two.viaBroker.length > 0,
      'the warm-up served the newcomer before and after the kill',
    );
  });
});
