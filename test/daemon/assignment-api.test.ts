// The buckets layer's guarantees, seen through the running daemon's API (not only in unit tests): every join moves
// exactly the newcomer's share, a removal moves exactly the removed engine's buckets, shares stay within one bucket of
// even, and an engine that comes back within the history window gets its old buckets back.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { TestEngine } from '../helpers/wccp-engine.js';
import { startDaemon, TOKEN, waitFor, type RunningDaemon } from '../helpers/daemon.js';
import type { BucketsView } from '../../src/admin/api-types.js';

let daemon: RunningDaemon;
const engines = new Map<string, TestEngine>();
let keepAlive: ReturnType<typeof setInterval> | undefined;

async function table(): Promise<BucketsView> {
  return (await (await fetch(`${daemon.url}/api/v1/services/0/buckets`)).json()) as BucketsView;
}

function moved(a: BucketsView, b: BucketsView): number {
  return a.buckets.filter((x, i) => x !== b.buckets[i]).length;
}

function shares(t: BucketsView): Map<string, number> {
  const m = new Map<string, number>();
  for (const b of t.buckets) if (b !== null) m.set(b, (m.get(b) ?? 0) + 1);
  return m;
}

async function join(address: string): Promise<BucketsView> {
  const before = await table();
  const e = new TestEngine({ address, router: { address: '127.0.0.1', port: daemon.udpPort } });
  await e.start();
  engines.set(address, e);
  await e.hereIAm();
  await e.hereIAm();
  return waitFor(`${address} to hold buckets`, async () => {
    const t = await table();
    return t.changeNumber !== before.changeNumber && t.buckets.includes(address) ? t : null;
  });
}

before(async () => {
  daemon = await startDaemon();
  keepAlive = setInterval(() => {
    for (const e of engines.values()) void e.hereIAm().catch(() => undefined);
  }, 3000);
});

after(async () => {
  clearInterval(keepAlive);
  for (const e of engines.values()) await e.stop();
  await daemon?.stop();
});

test("N -> N+1 moves exactly the newcomer's share, N -> N-1 exactly the leaver's buckets, through the API", async () => {
  let previous = await table();
  const addresses = ['127.0.0.31', '127.0.0.32', '127.0.0.33', '127.0.0.34', '127.0.0.35'];
  for (const [i, address] of addresses.entries()) {
    const next = await join(address);
    const n = i + 1;
    const got = shares(next);
    assert.equal(got.size, n);
    for (const [engine, count] of got) {
      assert.ok(
        count === Math.floor(256 / n) || count === Math.ceil(256 / n),
        `${engine} holds ${count} of 256 with ${n} engines`,
      );
    }
    const newcomer = got.get(address)!;
    // The newcomer's buckets are the only ones that changed owner (from the empty table: all 256 for the first).
    assert.equal(
      moved(previous, next),
      newcomer,
      `${n - 1} -> ${n}: moved ${moved(previous, next)}, ideal ${newcomer}`,
    );
    previous = next;
  }
  assert.equal(previous.buckets.filter((b) => b !== null).length, 256);

  // A middle engine leaves (drain is the same membership change without waiting 30 s for the removal timer).
  const leaver = '127.0.0.33';
  const held = previous.buckets.flatMap((b, i) => (b === leaver ? [i] : []));
  const r = await fetch(`${daemon.url}/api/v1/services/0/engines/${leaver}/drain`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  assert.equal(r.status, 200);
  const afterLeave = await waitFor("the leaver's buckets to move", async () => {
    const t = await table();
    return t.buckets.includes(leaver) ? null : t;
  });
  assert.equal(moved(previous, afterLeave), held.length, "exactly the leaver's buckets moved");
  for (const [, count] of shares(afterLeave)) assert.ok(count === 64, `even split over 4: ${count}`);

  // It comes back (undrain): it gets back exactly the buckets it had, the others get theirs back too.
  const back = await fetch(`${daemon.url}/api/v1/services/0/engines/${leaver}/undrain`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  assert.equal(back.status, 200);
  const afterReturn = await waitFor('the returning engine to hold buckets', async () => {
    const t = await table();
    return t.buckets.includes(leaver) ? t : null;
  });
  assert.deepEqual(
    afterReturn.buckets.flatMap((b, i) => (b === leaver ? [i] : [])),
    held,
    'its historical buckets, warm cache',
  );
  assert.equal(moved(afterLeave, afterReturn), held.length);
  assert.deepEqual(afterReturn.buckets, previous.buckets, 'the table is the one before it left');
});
