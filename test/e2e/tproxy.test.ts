// Squid's documented fully transparent set-up, end to end with Debian's Squid 5.7 in TPROXY mode and the daemon's nft
// data plane: service 80 (destination port 80, on the client side c0) sends the client's connection to an engine;
// Squid fetches from the origin with the client's own address; service 90 (source port 80, on the origin side o0)
// sends the origin's answers back to that engine. The origin sees the client, the client gets its page.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';
import type { BucketsView, StatusView } from '../../src/admin/api-types.js';
import { CLIENT_ADDRESS, bucketOf, createLab, originAddresses, type Lab } from '../lab/lab.js';
import { TPROXY_SERVICES } from '../lab/squid.js';
import { getJson, http, kernelBuckets, shares, skipE2e, startDaemon, waitUntil, writeLabConfig } from './harness.js';

function writeTproxyConfig(lab: Lab): string {
  const service = (id: number, iface: string, extra: string[]): string[] => [
    `  - id: ${id}`,
    '    protocol: tcp',
    '    ports: [80]',
    ...extra,
    '    mode: consistent',
    `    clientInterfaces: [${iface}]`,
    // Squid 5.7 never echoes a Receive ID: usable at its first HERE_I_AM, so the test does not wait 10 s more.
    '    engines: { allow: [192.0.2.0/24], lenientReceiveId: 1 }',
  ];
  return writeLabConfig(lab, 'tproxy', {
    services: [...service(80, 'c0', []), ...service(90, 'o0', ['    portsSource: true', '    priority: 240'])],
  });
}

