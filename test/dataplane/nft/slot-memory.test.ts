// Engine slots across a restart (a fake kernel): two colliding keys that arrived one by one keep their slots when the
// next run places them together, since the slots in force are kept in `<stateDir>/engine-slots`; connections still
// marked with a slot would otherwise reach the other engine (docs/operations.md, "Upgrade").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAX_SLOT, MIN_SLOT, NftRedirector } from '../../../src/dataplane/index.js';
import { homeSlot, parseSlotKey } from '../../../src/dataplane/kernel/engine-slots.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import { webCache } from '../service-fixture.js';
import { fakeKernel } from './fake-kernel.js';

const range = { min: MIN_SLOT, max: MAX_SLOT };
// The same home (service offsets 0 and 360 x 22 cancel the 13 addresses between them); placed together, the lower
// address takes it.
const A = '0 l2 192.0.2.1';
const B = '72 l2 192.0.2.14';
const svc = (serviceId: number, engine: string): ServiceRedirect =>
  webCache(() => engine, [engine], { serviceId, ports: [8000 + serviceId] });
const a = svc(0, '192.0.2.1');
const b = svc(72, '192.0.2.14');

const bThenA = async (r: NftRedirector): Promise<void> => {
  await r.apply(b);
  await r.apply(a);
};

async function inDir(body: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-slots-'));
  try {
    await body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function run(dir: string | undefined, steps: (r: NftRedirector) => Promise<void>): Promise<Map<string, number>> {
  const k = fakeKernel();
  const r = new NftRedirector({ exec: k.exec, stateDir: dir, probeGre: () => Promise.resolve(false) });
  await r.start();
  try {
    await steps(r);
    return new Map(r.slotsInUse());
  } finally {
    await r.stop();
  }
}

test('colliding keys that arrived one by one keep their slots after a restart', async () => {
  const home = homeSlot(parseSlotKey(A), range);
  assert.equal(homeSlot(parseSlotKey(B), range), home, 'the two keys collide');
  await inDir(async (dir) => {
    // B's service first, A's later: B holds the home, A is displaced.
    const before = await run(dir, bThenA);
    assert.deepEqual(
      before,
      new Map([
        [B, home],
        [A, home + 1],
      ]),
    );
    assert.equal(
      readFileSync(join(dir, 'engine-slots'), 'utf8'),
      `wccpd-engine-slots 1\n${home} ${B}\n${home + 1} ${A}\n`,
    );

    // Without the record the next run places them together, in the fixed order: they swap.
    const fresh = await run(undefined, (r) => r.applyAll([a, b]));
    assert.deepEqual(
      fresh,
      new Map([
        [A, home],
        [B, home + 1],
      ]),
    );

    // With it, each gets the slot it had, whichever arrives first.
    assert.deepEqual(await run(dir, (r) => r.applyAll([a, b])), before);
    assert.deepEqual(
      await run(dir, async (r) => {
        await r.apply(a);
        await r.apply(b);
      }),
      before,
    );
  });
});

test('an engine that leaves and comes back (its slot parked) costs no write of the file', async () => {
  await inDir(async (dir) => {
    const file = join(dir, 'engine-slots');
    const one = svc(0, '192.0.2.1');
    const engines = ['192.0.2.1', '192.0.2.2'];
    const two = webCache((n) => engines[n % 2] ?? null, engines, { serviceId: 0, ports: [8000] });
    await run(dir, async (r) => {
      await r.apply(two);
      const written = statSync(file);
      await r.apply(one);
      assert.equal(r.parkedSlots().size, 1, 'the leaving engine is parked');
      await r.apply(two);
      const after = statSync(file);
      assert.equal(after.ino, written.ino, 'not written again');
      assert.equal(after.mtimeMs, written.mtimeMs);
    });
  });
});

test('a remembered slot another key holds now is not taken; a bad record line is ignored', async () => {
  const home = homeSlot(parseSlotKey(A), range);
  await inDir(async (dir) => {
    // The last run had A displaced; this one places B (at home) before A returns: A goes to the next free slot,
    // the home's holder is not moved.
    writeFileSync(join(dir, 'engine-slots'), `wccpd-engine-slots 1\n${home} ${A}\nnot a line\n99999 0 l2 192.0.2.9\n`);
    const slots = await run(dir, bThenA);
    assert.deepEqual(
      slots,
      new Map([
        [B, home],
        [A, home + 1],
      ]),
    );
  });
});
