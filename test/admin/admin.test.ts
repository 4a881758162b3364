// The admin surfaces against the running daemon, as an admin sees them: wccpctl (human and --json), the HTTP API,
// /metrics and the event stream agree with each other; a drain moves only the drained engine's buckets and shows
// everywhere (how fast is printed, not asserted: timing claims live in bench/); changes without the token are refused.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  startDaemonWithEngines,
  TOKEN,
  waitFor,
  wccpctl,
  type DaemonWithEngines,
  type RunningDaemon,
} from '../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import type { BucketsView, EnginesView, StatusView, WhichView } from '../../src/admin/api-types.js';

const ENGINES = ['127.0.0.11', '127.0.0.12', '127.0.0.13'];
let running: DaemonWithEngines;
let daemon: RunningDaemon;

async function get<T>(path: string): Promise<T> {
  const r = await fetch(`${daemon.url}/api/v1/${path}`);
  assert.equal(r.status, 200, `GET ${path}`);
  return (await r.json()) as T;
}

const counts = (buckets: ReadonlyArray<string | null>) => {
  const m = new Map<string, number>();
  for (const b of buckets) if (b !== null) m.set(b, (m.get(b) ?? 0) + 1);
  return m;
};

before(async () => {
  running = await startDaemonWithEngines(ENGINES);
  daemon = running.daemon;
});

after(async () => {
  await running?.stop();
});

test('wccpctl buckets: the allotments of three engines add up to 256 (100%) and match the API; --json parses', async () => {
  const api = await get<BucketsView>('services/0/buckets');
  assert.equal(api.mask, null, 'a hash assignment service has no Mask/Value Sets');
  assert.equal(api.moved, null, 'a data plane that keeps no moves (not ingress) lists none');
  const r = await wccpctl(['--url', daemon.url, 'buckets']);
  assert.equal(r.code, 0, r.stderr);
  const legend = r.stdout.split('\n').filter((l) => / buckets /.test(l) && /\d+\.\d+\.\d+\.\d+/.test(l));
  assert.equal(legend.length, 3);
  let total = 0;
  let pct = 0;
  for (const line of legend) {
    const ip = /(\d+\.\d+\.\d+\.\d+)/.exec(line)![1]!;
    const n = Number(/(\d+) buckets/.exec(line)![1]);
    assert.equal(n, counts(api.buckets).get(ip), `${ip} allotment matches the API`);
    total += n;
    pct += Number(/([\d.]+)%/.exec(line)![1]);
  }
  assert.equal(total, 256);
  assert.ok(Math.abs(pct - 100) < 0.05, `percentages add up to 100 (${pct})`);
  assert.ok(
    r.stdout.split('\n').every((l) => l.length <= 100),
    'fits 100 columns',
  );
  assert.ok(!r.stdout.includes('\x1b['), 'no colour when not on a terminal');
  const json = await wccpctl(['--url', daemon.url, '--json', 'buckets']);
  assert.deepEqual(JSON.parse(json.stdout), api);
  // The README says every command takes --json: after the command too.
  const after = await wccpctl(['buckets', '--json', '--url', daemon.url]);
  assert.equal(after.code, 0, after.stderr);
  assert.deepEqual(JSON.parse(after.stdout), api);
  const hex = await wccpctl(['--url', daemon.url, 'buckets', '--hex']);
  assert.equal(hex.stdout.split('\n').filter((l) => l.includes('Assigned Hash Info:')).length, 3);
});

