// Counter reads never hold up a change: a table change after an engine failed goes to the kernel while the page's
// read (two nft listings) is still running, and a read that overlapped a change is done again, so the counters
// it returns are attributed with the slots of one state (a fake `ip`/`nft`; the listings wait until released).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NftRedirector } from '../../../src/dataplane/index.js';
import type { Exec } from '../../../src/dataplane/kernel/exec.js';
import { fakeRouteGets, webCache } from '../service-fixture.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';

function slowListings() {
  const held: (() => void)[] = [];
  let engineCounts = new Map<number, number>();
  let listings = 0;
  const listed: string[] = [];
  const exec: Exec = (cmd, args, input) => {
    if (cmd === 'ip' && args[0] === '-j' && args[1] === 'route' && args[2] === 'get') {
      return Promise.resolve(JSON.stringify([{ dst: args[3], dev: 'br0', prefsrc: '192.0.2.1' }]));
    }
    if (cmd === 'ip' && args.includes('-batch')) return Promise.resolve(fakeRouteGets(input));
    if (cmd === 'ip' && args.includes('-j')) return Promise.resolve('[]');
    if (cmd === 'nft' && args[0] === '-j' && args[1] === 'list') {
      listings += 1;
      listed.push(args.slice(1).join(' '));
      // `list counters table inet wccpd`: every named counter, the engine slots' among them.
      const body =
        args[2] === 'counters'
          ? {
              nftables: [...engineCounts].map(([slot, packets]) => ({
                counter: { family: 'inet', table: 'wccpd', name: `engine_${slot}`, packets, bytes: 0 },
              })),
            }
          : { nftables: [] };
      return new Promise((resolve) => held.push(() => resolve(JSON.stringify(body))));
    }
    return Promise.resolve('');
  };
  return {
    exec,
    held,
    listings: () => listings,
    listed,
    setEngineCounts: (m: Map<number, number>) => {
      engineCounts = m;
    },
    /** Answers every listing, including those of a read done again, until none is left waiting (bounded). */
    async releaseAll(): Promise<void> {
      for (let i = 0; i < 50; i++) {
        while (held.length > 0) held.shift()?.();
        await tick();
      }
    },
  };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

/** A started redirector over the slow fake, serving engine 1 alone. */
async function servingEngine1(k: ReturnType<typeof slowListings>): Promise<NftRedirector> {
  const r = new NftRedirector({ exec: k.exec, probeGre: () => Promise.resolve(false) });
  await r.start();
  await r.apply(webCache(() => E1, [E1]));
  return r;
}

test('a change is applied while a counter read is still listing; the read is then done again with the new slots', async () => {
  const k = slowListings();
  const r = await servingEngine1(k);
  const reading = r.counters();
  await tick();
  assert.equal(k.held.length, 1, 'the read is listing');

  // Engine 1 fails: its buckets go to engine 2. The change must not wait for the read.
  let applied = false;
  const change = r.apply(webCache(() => E2, [E1, E2])).then(() => {
    applied = true;
  });
  for (let i = 0; i < 20 && !applied; i++) await tick();
  assert.equal(applied, true, 'the change reached the kernel while the read was still listing');
  await change;

  const slot2 = r.slotsInUse().get(`0 l2 ${E2}`);
  assert.ok(slot2 !== undefined, 'engine 2 has a slot');
  k.setEngineCounts(new Map([[slot2, 7]]));
  const before = k.listings();
  await k.releaseAll();
  const counters = await reading;
  assert.ok(k.listings() > before, 'the overlapped read listed again');
  assert.equal(counters.engines.get(0)?.get(E2)?.packets, 7, 'engine 2 counted with its slot of the new state');
});

test('a read with no change in between is not repeated', async () => {
  const k = slowListings();
  const r = await servingEngine1(k);
  const reading = r.counters();
  await k.releaseAll();
  await reading;
  assert.equal(k.listings(), 2, "named counters (the engines' among them) and the bucket set, once each");
});

test('a read lists the bucket sets of the services it asks for only: none for the status, one for a buckets view', async () => {
  const k = slowListings();
  const r = new NftRedirector({ exec: k.exec, probeGre: () => Promise.resolve(false) });
  await r.start();
  await r.apply(webCache(() => E1, [E1]));
  await r.apply(webCache(() => E1, [E1], { serviceId: 90, ports: [8080] }));
  const read = async (scope?: { buckets: number[] }) => {
    k.listed.length = 0;
    const reading = r.counters(scope);
    await k.releaseAll();
    const c = await reading;
    return { listed: [...k.listed], buckets: [...c.buckets.keys()].sort((a, b) => a - b), engines: c.engines };
  };
  const status = await read({ buckets: [] });
  assert.deepEqual(status.listed, ['list counters table inet wccpd'], 'one listing: the named counters');
  assert.deepEqual(status.buckets, []);
  assert.deepEqual(
    [...status.engines.keys()].sort((a, b) => a - b),
    [0, 90],
    "every service's engines still",
  );
  const one = await read({ buckets: [90] });
  assert.deepEqual(one.listed, ['list counters table inet wccpd', 'list set inet wccpd bseen_90']);
  assert.deepEqual(one.buckets, [90]);
  const all = await read();
  assert.equal(all.listed.length, 3, 'no scope: the named counters and both bucket sets');
  assert.deepEqual(all.buckets, [0, 90]);
});
