// Redirection through the running daemon's nft data plane with real Squid engines: for every bucket (one origin
// address per bucket, 256 in all), a new connection from the client reaches exactly the engine that the published
// table, the which API and `wccpctl which` name. First with two engines, then with a third one added.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';
import type { BucketsView } from '../../src/admin/api-types.js';
import { bucketOf, createLab, originAddresses, type Lab } from '../lab/lab.js';
import {
  describeShares,
  getBuckets,
  kernelBuckets,
  shares,
  skipE2e,
  startDaemon,
  waitUntil,
  whichMany,
  wccpctlWhich,
  writeConfig,
} from './harness.js';

describe('e2e: connections reach the engine the table names', { skip: skipE2e }, () => {
  let lab: Lab;
  const tag = `${process.pid}-${Date.now()}`;
  before(async () => {
    lab = await createLab({ engines: 3, name: 'redir' });
    await lab.startOrigin();
  });
  after(async () => {
    await lab?.destroy();
  });

  /** Squid's visible_hostname engine<i> -> its address. */
  const engineByName = (name: string | undefined): string | null => {
    const m = /^engine(\d+)$/.exec(name ?? '');
    return m ? lab.engineAddress(Number(m[1])) : null;
  };

  /** Checks the data plane (asserts) and returns what the which API and wccpctl got wrong (asserted at the end). */
  async function checkAll(n: number): Promise<string[]> {
    const addrs = Array.from({ length: n }, (_, i) => lab.engineAddress(i + 1));
    const ready = await waitUntil(
      () => getBuckets(lab),
      (v) => addrs.every((a) => (shares(v.buckets).get(a) ?? 0) > 0) && !v.buckets.includes(null),
      { timeoutMs: 30_000, intervalMs: 200, what: `all 256 buckets over ${n} Squid engines` },
    );
    const table: BucketsView = ready.value;
    assert.equal(table.buckets.length, 256);
    // The API shows a table as wccpd decides it; the kernel has it once the data plane applied it.
    await waitUntil(
      () => kernelBuckets(lab, 0),
      (k) => isDeepStrictEqual(k, table.buckets),
      { timeoutMs: 15_000, intervalMs: 100, what: "the kernel's bucket map to be the API's table" },
    );

    const origins = originAddresses();
    const which = await whichMany(lab, origins);
    const results = await lab.curlMany(
      origins.map((a) => `http://${a}/redirect/${tag}/${n}/${a}`),
      { timeoutMs: 5000 },
    );
    const after = await getBuckets(lab);
    assert.equal(after.changeNumber, table.changeNumber, 'the table changed while the test ran');
    // The kernel's per-bucket counters (API `counters`, the page's hover) saw each new connection in its bucket.
    const counted = await waitUntil(
      () => getBuckets(lab),
      (v) =>
        v.counters !== null &&
        table.counters !== null &&
        v.counters.every((c, b) => c.connections - (table.counters?.[b]?.connections ?? 0) >= 1),
      { timeoutMs: 5000, intervalMs: 300, what: 'a new connection counted in each of the 256 buckets' },
    );
    assert.equal(counted.value.counters?.length, 256);

    // The data plane: each connection reached the engine the published table names.
    let ok = 0;
    const mismatches: string[] = [];
    origins.forEach((addr, i) => {
      const b = bucketOf(addr);
      const expected = table.buckets[b] ?? null;
      const served = engineByName(results[i]?.engine);
      if (results[i]?.status !== 200 || served !== expected) {
        mismatches.push(
          `${addr} (bucket ${b}): table ${expected}, served by ${served ?? 'nobody'} (HTTP ${results[i]?.status} ${results[i]?.error ?? ''})`,
        );
      } else ok++;
    });
    // The which API, all 256, and wccpctl as an admin runs it on one address per 32 buckets (each run starts node).
    const whichWrong: string[] = [];
    origins.forEach((addr, i) => {
      const b = bucketOf(addr);
      const w = which[i];
      if (w?.bucket !== b || w.engine !== (table.buckets[b] ?? null))
        whichWrong.push(`which ${addr}: ${JSON.stringify(w)}, table bucket ${b} -> ${table.buckets[b] ?? null}`);
    });
    const sample = origins.filter((_, b) => b % 32 === 7);
    const ctlWrong: string[] = [];
    for (const addr of sample) {
      const b = bucketOf(addr);
      try {
        const v = await wccpctlWhich(lab, addr);
        if (v.bucket !== b || v.engine !== (table.buckets[b] ?? null))
          ctlWrong.push(`wccpctl which ${addr}: ${JSON.stringify(v)}, table says ${table.buckets[b] ?? null}`);
      } catch (e) {
        ctlWrong.push((e as Error).message);
      }
    }
    console.log(
      `${n} engines (${describeShares(table.buckets)}, change ${table.changeNumber}): ${origins.length} ` +
        `destinations, ${ok} reached the engine the table names, ${mismatches.length} mismatches; which API disagreed on ` +
        `${whichWrong.length}/256; wccpctl which disagreed on ${ctlWrong.length}/${sample.length}`,
    );
    assert.deepEqual(mismatches, [], 'connections that did not reach the engine the table names');
    // Every engine really served its buckets (not one engine taking all).
    for (const a of addrs) {
      const served = results.filter((r) => engineByName(r.engine) === a).length;
      assert.equal(served, shares(table.buckets).get(a), `requests served by ${a}`);
    }
    return [...whichWrong.slice(0, 3), ...ctlWrong.slice(0, 3)];
  }

  it('two Squid engines, then three: 0 mismatches over all 256 buckets', async () => {
    await startDaemon(lab, writeConfig(lab, 'wccpd'));
    await Promise.all([lab.startSquid(1), lab.startSquid(2)]);
    const wrong2 = await checkAll(2);
    await lab.startSquid(3);
    const wrong3 = await checkAll(3);
    assert.deepEqual([...wrong2, ...wrong3], [], 'the which API and wccpctl which name the engine of the table');
  });
});