describe("e2e: Squid's TPROXY pair (services 80 and 90)", { skip: skipE2e }, () => {
  let lab: Lab;
  const tag = `${process.pid}-${Date.now()}`;
  before(async () => {
    lab = await createLab({ engines: 2, tproxy: true, name: 'tproxy' });
    await lab.startOrigin();
  });
  after(async () => {
    await lab?.destroy();
  });

  it("the origin sees the client's own address and the client gets its page, for every bucket", async () => {
    const daemon = await startDaemon(lab, writeTproxyConfig(lab));
    await Promise.all([1, 2].map((i) => lab.startSquid(i, { interception: 'tproxy', wccpServices: TPROXY_SERVICES })));
    const engines = [lab.engineAddress(1), lab.engineAddress(2)];
    // Each buckets read lists the data plane's counter sets with nft: on a loaded machine one may miss curl's 3 s.
    let misses = 0;
    const read = async (id: number): Promise<BucketsView | null> => {
      const r = await http(lab, 'GET', `services/${id}/buckets`);
      if (r.status !== 200 && misses++ === 0) {
        console.log(
          `GET services/${id}/buckets: HTTP ${r.status} ${r.body.slice(0, 300)}; wccpd ${daemon.proc.running() ? 'runs' : 'exited'}:\n${daemon.proc.output().slice(-3000)}`,
        );
      }
      return r.status === 200 ? (JSON.parse(r.body) as BucketsView) : null;
    };
    const tables = async (): Promise<BucketsView[]> => {
      const [a, b] = [await read(80), await read(90)];
      return a !== null && b !== null ? [a, b] : [];
    };
    const ready = await waitUntil(
      tables,
      (ts) =>
        ts.length === 2 &&
        ts.every((t) => !t.buckets.includes(null) && engines.every((e) => (shares(t.buckets).get(e) ?? 0) > 0)),
      { timeoutMs: 60_000, intervalMs: 200, what: 'both services with all 256 buckets over both Squid engines' },
    );
    const [t80, t90] = ready.value as [BucketsView, BucketsView];
    // mode consistent: both directions of a connection hash to the same bucket, and the bucket names the same engine.
    assert.deepEqual(t90.buckets, t80.buckets);
    // The kernel has a table only once the data plane applied it, one service after the other. Service 80 steers a
    // client's connection at its SYN and service 90 Squid's connection at the origin's SYN-ACK: a page fetched while
    // the kernel's two tables disagree on its bucket reaches two engines and is lost. Fetch once both are in force.
    await waitUntil(
      async () => [await kernelBuckets(lab, 80), await kernelBuckets(lab, 90)],
      ([k80, k90]) => isDeepStrictEqual(k80, t80.buckets) && isDeepStrictEqual(k90, t90.buckets),
      { timeoutMs: 15_000, intervalMs: 100, what: "the kernel's bucket maps of services 80 and 90 to be the API's" },
    );

    // What Squid 5.7 announced: 0x12 = Destination IP Hash | Ports Defined; 0x31 = Source IP Hash | Ports Defined |
    // Ports Source.
    const status = await getJson<StatusView>(lab, 'status');
    const info = (id: number) => status.services.find((s) => s.id === id)?.serviceInfo;
    assert.deepEqual(info(80), {
      type: 'dynamic',
      priority: 240,
      protocol: 6,
      flags: 0x12,
      ports: [80],
      portsSource: false,
    });
    assert.deepEqual(info(90), {
      type: 'dynamic',
      priority: 240,
      protocol: 6,
      flags: 0x31,
      ports: [80],
      portsSource: true,
    });

    const before80 = t80.counters;
    const before90 = t90.counters;
    const origins = originAddresses();
    const results = await lab.curlMany(
      origins.map((a) => `http://${a}/tproxy/${tag}/${a}`),
      { timeoutMs: 5000 },
    );
    const wrong = origins.flatMap((addr, i) => {
      const r = results[i];
      const want = t80.buckets[bucketOf(addr)] === engines[0] ? 'engine1' : 'engine2';
      return r?.status === 200 &&
        r.engine === want &&
        r.fromOrigin &&
        r.originLocal === addr &&
        r.originRemote === CLIENT_ADDRESS
        ? []
        : [
            `${addr}: HTTP ${r?.status} via ${r?.engine ?? 'nobody'} (want ${want}), origin saw ${r?.originRemote ?? '?'} ${r?.error ?? ''}`,
          ];
    });
    // A table change while the pages were fetched would explain a lost or misdirected page: say so with the failure.
    const afterRun = (await waitUntil(tables, (ts) => ts.length === 2, { timeoutMs: 15_000, what: 'both tables' }))
      .value as [BucketsView, BucketsView];
    const changes =
      `change numbers ${t80.changeNumber}/${t90.changeNumber} before the pages, ` +
      `${afterRun[0].changeNumber}/${afterRun[1].changeNumber} after`;
    const served = new Set(results.map((r) => r.engine));
    console.log(
      `TPROXY pair: ${origins.length - wrong.length}/${origins.length} pages through ${[...served].join('+')} ` +
        `with the origin seeing ${CLIENT_ADDRESS} (${changes})`,
    );
    assert.deepEqual(wrong, [], `pages not served as the table says (${changes})`);
    assert.deepEqual([...served].sort(), ['engine1', 'engine2']);

    // Squid served them as TPROXY interceptions of the client's connections.
    const logged = [1, 2].flatMap((i) => lab.squidAccessLog(i)).filter((e) => e.url.includes(`/tproxy/${tag}/`));
    assert.equal(logged.length, 256);
    assert.deepEqual([...new Set(logged.map((e) => `${e.client} ${e.hierarchy}`))], [`${CLIENT_ADDRESS} ORIGINAL_DST`]);

    // The kernel counted the client's connections under service 80 and Squid's connections to the origins (claimed
    // at the origin's SYN-ACK) under service 90, in the same buckets.
    const counted = await waitUntil(
      tables,
      (ts) =>
        ts.length === 2 &&
        ts.every(
          (t, k) =>
            t.counters !== null &&
            t.counters.every((c, b) => c.connections - ((k === 0 ? before80 : before90)?.[b]?.connections ?? 0) >= 1),
        ),
      { timeoutMs: 15_000, intervalMs: 300, what: 'a new connection counted in each bucket of both services' },
    );
    const [a80, a90] = counted.value as [BucketsView, BucketsView];
    const moved = (t: BucketsView, was: BucketsView['counters']): number =>
      (t.counters ?? []).reduce((n, c, b) => n + c.connections - (was?.[b]?.connections ?? 0), 0);
    console.log(`counted: service 80 ${moved(a80, before80)} connections, service 90 ${moved(a90, before90)}`);
    assert.equal(moved(a80, before80), 256);
  });
});