test("wccpctl status and engines read like show ip wccp; which names the table's engine", async () => {
  const s = await wccpctl(['--url', daemon.url, 'status']);
  assert.equal(s.code, 0, s.stderr);
  assert.match(s.stdout, /Router Identifier: +127\.0\.0\.1/);
  assert.match(s.stdout, /Service Identifier: web-cache \(0\)/);
  assert.match(s.stdout, /Number of Service Group Clients: +3 \(3 usable\)/);
  assert.match(s.stdout, /Worst-case detection: +HERE_I_AM 30 s \(no active probes\)/);
  // backend none counts no packets: said so, never a made-up 0.
  assert.match(s.stdout, /Total Packets Denied Redirect: +- \(not counted by this data plane\)/);
  assert.ok(s.stdout.split('\n').every((l) => l.length <= 100));
  // backend none applies no table: none is in force, said so rather than echoing the decided change number.
  assert.match(s.stdout, /Change number in force: +none \(data plane none redirects nothing\)/);
  const status = JSON.parse((await wccpctl(['--url', daemon.url, '--json', 'status'])).stdout) as StatusView;
  assert.equal(status.services[0]?.state, 'active');
  assert.equal(status.services[0]?.inForce, null);
  assert.equal((await get<BucketsView>('services/0/buckets')).inForce, null);
  const metrics = await (await fetch(`${daemon.url}/metrics`)).text();
  assert.ok(/^wccpd_change_number\{service="0"\} [1-9]/m.test(metrics), 'the decided change number is a metric');
  assert.ok(!/^wccpd_change_number_in_force\{/m.test(metrics), 'no in-force sample with backend none');

  const e = JSON.parse((await wccpctl(['--url', daemon.url, '--json', 'engines'])).stdout) as EnginesView;
  assert.deepEqual(
    e.engines.map((x) => [x.address, x.state]),
    ENGINES.map((a) => [a, 'usable']),
  );
  assert.equal(
    e.engines.reduce((a, x) => a + x.buckets, 0),
    256,
  );

  const table = await get<BucketsView>('services/0/buckets');
  for (const ip of ['198.51.100.80', '203.0.113.7', '192.0.2.200']) {
    const w = JSON.parse((await wccpctl(['--url', daemon.url, '--json', 'which', ip])).stdout) as WhichView;
    const bucket = ip
      .split('.')
      .map(Number)
      .reduce((a, b) => a ^ b, 0);
    assert.equal(w.bucket, bucket, `bucket of ${ip} is the XOR of its bytes`);
    assert.equal(w.engine, table.buckets[bucket]);
    assert.equal(w.why, 'assigned');
    const human = await wccpctl(['--url', daemon.url, 'which', ip]);
    assert.match(human.stdout, new RegExp(`-> bucket ${bucket} .* -> ${table.buckets[bucket]!.replace(/\./g, '\\.')}`));
  }
  const bad = await wccpctl(['--url', daemon.url, 'which', 'not-an-ip']);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /expected an IPv4 or IPv6 address, got not-an-ip/);
  // IPv6: its bucket is the XOR of its 16 bytes; this service (families absent: IPv4 only) forwards it normally.
  const v6 = JSON.parse((await wccpctl(['--url', daemon.url, '--json', 'which', '2001:db8::1'])).stdout) as WhichView;
  assert.deepEqual(v6, {
    service: 0,
    address: '2001:db8::1',
    bucket: 0x95,
    engine: null,
    family: 'ipv6',
    why: 'family',
  });
  const human6 = await wccpctl(['--url', daemon.url, 'which', '2001:db8::1']);
  assert.match(
    human6.stdout,
    /2001:db8::1 -> bucket 149 \(0x95\) -> origin \(direct\)\n {2}why: this service does not redirect IPv6/,
  );
  const zone = await fetch(`${daemon.url}/api/v1/services/0/which?ip=${encodeURIComponent('fe80::1%eth0')}`);
  assert.equal(zone.status, 400);
  assert.match(await zone.text(), /which needs \?ip=<IPv4 or IPv6 address>/);
});

test('drain without the token is refused (401) and changes nothing', async () => {
  const before = await get<BucketsView>('services/0/buckets');
  const r = await fetch(`${daemon.url}/api/v1/services/0/engines/127.0.0.12/drain`, { method: 'POST' });
  assert.equal(r.status, 401);
  const wrong = await fetch(`${daemon.url}/api/v1/services/0/engines/127.0.0.12/drain`, {
    method: 'POST',
    headers: { authorization: 'Bearer nope' },
  });
  assert.equal(wrong.status, 401);
  const cli = await wccpctl(['--url', daemon.url, 'drain', '127.0.0.12'], { WCCPD_TOKEN: '' });
  assert.equal(cli.code, 1);
  assert.match(cli.stderr, /401/);
  assert.deepEqual(await get<BucketsView>('services/0/buckets'), before);
});

