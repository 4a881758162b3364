// IPv6 connections cached too (issue 36), through the running daemon's nft data plane, in the dual-stack lab: Debian's
// Squid 5.7 engines register over IPv4, and with `families: [ipv4, ipv6]` each of 256 IPv6 destinations (one per
// bucket) reaches the engine the published table names, with two engines, after a third is inserted hot, after one is
// killed (its buckets heal to the others, IPv6 included), and with none left the service bypasses (IPv6 direct). Live
// IPv6 downloads keep their engine through a rebalance (a drain moves their buckets).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';
import type { BucketsView } from '../../src/admin/api-types.js';
import {
  bucketOf6,
  CLIENT_ADDRESS6,
  createLab,
  originAddresses6,
  originAddressForBucket6,
  type Lab,
  type LabProcess,
} from '../lab/lab.js';
import {
  describeShares,
  getBuckets,
  getStatus,
  http,
  kernelBuckets,
  shares,
  skipE2e,
  startDaemon,
  TOKEN,
  waitUntil,
  whichMany,
  writeLabConfig,
} from './harness.js';

// A long download: 6 MB over 8 s, sent in pieces every 100 ms, never cached.
const LONG_BYTES = 6_000_000;
const LONG_MS = 8000;

describe('e2e: IPv6 connections reach the engine the table names', { skip: skipE2e }, () => {
  let lab: Lab;
  const tag = `${process.pid}-${Date.now()}`;
  before(async () => {
    lab = await createLab({ engines: 3, name: 'v6', ipv6: true });
    await lab.startOrigin();
    await startDaemon(
      lab,
      writeLabConfig(lab, 'wccpd', {
        services: [
          '  - id: 0',
          '    failMode: open',
          '    clientInterfaces: [c0]',
          '    families: [ipv4, ipv6]',
          '    engines:',
          '      allow: [192.0.2.0/24]',
          '      lenientReceiveId: 2',
        ],
      }),
    );
  });
  after(async () => {
    await lab?.destroy();
  });

  /** Squid's visible_hostname engine<i> -> its IPv4 address (the table's name for it). */
  const engineByName = (name: string | undefined): string | null => {
    const m = /^engine(\d+)$/.exec(name ?? '');
    return m ? lab.engineAddress(Number(m[1])) : null;
  };
  const indexOf = (address: string | null): number => Number(address?.split('.')[3] ?? 0) - 10;

  /** Waits until the table spreads all 256 buckets over exactly `engines` (indexes) and the kernel applies it. */
  async function settled(engines: readonly number[], what: string): Promise<BucketsView> {
    const want = engines.map((i) => lab.engineAddress(i)).sort();
    const ready = await waitUntil(
      () => getBuckets(lab),
      (v) => !v.buckets.includes(null) && isDeepStrictEqual([...shares(v.buckets).keys()].sort(), want),
      { timeoutMs: 45_000, intervalMs: 200, what: `all 256 buckets over engines ${engines.join(', ')} (${what})` },
    );
    await waitUntil(
      () => kernelBuckets(lab, 0),
      (k) => isDeepStrictEqual(k, ready.value.buckets),
      { timeoutMs: 15_000, intervalMs: 100, what: "the kernel's bucket map to be the API's table" },
    );
    return ready.value;
  }

  /**
   * One new IPv6 connection per bucket: each served by the engine the table names, fetched by that engine over IPv6,
   * and the which API agreeing. Asserts 0 mismatches.
   */
  async function checkAll6(engines: readonly number[], what: string): Promise<void> {
    const table = await settled(engines, what);
    const origins = originAddresses6();
    const which = await whichMany(lab, origins);
    const results = await lab.curlMany(
      origins.map((a) => `http://[${a}]/v6/${tag}/${what.replace(/\W+/g, '-')}/${a}`),
      { timeoutMs: 5000 },
    );
    assert.equal((await getBuckets(lab)).changeNumber, table.changeNumber, 'the table changed while the test ran');
    const mismatches: string[] = [];
    origins.forEach((addr, b) => {
      const expected = table.buckets[b] ?? null;
      const r = results[b];
      const served = engineByName(r?.engine);
      const fetchedBy = expected === null ? null : lab.engineAddress6(indexOf(expected));
      if (r?.status !== 200 || served !== expected || r.originRemote !== fetchedBy)
        mismatches.push(
          `${addr} (bucket ${b}): table ${expected}, served by ${served ?? 'nobody'}, origin saw ` +
            `${r?.originRemote ?? '-'} (HTTP ${r?.status} ${r?.error ?? ''} ${r?.squidError ?? ''})`,
        );
    });
    const whichWrong = origins.flatMap((addr, b) =>
      which[b]?.bucket === b && which[b]?.engine === (table.buckets[b] ?? null)
        ? []
        : [`which ${addr}: ${JSON.stringify(which[b])}, table bucket ${b} -> ${table.buckets[b] ?? null}`],
    );
    console.log(
      `${what}: ${describeShares(table.buckets)} (change ${table.changeNumber}): 256 IPv6 destinations, ` +
        `${256 - mismatches.length} reached the engine the table names, ${mismatches.length} mismatches; which API ` +
        `disagreed on ${whichWrong.length}/256`,
    );
    assert.deepEqual(mismatches.slice(0, 10), [], 'IPv6 connections that did not reach the engine the table names');
    assert.equal(mismatches.length, 0);
    assert.deepEqual(whichWrong.slice(0, 5), [], 'the which API names the engine of the table for IPv6');
    for (const i of engines) {
      const served = results.filter((r) => engineByName(r.engine) === lab.engineAddress(i)).length;
      assert.equal(served, shares(table.buckets).get(lab.engineAddress(i)), `requests served by engine ${i}`);
    }
  }

  it('256 IPv6 destinations with two Squid engines, then a third inserted hot: 0 mismatches', async () => {
    assert.equal(bucketOf6(originAddressForBucket6(77)), 77);
    await Promise.all([lab.startSquid(1), lab.startSquid(2)]);
    await checkAll6([1, 2], 'two engines');
    await lab.startSquid(3);
    await checkAll6([1, 2, 3], 'engine 3 inserted');
  });

  it('live IPv6 downloads keep their engine while a drain moves their buckets', async () => {
    const before = await settled([1, 2, 3], 'before the drain');
    const e1 = lab.engineAddress(1);
    const owned = before.buckets.flatMap((x, b) => (x === e1 ? [b] : []));
    const others = before.buckets.flatMap((x, b) => (x !== e1 ? [b] : []));
    const picks = [owned[0], owned[Math.floor(owned.length / 2)], others[0], others.at(-1)].map((b) => b ?? -1);
    assert.ok(picks.every((b) => b >= 0));
    const downloads = picks.map((b, i): { bucket: number; proc: LabProcess } => ({
      bucket: b,
      proc: lab.spawn(lab.ns.client, 'curl', [
        '-sS',
        '-g',
        '--noproxy',
        '*',
        '--max-time',
        '60',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code} %{size_download} %header{x-cache}\n',
        `http://[${originAddressForBucket6(b)}]/slow/${LONG_BYTES}/${LONG_MS}/${tag}/${i}`,
      ]),
    }));
    await new Promise((r) => setTimeout(r, 1500));
    const d = await http(lab, 'POST', `services/0/engines/${e1}/drain`, TOKEN);
    assert.equal(d.status, 200, `drain ${e1}: HTTP ${d.status} ${d.body}`);
    const drained = await settled([2, 3], 'engine 1 drained');
    // New IPv6 connections to the moved buckets go to their new engine at once.
    const moved = picks.slice(0, 2);
    const fresh = await lab.curlMany(
      moved.map((b) => `http://[${originAddressForBucket6(b)}]/nocache/after-drain/${tag}/${b}`),
      { timeoutMs: 5000 },
    );
    assert.deepEqual(
      fresh.map((r) => engineByName(r.engine)),
      moved.map((b) => drained.buckets[b]),
      'new connections of the moved buckets reach their new engine',
    );
    const ends = await Promise.all(
      downloads.map(async (x) => {
        await x.proc.exited;
        return x.proc.output().trim();
      }),
    );
    console.log(
      `drain under 4 live IPv6 downloads (2 on engine 1, moved to ${moved.map((b) => drained.buckets[b]).join(', ')}): ` +
        ends.join(' | '),
    );
    ends.forEach((line, i) => {
      const owner = indexOf(before.buckets[picks[i] ?? 0] ?? null);
      assert.equal(line, `200 ${LONG_BYTES} MISS from engine${owner}`, `download ${i} (bucket ${picks[i]})`);
    });
    const u = await http(lab, 'POST', `services/0/engines/${e1}/undrain`, TOKEN);
    assert.equal(u.status, 200, `undrain ${e1}: HTTP ${u.status} ${u.body}`);
  });

  it("a killed engine's buckets heal to the others, IPv6 included: 0 mismatches", async () => {
    await settled([1, 2, 3], 'engine 1 undrained');
    await lab.stopSquid(2, { kill: true });
    await checkAll6([1, 3], 'engine 2 killed');
  });

  it('with no engine left the service bypasses: IPv6 connections go direct', async () => {
    await Promise.all([lab.stopSquid(1, { kill: true }), lab.stopSquid(3, { kill: true })]);
    await waitUntil(
      () => getBuckets(lab),
      (v) => v.buckets.every((b) => b === null),
      { timeoutMs: 45_000, intervalMs: 200, what: 'no bucket assigned after the last engine died' },
    );
    await waitUntil(
      () => kernelBuckets(lab, 0),
      (k) => k.every((b) => b === null),
      { timeoutMs: 15_000, intervalMs: 100, what: 'the kernel to forward every bucket normally' },
    );
    const svc = (await getStatus(lab)).services.find((s) => s.id === 0);
    assert.equal(svc?.state, 'bypass', `service 0 in /status: ${JSON.stringify(svc)}`);
    const results = await lab.curlMany(
      originAddresses6().map((a) => `http://[${a}]/bypass/${tag}/${a}`),
      { timeoutMs: 5000 },
    );
    const wrong = results.filter(
      (r) => r.status !== 200 || r.engine !== undefined || r.originRemote !== CLIENT_ADDRESS6,
    );
    assert.deepEqual(
      wrong.slice(0, 5).map((r) => `${r.url}: ${r.status} ${r.engine ?? ''} ${r.originRemote ?? ''} ${r.error ?? ''}`),
      [],
      'every IPv6 connection went direct (the origin saw the client)',
    );
  });
});
