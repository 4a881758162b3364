// Two gateways, one cache farm (docs/ha.md): gateways a and b each run wccpd (nft data plane, mode consistent),
// keepalived (VRRP: the clients', engines' and upstream gateway addresses) and conntrackd (FTFW on a dedicated link);
// three Debian Squid engines register with both (one wccp2_router line each). Both gateways publish the same table
// through every membership change, read from both APIs; then the master fails (every link of it down) while long
// downloads and a steady request load run through it: the backup takes the addresses, no download breaks (not even
// those whose bucket moved to another engine before the failover, and whose mark conntrackd carried over), and new
// connections go to the engines the shared table names. Prints the failover time. Needs root, squid, nft,
// keepalived, conntrackd, tcpdump and curl (skips on a dev box, fails in CI).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BucketsView, StatusView } from '../../src/admin/api-types.js';
import { haveCommand, isRoot, need } from '../helpers/require.js';
import { engineAddress, originAddressForBucket } from './addresses.js';
import { HA_CLIENT, HA_TOKEN, HA_VIP, createHaLab, type GatewayName, type HaLab } from './ha-lab.js';
import { sleep } from './proc.js';
import type { LabProcess } from './process.js';

const skip = need(
  isRoot && ['squid', 'nft', 'curl', 'keepalived', 'conntrackd', 'tcpdump'].every(haveCommand),
  'root with squid, nft, curl, keepalived, conntrackd and tcpdump (gateway-pair lab)',
);

const WCCPD = [
  `--import`,
  import.meta.resolve('tsx'),
  fileURLToPath(new URL('../../src/cli/wccpd.ts', import.meta.url)),
];
const TRAFFIC = fileURLToPath(new URL('./traffic-client.mjs', import.meta.url));
const GATEWAYS = ['a', 'b'] as const;
const E = [1, 2, 3].map(engineAddress) as [string, string, string];
const engineOfName = (name: string | null | undefined): string | null =>
  name && /^engine\d$/.test(name) ? engineAddress(Number(name.slice(6))) : null;

/** Long downloads: 1.5 MB each over 24 s, in 100-ms pieces. */
const LONG_BYTES = 1_500_000;
const LONG_MS = 24_000;
// keepalived runs each notify script this late: the backup holds the addresses ~3 s before its script has run, so a
// connection that survives the failover survives it without the script (the backup's kernel has it already).
const NOTIFY_DELAY_MS = 3000;

