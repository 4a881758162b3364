// The real daemon with `warmup.listen`: a hot-inserted engine is seen warming in the API, `wccpctl engines`, the
// events, `wccpctl status` and /metrics, and the broker answers its ICP query from the bucket's previous owner (a
// small sibling on loopback: real Squid on both sides is in test/lab/warmup.test.ts).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { EnginesView, EventView, StatusView } from '../../src/admin/api-types.js';
import { waitFor, wccpctl } from '../helpers/daemon.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import { icpQuery } from './sibling.js';
import { A, C, startWarmDaemon } from './warm-daemon.js';
import type { WarmDaemon } from './warm-daemon.js';
import { request } from 'node:http';

/** A GET from `from` through the broker's HTTP relay (proxy form), as the engine's Squid sends it: the status. */
function relayed(from: string, port: number, url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: url, localAddress: from, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('daemon: warm-up broker', () => {
  let w: WarmDaemon;
  let icpPort = 0;
  let httpPort = 0;
  const get = <T>(path: string): Promise<T> => w.get<T>(path);
  const buckets = () => w.buckets();

  before(async () => {
    w = await startWarmDaemon();
    icpPort = w.icpPort;
    httpPort = w.httpPort;
  });
  after(async () => {
    await w?.stop();
  });

  let old: (string | null)[] | null = null;
  it('shows the newcomer warming everywhere, and answers its query from the previous owner', async () => {
    old = await buckets();
    await w.join(C);
    const now = await buckets();
    const gained = now.findIndex((o, i) => o === C && (old ?? [])[i] === A);
    assert.ok(gained >= 0);
    const url = `http://198.51.100.${198 ^ 51 ^ 100 ^ gained}/warm`;
    w.siblings[0]?.store.set(url, { body: Buffer.from('warm') });
    assert.equal(await icpQuery(C, icpPort, url), 'HIT');
    assert.equal(await icpQuery('127.0.0.99', icpPort, url), 'DENIED');

    // A query's outcome counts towards the warm-up once its second and the next are known to be within the engine's
    // query budget (docs/warmup.md): within about 2 s.
    const view = await waitFor('the query counted', async () => {
      const v = await get<EnginesView>('services/0/engines');
      return v.engines.find((x) => x.address === C)?.warmup?.queries === 1 ? v : null;
    });
    const c = view.engines.find((x) => x.address === C);
    assert.equal(c?.flags.warming, true);
    assert.deepEqual([c?.warmup?.warming, c?.warmup?.queries, c?.warmup?.peerHits], [true, 1, 1]);
    assert.ok((c?.warmup?.timeLeftMs ?? 0) > 0 && (c?.warmup?.timeLeftMs ?? 0) <= 300_000);
    assert.equal(view.engines.find((x) => x.address === A)?.warmup, null, 'A never warmed');

    const ctl = await wccpctl(['--url', w.daemon.url, 'engines']);
    assert.equal(ctl.code, 0, ctl.stderr);
    const lines = ctl.stdout.split('\n');
    const at = lines.findIndex((l) => l.startsWith(C));
    assert.match(lines[at + 1] ?? '', /^ {16}warming: 1\/1 peer hits \(100%\), [45] min left$/, ctl.stdout);

    // C's Squid fetches the object through the relay; then another that A said HIT for and lost since (its 504).
    assert.equal(await relayed(C, httpPort, url), 200);
    const lost = `http://198.51.100.${198 ^ 51 ^ 100 ^ gained}/lost`;
    w.siblings[0]?.store.set(lost, { body: Buffer.from('x') });
    assert.equal(await icpQuery(C, icpPort, lost), 'HIT');
    w.siblings[0]?.store.set(lost, { status: 504, body: Buffer.alloc(0) });
    assert.equal(await relayed(C, httpPort, lost), 504);

    const status = await wccpctl(['--url', w.daemon.url, 'status']);
    assert.match(status.stdout, /Warm-up broker:/);
    assert.match(status.stdout, /ICP queries \(HIT \/ MISS \/ DENIED\): +3 \(2 \/ 0 \/ 1\)/);
    assert.match(status.stdout, /Relayed: objects \/ source 504s: +1 \/ 1\n/, status.stdout);
    const s = await get<StatusView>('status');
    assert.equal(s.warmup?.['icp-denied'], 1);
    assert.deepEqual(
      [s.warmup?.['http-relay'], s.warmup?.['http-relayed'], s.warmup?.['http-source-504']],
      [2, 1, 1],
      JSON.stringify(s.warmup),
    );

    const events = await get<{ events: EventView[] }>('events?limit=100');
    assert.ok(
      events.events.some((x) => x.type === 'warmup' && x.engine === C && x.to === 'warming'),
      JSON.stringify(events.events.slice(-5)),
    );
    const evText = await wccpctl(['--url', w.daemon.url, 'events']);
    assert.match(evText.stdout, new RegExp(`engine ${C.replace(/\./g, '\\.')}: warming`));

    await waitFor('both HITs counted', async () => {
      const v = await get<EnginesView>('services/0/engines');
      return v.engines.find((x) => x.address === C)?.warmup?.peerHits === 2 ? true : null;
    });
    const metrics = parsePrometheusText(await (await fetch(`${w.daemon.url}/metrics`)).text());
    assert.equal(sampleValue(metrics.samples, 'wccpd_engine_warming', { service: '0', engine: C }), 1);
    assert.equal(sampleValue(metrics.samples, 'wccpd_engine_warmup_peer_hits_total', { service: '0', engine: C }), 2);
    assert.equal(sampleValue(metrics.samples, 'wccpd_warmup_broker_total', { kind: 'icp-denied' }), 1);
    assert.equal(sampleValue(metrics.samples, 'wccpd_warmup_broker_total', { kind: 'http-relayed' }), 1);
    assert.equal(sampleValue(metrics.samples, 'wccpd_warmup_broker_total', { kind: 'http-source-504' }), 1);
  });

  it('a restart of wccpd in the middle of the warm-up: it goes on from the saved state, with its figures', async () => {
    const view = async () =>
      (await get<EnginesView>('services/0/engines')).engines.find((x) => x.address === C)?.warmup ?? null;
    const before = await view();
    assert.equal(before?.warming, true);
    const table = await buckets();
    const others = async () =>
      (await get<EnginesView>('services/0/engines')).engines
        .filter((e) => e.address !== C)
        .map((e) => [e.address, e.warmup === null ? null : [e.warmup.queries, e.warmup.peerHits, e.warmup.buckets]]);
    const othersBefore = await others();
    assert.equal(await w.daemon.terminate(), 0);
    w.daemon = await w.daemon.restart();
    // The engines keep sending HERE_I_AMs (every 3 s); the restored table comes back once all three are heard.
    await waitFor(
      'the table back as before the restart',
      async () => {
        const b = await buckets().catch(() => null);
        return b !== null && JSON.stringify(b) === JSON.stringify(table) ? b : null;
      },
      30_000,
    );
    const after = await view();
    assert.deepEqual(
      [after?.warming, after?.queries, after?.peerHits, after?.buckets],
      [true, before?.queries, before?.peerHits, before?.buckets],
    );
    assert.ok(
      (after?.timeLeftMs ?? Infinity) <= (before?.timeLeftMs ?? 0),
      `${after?.timeLeftMs} ms left after, ${before?.timeLeftMs} before`,
    );
    assert.deepEqual(await others(), othersBefore, 'A and B got their own buckets back: no new warm-up for them');
    // The broker still asks the previous owner for a bucket C gained before the restart.
    const gained = table.findIndex((o, i) => o === C && (old ?? [])[i] === A);
    const url = `http://198.51.100.${198 ^ 51 ^ 100 ^ gained}/after-restart`;
    w.siblings[0]?.store.set(url, { body: Buffer.from('warm') });
    await waitFor(
      'A usable again (its probe passes)',
      async () => ((await icpQuery(C, icpPort, url)) === 'HIT' ? true : null),
      15_000,
    );
  });
});
