// A maintenance window on node-cron's real schedule, in the running daemon: a window of 3 s every 8 s (cron with a
// seconds field) drains one engine at its start and gives back its very buckets at its end; `wccpctl engines` and the
// engines API show the next window.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TestEngine } from '../helpers/wccp-engine.js';
import { bucketTable, engineRows, startDaemon, waitFor, wccpctl } from '../helpers/daemon.js';

const A = '127.0.0.81';
const B = '127.0.0.82';

interface Row {
  address: string;
  state: string;
  reason: string;
  maintenance: { next: string | null; activeUntil: string | null } | null;
}

test('daemon: a cron maintenance window drains its engine on schedule and restores its buckets; the next window shows', async () => {
  const daemon = await startDaemon([
    'maintenance:',
    `  - { cron: "*/8 * * * * *", duration: 3s, action: drain, engine: ${B} }`,
  ]);
  const engines: TestEngine[] = [];
  let keepAlive: ReturnType<typeof setInterval> | undefined;
  const rows = () => engineRows<Row>(daemon.url);
  const table = () => bucketTable(daemon.url);
  try {
    for (const address of [A, B]) {
      const e = new TestEngine({ address, router: { address: '127.0.0.1', port: daemon.udpPort } });
      await e.start();
      engines.push(e);
    }
    keepAlive = setInterval(() => {
      for (const e of engines) void e.hereIAm().catch(() => undefined);
    }, 1000);
    // Both usable and B outside its window, with the whole table settled.
    const before = await waitFor(
      'both engines usable with buckets',
      async () => {
        const r = await rows();
        const t = await table();
        return r.length === 2 &&
          r.every((e) => e.state === 'usable') &&
          t.includes(A) &&
          t.includes(B) &&
          t.every((x) => x !== null)
          ? t
          : null;
      },
      20_000,
    );
    const next = (await rows()).find((e) => e.address === B)?.maintenance?.next;
    assert.ok(
      next && Date.parse(next) > Date.now() - 1000 && Date.parse(next) <= Date.now() + 8000,
      `next window within 8 s: ${next}`,
    );
    assert.equal((await rows()).find((e) => e.address === A)?.maintenance, null, "the window is only B's");
    const ctl = await wccpctl(['--url', daemon.url, 'engines']);
    // B's row, its notes wrapped under their column when they do not fit: the window's note is whole on one line.
    assert.match(ctl.stdout, /127\.0\.0\.82 [^]*?(next maint \d\d-\d\d \d\d:\d\d:\d\dZ 3 s|maint until )/);

    const during = await waitFor(
      `${B} drained by its window`,
      async () => {
        const r = (await rows()).find((e) => e.address === B);
        return r?.state === 'draining' ? r : null;
      },
      15_000,
    );
    assert.match(during.reason, /^maintenance window "\*\/8 \* \* \* \* \*" starts \(3 s\)/);
    assert.ok(during.maintenance?.activeUntil, "the running window's end shows");
    const drained = await table();
    assert.ok(!drained.includes(B) && drained.every((x) => x === A), 'all buckets on the other engine');
    const back = await waitFor(
      `${B} back after its window`,
      async () => {
        const r = (await rows()).find((e) => e.address === B);
        return r?.state === 'usable' ? r : null;
      },
      10_000,
    );
    assert.match(back.reason, /^maintenance window "\*\/8 \* \* \* \* \*" over/);
    assert.deepEqual(await table(), before, 'its very buckets again');
    assert.match(
      daemon.output.join(''),
      /maintenance window \\"\*\/8 \* \* \* \* \*\\" of service 0 \(127\.0\.0\.82\) starts: drain until/,
    );
  } finally {
    clearInterval(keepAlive);
    for (const e of engines) await e.stop();
    await daemon.stop();
  }
});