describe('gateway pair: keepalived, conntrackd and two wccpd in mode consistent', { skip }, () => {
  let lab: HaLab;
  const runTag = `${process.pid}-${Date.now()}`;
  let changes = 0;

  async function get<T>(g: GatewayName, path: string): Promise<T> {
    const gw = lab.gw[g];
    const r = await lab.exec(
      gw.ns,
      'curl',
      ['-sS', '--noproxy', '*', '--max-time', '10', '-w', '\n%{http_code}', `${gw.api}/api/v1/${path}`],
      { allowFail: true, timeoutMs: 12_000 },
    );
    const cut = r.stdout.lastIndexOf('\n');
    assert.equal(r.stdout.slice(cut + 1), '200', `GET ${path} on gateway ${g}: ${r.stdout.slice(0, 300)} ${r.stderr}`);
    return JSON.parse(r.stdout.slice(0, cut)) as T;
  }

  async function setWeight(g: GatewayName, engine: string, weight: number): Promise<void> {
    const gw = lab.gw[g];
    const r = await lab.exec(
      gw.ns,
      'curl',
      [
        '-sS',
        '--noproxy',
        '*',
        '--max-time',
        '10',
        '-w',
        '\n%{http_code}',
        '-X',
        'POST',
        '-H',
        `Authorization: Bearer ${HA_TOKEN}`,
        '-H',
        'Content-Type: application/json',
        '--data',
        JSON.stringify({ weight }),
        `${gw.api}/api/v1/services/0/engines/${engine}/weight`,
      ],
      { allowFail: true, timeoutMs: 12_000 },
    );
    assert.match(r.stdout, /\n200$/, `weight of ${engine} on gateway ${g}: ${r.stdout} ${r.stderr}`);
  }

  const table = (g: GatewayName): Promise<BucketsView> => get<BucketsView>(g, 'services/0/buckets');
  const shares = (t: BucketsView): Map<string | null, number> => {
    const m = new Map<string | null, number>();
    for (const b of t.buckets) m.set(b, (m.get(b) ?? 0) + 1);
    return m;
  };
  const describeShares = (t: BucketsView): string =>
    [...shares(t)]
      .sort()
      .map(([k, v]) => `${k ?? 'none'}=${v}`)
      .join(' ');

  /**
   * One membership change seen by both gateways: waits (bounded) until both APIs serve a table that `ok` accepts and
   * both tables are equal, then checks that every bucket agrees and that each gateway's peer check says so.
   */
  async function bothAgree(
    what: string,
    ok: (t: BucketsView) => boolean,
    o: { change?: boolean } = {},
  ): Promise<BucketsView> {
    const timeoutMs = 30_000;
    const t0 = Date.now();
    let last: BucketsView[] = [];
    for (;;) {
      last = await Promise.all(GATEWAYS.map(table));
      const [ta, tb] = last as [BucketsView, BucketsView];
      if (ok(ta) && ok(tb) && ta.buckets.every((e, i) => e === tb.buckets[i])) break;
      if (Date.now() - t0 > timeoutMs) {
        assert.fail(
          `${what}: after ${timeoutMs} ms gateway a serves ${describeShares(ta)}, b ${describeShares(tb)}; ` +
            `${ta.buckets.filter((e, i) => e !== tb.buckets[i]).length} buckets differ`,
        );
      }
      await sleep(200);
    }
    const [ta] = last as [BucketsView, BucketsView];
    // Each gateway reads the other's table from its API (config `peers`) and says whether it agrees.
    for (const g of GATEWAYS) {
      const t1 = Date.now();
      for (;;) {
        const s = await get<StatusView>(g, 'status');
        const p = s.peers?.[0];
        if (p?.agrees === true && Date.parse(p.checkedAt) >= t1 - 100) break;
        if (Date.now() - t1 > 45_000) assert.fail(`${what}: gateway ${g}'s peer check: ${JSON.stringify(p)}`);
        await sleep(250);
      }
    }
    if (o.change !== false) changes++;
    console.log(
      `${o.change !== false ? `change ${changes}` : 'check'} (${what}): both gateways serve ${describeShares(ta)} ` +
        `after ${Date.now() - t0} ms`,
    );
    return ta;
  }

  /** The client's port-80 connections in gateway g's conntrack table: origin address -> engine mark bits, timeout. */
  async function clientConnections(g: GatewayName): Promise<Map<string, { mark: string; timeout: number }>> {
    const r = await lab.exec(lab.gw[g].ns, 'conntrack', ['-L', '-p', 'tcp', '--dport', '80', '-s', HA_CLIENT]);
    const out = new Map<string, { mark: string; timeout: number }>();
    for (const l of r.stdout.split('\n')) {
      const dst = /\bdst=(\S+)/.exec(l)?.[1];
      const mark = Number(/\bmark=(\d+)/.exec(l)?.[1] ?? 0);
      if (dst === undefined) continue;
      out.set(dst, {
        mark: `0x${((mark & 0xfff80000) >>> 0).toString(16).padStart(8, '0')}`,
        timeout: Number(l.split(/\s+/)[2]),
      });
    }
    return out;
  }

  /** Engine -> the fwmark wccpd routes to it, from the gateway's ip rules and their routing tables. */
  async function engineMarks(g: GatewayName): Promise<Map<string, string>> {
    const ns = lab.gw[g].ns;
    const rules = (await lab.exec(ns, 'ip', ['-4', 'rule', 'show', 'priority', '2048'])).stdout;
    const marks = new Map<string, string>();
    for (const m of rules.matchAll(/fwmark (0x[0-9a-f]+)\/0xfff80000 lookup (\d+)/g)) {
      const route = (await lab.exec(ns, 'ip', ['-4', 'route', 'show', 'table', m[2] ?? ''])).stdout;
      const via = /via (\S+)/.exec(route)?.[1];
      if (via !== undefined) marks.set(via, m[1] ?? '');
    }
    return new Map([...marks].sort());
  }

  const serves =
    (...engines: string[]) =>
    (t: BucketsView): boolean => {
      const s = shares(t);
      return engines.every((e) => (s.get(e) ?? 0) > 0) && [...s.keys()].every((k) => k !== null && engines.includes(k));
    };

  before(async () => {
    const t0 = performance.now();
    lab = await createHaLab({ engines: 3, notifyDelayMs: NOTIFY_DELAY_MS });
    await lab.startOrigin();
    // a first, and master before b starts: with nopreempt, whichever gateway's keepalived wins the first election
    // keeps the addresses, and on a loaded machine b's could start first.
    await lab.startHa('a');
    for (let i = 0; (await lab.vipHolder()) !== 'a'; i++) {
      if (i > 200) assert.fail('gateway a did not become the VRRP master within 20 s');
      await sleep(100);
    }
    await lab.startHa('b');
    await Promise.all(GATEWAYS.map((g) => lab.startWccpd(g, WCCPD)));
    assert.equal(await lab.vipHolder(), 'a');
    console.log(
      `gateway pair up (keepalived, conntrackd, wccpd on both; a is master): ${(performance.now() - t0).toFixed(0)} ms`,
    );
  });

  after(async () => {
    await lab?.destroy();
  });

  it('both gateways publish the same table through joins, a death, a return, weight changes and a restart', async () => {
    await Promise.all([lab.startSquid(1), lab.startSquid(2)]);
    await bothAgree('engines 1 and 2 join', serves(E[0], E[1]));
    await lab.startSquid(3);
    await bothAgree('engine 3 joins', serves(...E));
    await lab.killSquid(3);
    await bothAgree('engine 3 dies (Squid killed)', serves(E[0], E[1]));
    await lab.startSquid(3);
    await bothAgree('engine 3 returns', serves(...E));
    // An admin's weight is per gateway: set on one, the tables differ (and the peer check says so) until set on both.
    await setWeight('a', E[1], 20_000);
    const differs = await until("gateway a to see that b's table differs", async () => {
      const p = (await get<StatusView>('a', 'status')).peers?.[0];
      return p?.agrees === false && (await table('a')).buckets.filter((e) => e === E[1]).length === 128 ? p : null;
    });
    console.log(
      `engine 2 weight 20000 on a only: a's peer check says ${differs.services[0]?.differingBuckets} buckets differ`,
    );
    await setWeight('b', E[1], 20_000);
    const weighted = await bothAgree('engine 2 weight 20000 on both', (t) => shares(t).get(E[1]) === 128);
    // The backup's wccpd restarts: its engine slots start afresh, its table must not.
    await lab.gw.b.wccpd?.stop(10_000);
    await lab.startWccpd('b', WCCPD);
    const restarted = await until('gateway b to serve three engines again', async () => {
      const t = await table('b');
      return serves(...E)(t) ? t : null;
    });
    // The restarted gateway serves its persisted table and keeps the admin's weight, as it keeps a drain (docs/ha.md):
    // the next change is computed with it on b too, nothing to set again.
    const engines = await get<{ engines: { address: string; weight: number }[] }>('b', 'services/0/engines');
    const kept = engines.engines.find((e) => e.address === E[1])?.weight;
    console.log(`gateway b after its restart: ${describeShares(restarted)}; engine 2's weight there: ${kept}`);
    assert.equal(kept, 20_000, "engine 2's admin weight survived b's restart");
    const again = await bothAgree("gateway b's wccpd restarted", (t) => shares(t).get(E[1]) === 128);
    assert.deepEqual(again.buckets, weighted.buckets, 'the same members and weights give the same table as before');
    assert.ok(changes >= 6);
  });

  it('the master fails under load: the backup takes over, no long download breaks, new connections follow the shared table', async () => {
    const before = await bothAgree('before the failover', serves(...E), { change: false });
    // A connection's mark must mean the same engine on both gateways (conntrackd carries the mark, not the engine).
    const [marksA, marksB] = await Promise.all(GATEWAYS.map(engineMarks));
    console.log(
      `engine marks: a ${JSON.stringify(Object.fromEntries(marksA ?? []))}, b ${JSON.stringify(Object.fromEntries(marksB ?? []))}`,
    );
    assert.equal(marksA?.size, 3);
    assert.deepEqual(marksB, marksA, 'each engine has the same mark on both gateways');
    // Two long downloads per engine, on buckets it owns now; then engine 1 goes to weight 0: its buckets move to
    // engines 2 and 3, and its two downloads stay on it (stickiness), carried by the conntrack mark.
    const picks: { engine: string; bucket: number }[] = [];
    for (const e of E) {
      const owned = before.buckets.flatMap((x, b) => (x === e ? [b] : []));
      picks.push(
        { engine: e, bucket: owned[0] ?? -1 },
        { engine: e, bucket: owned[Math.floor(owned.length / 2)] ?? -1 },
      );
    }
    assert.ok(picks.every((p) => p.bucket >= 0));
    const downloads = picks.map((p, i) => ({
      ...p,
      proc: lab.spawn(lab.ns.client, 'curl', [
        '-sS',
        '--noproxy',
        '*',
        '--max-time',
        '90',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code} %{size_download} %header{x-cache}\n',
        `http://${originAddressForBucket(p.bucket)}/slow/${LONG_BYTES}/${LONG_MS}/${runTag}/${i}`,
      ]),
    }));
    const downloadsStarted = Date.now();
    await sleep(1500);
    await setWeight('a', E[0], 0);
    await setWeight('b', E[0], 0);
    const shared = await bothAgree('engine 1 weight 0 on both', (t) => !shares(t).has(E[0]) && serves(E[1], E[2])(t));
    const onNonOwner = downloads.filter((d) => shared.buckets[d.bucket] !== d.engine);
    assert.ok(onNonOwner.length >= 2, "engine 1's downloads are on an engine the table no longer names");
    // Before the failover the backup's own kernel holds every download's connection with its engine's mark: conntrackd
    // writes what the master sends straight into it (DisableExternalCache), so the takeover waits for no commit.
    const held = await until("the downloads in the backup's conntrack table", async () => {
      const onB = await clientConnections('b');
      // Marked as on the master, and an established connection's timeout (days), not a copy that expires in minutes.
      const copied = (d: (typeof downloads)[number]): boolean => {
        const c = onB.get(originAddressForBucket(d.bucket));
        return c?.mark === marksA?.get(d.engine) && (c?.timeout ?? 0) > 3600;
      };
      return downloads.every(copied) ? onB : null;
    });
    console.log(
      `backup's kernel before the failover: ${downloads.length} of ${downloads.length} downloads with their engine's mark ` +
        `(timeouts ${downloads.map((d) => held.get(originAddressForBucket(d.bucket))?.timeout).join(', ')} s)`,
    );

    // Captures of the client side of both gateways (failover time), and the steady load.
    // Only frames to or from the gateway's own MAC: once a's port is down, the switch floods frames still addressed
    // to a, and b's capture would see them without forwarding them.
    const captures = await Promise.all(
      GATEWAYS.map(async (g) => {
        const file = join(lab.gw[g].dir, 'c0.pcap');
        const link = JSON.parse((await lab.exec(lab.gw[g].ns, 'ip', ['-j', 'link', 'show', 'dev', 'c0'])).stdout) as {
          address: string;
        }[];
        const mac = link[0]?.address ?? '';
        return {
          g,
          file,
          proc: lab.spawn(lab.gw[g].ns, 'tcpdump', [
            '-i',
            'c0',
            '-n',
            '-s',
            '96',
            '--immediate-mode',
            '-U',
            '-w',
            file,
            `tcp port 80 and ether host ${mac}`,
          ]),
        };
      }),
    );
    await sleep(500);
    const load = lab.spawn(lab.ns.client, process.execPath, [
      TRAFFIC,
      '--rate',
      '20',
      '--seconds',
      '20',
      '--timeout-ms',
      '15000',
    ]);
    await sleep(3000);

    const failAt = Date.now();
    await lab.failGateway('a');
    let tookOver = 0;
    for (let i = 0; i < 150 && tookOver === 0; i++) {
      const r = await lab.exec(lab.ns.gw.b, 'ip', ['-4', '-o', 'addr', 'show', 'dev', 'c0']);
      if (r.stdout.includes(` ${HA_VIP.client}/`)) tookOver = Date.now();
      else await sleep(100);
    }
    assert.ok(tookOver > 0, "gateway b holds the clients' gateway address within 15 s of a's failure");
    console.log(
      `gateway a failed ${failAt - downloadsStarted} ms into the downloads; b holds ${HA_VIP.client} ${tookOver - failAt} ms later`,
    );

    const loadLines = await waitExit(load, 60_000);
    const results = await Promise.all(
      downloads.map(async (d) => ({ ...d, out: (await waitExit(d.proc, 100_000)).join('\n') || d.proc.output() })),
    );
    for (const c of captures) await c.proc.stop(2000);

    // Failover time: the last packet through a's client side to the first through b's after it.
    const times = await Promise.all(
      captures.map(async (c) => {
        const r = await lab.exec(lab.ns.client, 'tcpdump', ['-r', c.file, '-n', '-tt'], {
          allowFail: true,
          timeoutMs: 20_000,
        });
        return r.stdout
          .split('\n')
          .map((l) => Number(l.split(' ')[0]) * 1000)
          .filter((t) => Number.isFinite(t) && t > 0);
      }),
    );
    const [ta, tb] = times as [number[], number[]];
    const lastA = Math.max(...ta);
    const firstB = tb.filter((t) => t > lastA).reduce((m, t) => Math.min(m, t), Infinity);
    assert.ok(
      ta.length > 0 && Number.isFinite(firstB),
      `packets through a (${ta.length}) and then through b (${tb.length})`,
    );
    console.log(
      `FAILOVER: last packet through gateway a to first through gateway b: ${(firstB - lastA).toFixed(0)} ms ` +
        `(links of a down at +${(failAt - lastA).toFixed(0)} ms after its last packet; VRRP address on b ${tookOver - failAt} ms after the failure)`,
    );

    // No long download broke: every one got all its bytes from the engine it started on.
    for (const d of results) {
      const [code, size, ...xc] = d.out.trim().split(' ');
      const engine = engineOfName(/\bfrom (\S+)/.exec(xc.join(' '))?.[1]);
      assert.equal(
        `${code} ${size}`,
        `200 ${LONG_BYTES}`,
        `download on bucket ${d.bucket} (engine ${d.engine}): ${d.out}`,
      );
      assert.equal(engine, d.engine, `download on bucket ${d.bucket} served by ${d.engine}`);
    }
    console.log(
      `long downloads: ${results.length} of ${results.length} complete (${LONG_BYTES} bytes over ${LONG_MS} ms), ` +
        `${onNonOwner.length} of them on engine 1 after its buckets had moved away`,
    );

    // The steady load: every answer came from the engine the shared table names; none failed after b took over.
    const answers = loadLines
      .filter((l) => l.startsWith('{'))
      .map(
        (l) =>
          JSON.parse(l) as {
            t: number;
            bucket: number;
            status: number;
            engine: string | null;
            direct: boolean;
            err?: string;
          },
      );
    const wrong = answers.filter((a) => a.status === 200 && engineOfName(a.engine) !== shared.buckets[a.bucket]);
    const failed = answers.filter((a) => a.status !== 200);
    const afterTakeover = answers.filter((a) => a.t >= firstB);
    console.log(
      `steady load: ${answers.length} requests, ${answers.length - failed.length} answered, ${failed.length} failed ` +
        `(${failed.map((a) => a.err ?? a.status).join(', ') || 'none'}), ${afterTakeover.length} started after b took over`,
    );
    assert.deepEqual(
      wrong.map((a) => `${a.bucket}:${a.engine}`),
      [],
      'answers from an engine the table does not name',
    );
    assert.ok(afterTakeover.length >= 40, `${afterTakeover.length} requests started after the failover`);
    assert.deepEqual(
      afterTakeover.filter((a) => a.status !== 200).map((a) => a.err ?? a.status),
      [],
    );
    // The backup's table is the one both published before the failure.
    assert.deepEqual((await table('b')).buckets, shared.buckets);
    const ctdLog = readFileSync(join(lab.gw.b.dir, 'conntrackd.log'), 'utf8');
    const injectErrors = ctdLog.match(/inject-\w+: .*/g) ?? [];
    console.log(`conntrackd on b: ${injectErrors.length} errors writing into its kernel ${injectErrors.join('; ')}`);
    // conntrackd -t (in its own notify script) schedules a flush of the kernel table: with the peer's connections in
    // it, that would have emptied the backup a minute after it became one (every notify runs here, late or not).
    assert.deepEqual(
      ctdLog.match(/.*flushing kernel conntrack table.*/g) ?? [],
      [],
      'conntrackd on b flushed its kernel',
    );
  });
});

/** Waits for a process to exit (bounded) and returns its stdout lines. */
async function waitExit(p: LabProcess, timeoutMs: number): Promise<readonly string[]> {
  const timeout = new Promise<'timeout'>((r) => {
    const t = setTimeout(() => r('timeout'), timeoutMs);
    t.unref();
  });
  if ((await Promise.race([p.exited, timeout])) === 'timeout') {
    await p.stop(1000);
    assert.fail(`${p.command} still ran after ${timeoutMs} ms; output: ${p.output().slice(-1000)}`);
  }
  return p.lines();
}

/** Polls fn every 200 ms until it returns non-null; bounded. */
async function until<T>(what: string, fn: () => Promise<T | null>, timeoutMs = 30_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== null) return v;
    if (Date.now() > end) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200);
  }
}