test("wccpctl drain moves only the drained engine's buckets; CLI, API, metrics and events show it", async (ctx) => {
  const before = await get<BucketsView>('services/0/buckets');
  const follower = spawn(
    process.execPath,
    ['--import', 'tsx', 'src/cli/wccpctl.ts', '--url', daemon.url, '--json', 'events', '--follow'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let followed = '';
  follower.stdout.on('data', (d: Buffer) => {
    followed += d.toString();
  });
  try {
    // It prints the recent events first (the engines joining), then follows the stream.
    await waitFor(
      'events --follow to print the recent events',
      async () => (followed.includes('joining') ? true : null),
      15_000,
    );
    await new Promise((r) => setTimeout(r, 500));
    const r = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'drain', '127.0.0.12']);
    assert.equal(r.code, 0, r.stderr);
    const drainedAt = Date.now();
    const after = await waitFor('the API to show the drain', async () => {
      const t = await get<BucketsView>('services/0/buckets');
      return t.buckets.includes('127.0.0.12') ? null : t;
    });
    for (let i = 0; i < 256; i++) {
      if (before.buckets[i] !== '127.0.0.12')
        assert.equal(after.buckets[i], before.buckets[i], `bucket ${i} did not move`);
      else assert.ok(after.buckets[i] === '127.0.0.11' || after.buckets[i] === '127.0.0.13');
    }
    const c = counts(after.buckets);
    assert.ok(Math.abs((c.get('127.0.0.11') ?? 0) - (c.get('127.0.0.13') ?? 0)) <= 1, 'the survivors share evenly');

    const engines = JSON.parse((await wccpctl(['--url', daemon.url, '--json', 'engines'])).stdout) as EnginesView;
    assert.equal(engines.engines.find((e) => e.address === '127.0.0.12')?.state, 'draining');
    const metrics = await (await fetch(`${daemon.url}/metrics`)).text();
    const { samples } = parsePrometheusText(metrics);
    assert.equal(sampleValue(samples, 'wccpd_engine_buckets', { engine: '127.0.0.12' }), 0);
    assert.equal(sampleValue(samples, 'wccpd_engines', { service: '0', state: 'draining' }), 1);
    assert.equal(sampleValue(samples, 'wccpd_engines', { service: '0', state: 'suspect' }), 0);
    // Buckets moved, on a data plane that keeps no moves (backend none): none listed, no sample, no marked cell.
    assert.equal(after.moved, null);
    assert.equal(sampleValue(samples, 'wccpd_buckets_moved', { service: '0' }), undefined);
    assert.doesNotMatch((await wccpctl(['--url', daemon.url, 'buckets'])).stdout, /\*|in a move/);
    await waitFor('events --follow to print the drain', async () =>
      followed.includes('"to":"draining"') ? true : null,
    );
    ctx.diagnostic(`events --follow printed the drain ${Date.now() - drainedAt} ms after wccpctl drain returned`);
    const human = await wccpctl(['--url', daemon.url, 'events']);
    assert.match(human.stdout, /engine 127\.0\.0\.12: usable -> draining/);

    const undo = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'undrain', '127.0.0.12']);
    assert.equal(undo.code, 0, undo.stderr);
    await waitFor('the undrained engine to get its share back', async () => {
      const t = await get<BucketsView>('services/0/buckets');
      return (counts(t.buckets).get('127.0.0.12') ?? 0) >= 85 ? t : null;
    });
  } finally {
    follower.kill('SIGINT');
  }
});

test('wccpctl weight changes the share; a bad weight is refused', async () => {
  const r = await wccpctl(['--url', daemon.url, '--token', TOKEN, 'weight', '127.0.0.13', '0']);
  assert.equal(r.code, 0, r.stderr);
  const t = await waitFor('weight 0 (standby) to empty the engine', async () => {
    const v = await get<BucketsView>('services/0/buckets');
    return v.buckets.includes('127.0.0.13') ? null : v;
  });
  assert.equal(t.buckets.filter((b) => b === null).length, 0);
  assert.equal((await wccpctl(['--url', daemon.url, '--token', TOKEN, 'weight', '127.0.0.13', 'x'])).code, 1);
  const bad = await fetch(`${daemon.url}/api/v1/services/0/engines/127.0.0.13/weight`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: '{"weight": 70000}',
  });
  assert.equal(bad.status, 400);
  assert.equal((await wccpctl(['--url', daemon.url, '--token', TOKEN, 'weight', '127.0.0.13', '10000'])).code, 0);
});

test('/metrics parses as Prometheus text and agrees with the API', async () => {
  const res = await fetch(`${daemon.url}/metrics`);
  assert.match(res.headers.get('content-type') ?? '', /text\/plain/);
  const { types, samples } = parsePrometheusText(await res.text());
  for (const name of [
    'wccpd_engines',
    'wccpd_engine_buckets',
    'wccpd_redirected_packets_total',
    'wccpd_redirected_bytes_total',
    'wccpd_here_i_am_received_total',
    'wccpd_i_see_you_sent_total',
    'wccpd_auth_failures_total',
    'wccpd_decode_errors_total',
    'wccpd_rebalances_total',
    'wccpd_dataplane_apply_seconds',
  ]) {
    assert.ok(types.has(name), `${name} is exposed`);
  }
  const api = await get<EnginesView>('services/0/engines');
  for (const e of api.engines)
    assert.equal(sampleValue(samples, 'wccpd_engine_buckets', { engine: e.address }), e.buckets);
  assert.ok((sampleValue(samples, 'wccpd_here_i_am_received_total', { service: '0' }) ?? 0) >= 6);
  assert.ok(
    (sampleValue(samples, 'wccpd_dataplane_apply_seconds_count', { backend: 'none', outcome: 'ok' }) ?? 0) >= 1,
  );
  assert.throws(() => parsePrometheusText('wccpd_x 1\n'), /no TYPE/, 'the parser rejects what Prometheus would');
});

test('wccpctl exits 2 naming the URL when the daemon cannot be reached', async () => {
  const r = await wccpctl(['--url', 'http://127.0.0.1:9', 'status']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /cannot reach wccpd at http:\/\/127\.0\.0\.1:9/);
});
