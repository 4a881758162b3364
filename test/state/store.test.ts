import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  decodeState,
  emptyState,
  encodeState,
  loadState,
  PREVIOUS_STATE_FILE,
  saveState,
  STATE_FILE,
  STATE_VERSION,
  type PersistedState,
} from '../../src/state/index.js';

let root = '';
let n = 0;
const freshDir = (): string => join(root, `d${++n}`);

/** A state whose table alternates the given engines over the 256 buckets (a few unassigned). */
function stateWith(changeNumber: number, engines: string[]): PersistedState {
  const buckets = Array.from({ length: 256 }, (_, i) => (i % 17 === 0 ? null : (engines[i % engines.length] ?? null)));
  return {
    version: STATE_VERSION,
    savedAt: 1_700_000_000_000 + changeNumber,
    services: [
      {
        id: 0,
        table: { changeNumber, buckets },
        engines: [
          ...engines.map((address) => ({
            address,
            weight: 1,
            lastState: 'usable',
            leftAt: null,
            historicalBuckets: [],
          })),
          {
            address: '192.0.2.99',
            weight: 2,
            lastState: 'gone',
            leftAt: 1_699_999_999_000,
            historicalBuckets: [3, 4, 250],
          },
        ],
        counters: { hereIAmReceived: 42 + changeNumber, outsideAllow: 1 },
        receiveId: 1000 + changeNumber,
      },
    ],
  };
}

const A = stateWith(7, ['192.0.2.11', '192.0.2.12']);
const B = stateWith(8, ['192.0.2.11', '192.0.2.12', '192.0.2.13']);

describe('state persistence', () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'wccpd-state-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('round-trips a saved state, creating the directory', async () => {
    const dir = join(freshDir(), 'nested');
    await saveState(dir, A);
    const loaded = await loadState(dir);
    assert.deepEqual(loaded.state, A);
    assert.equal(loaded.source, 'current');
    assert.equal(loaded.file, join(dir, STATE_FILE));
    assert.deepEqual(loaded.bad, []);
    assert.deepEqual((await readdir(dir)).sort(), [STATE_FILE]);
  });

  it('round-trips a warm-up memory, and rejects a bad one naming the field', () => {
    const [svc] = A.services;
    assert.ok(svc);
    const warmup = {
      sessions: [
        { engine: '192.0.2.13', elapsedMs: 120_000, queries: 6, peerHits: 5, endReason: null },
        { engine: '192.0.2.12', elapsedMs: 600_000, queries: 0, peerHits: 0, endReason: 'duration' as const },
      ],
      gained: [[3, '192.0.2.13', '192.0.2.11', 120_000] as const],
    };
    const withWarmup: PersistedState = { ...A, services: [{ ...svc, warmup }] };
    assert.deepEqual(decodeState(encodeState(withWarmup)), { ok: true, state: withWarmup });
    const bad = (w: unknown): string => {
      const d = decodeState(encodeState({ ...A, services: [{ ...svc, warmup: w }] } as unknown as PersistedState));
      return d.ok ? 'accepted' : d.reason;
    };
    assert.equal(bad({ sessions: [] }), 'services[0].warmup is not {sessions, gained}');
    assert.equal(
      bad({ ...warmup, gained: [[256, '192.0.2.13', '192.0.2.11', 1]] }),
      'services[0].warmup.gained[0] is not [bucket, owner, previous owner, age]',
    );
    assert.equal(
      bad({ ...warmup, sessions: [{ ...warmup.sessions[0], endReason: 'bored' }] }),
      'services[0].warmup.sessions[0] is not a warm-up session',
    );
  });

  it("round-trips a mask service's values, loads a file without them, and rejects a bad table naming the field", () => {
    const [svc] = A.services;
    assert.ok(svc);
    assert.equal(svc.mask, undefined, 'a file written before the values were persisted');
    assert.deepEqual(decodeState(encodeState(A)), { ok: true, state: A });
    const dst = { sourceAddressMask: 0, destinationAddressMask: 0x1741, sourcePortMask: 0, destinationPortMask: 0 };
    const mask = {
      changeNumber: 5,
      mask: dst,
      engines: Array.from({ length: 64 }, (_, i) => (i % 3 ? '192.0.2.11' : null)),
    };
    const withMask: PersistedState = { ...A, services: [{ ...svc, mask }] };
    assert.deepEqual(decodeState(encodeState(withMask)), { ok: true, state: withMask });
    const bad = (m: unknown): string => {
      const d = decodeState(encodeState({ ...A, services: [{ ...svc, mask: m }] } as unknown as PersistedState));
      return d.ok ? 'accepted' : d.reason;
    };
    assert.equal(bad(null), 'services[0].mask is not {changeNumber, mask, engines}');
    assert.equal(bad({ ...mask, changeNumber: -1 }), 'services[0].mask.changeNumber is not a 32-bit number');
    assert.equal(bad({ ...mask, mask: [] }), 'services[0].mask.mask is not a Mask Element');
    assert.equal(
      bad({ ...mask, mask: { ...dst, sourcePortMask: 'ffff' } }),
      'services[0].mask.mask.sourcePortMask is not a 32-bit mask',
    );
    assert.equal(
      bad({ ...mask, mask: { ...dst, sourceAddressMask: 0xffffffff }, engines: [] }),
      'services[0].mask.mask has 38 bits set (at most 12)',
    );
    assert.equal(
      bad({ ...mask, engines: mask.engines.slice(1) }),
      "services[0].mask.engines has 63 entries; its mask's 6 bits select 64 values",
    );
    assert.equal(bad({ ...mask, engines: { length: 64 } }), 'services[0].mask.engines is not a list');
    assert.equal(
      bad({ ...mask, engines: [...mask.engines.slice(1), '192.0.2.300'] }),
      'services[0].mask.engines holds something other than an IPv4 address or null',
    );
  });

  it('round-trips admin weights, and rejects bad ones naming the entry', () => {
    const [svc] = A.services;
    assert.ok(svc);
    const adminWeights = [
      { address: '192.0.2.11', weight: 30_000, leftAt: null },
      { address: '192.0.2.99', weight: 0, leftAt: 1_699_999_999_000 },
    ];
    const withWeights: PersistedState = { ...A, services: [{ ...svc, adminWeights }] };
    assert.deepEqual(decodeState(encodeState(withWeights)), { ok: true, state: withWeights });
    const bad = (w: unknown): string => {
      const d = decodeState(
        encodeState({ ...A, services: [{ ...svc, adminWeights: w }] } as unknown as PersistedState),
      );
      return d.ok ? 'accepted' : d.reason;
    };
    assert.equal(bad({}), 'services[0].adminWeights is not a list');
    assert.equal(
      bad([{ ...adminWeights[0], weight: 70_000 }]),
      'services[0].adminWeights[0].weight is not a 16-bit weight',
    );
    assert.equal(
      bad([{ ...adminWeights[0], address: 'engine' }]),
      'services[0].adminWeights[0].address is not an IPv4 address',
    );
    assert.equal(
      bad([{ ...adminWeights[0], leftAt: 'yesterday' }]),
      'services[0].adminWeights[0].leftAt is not a time or null',
    );
    assert.equal(
      bad([adminWeights[0], adminWeights[1], adminWeights[0]]),
      'services[0].adminWeights[2] names 192.0.2.11 again',
    );
    const many = Array.from({ length: 1025 }, (_, i) => ({
      address: `198.51.${i >> 8}.${i & 255}`,
      weight: 1,
      leftAt: 1,
    }));
    assert.equal(bad(many), 'services[0].adminWeights has 1025 entries (at most 1024)');
  });

  it('keeps the previous generation and loads the newest', async () => {
    const dir = freshDir();
    await saveState(dir, A);
    await saveState(dir, B);
    assert.deepEqual((await loadState(dir)).state, B);
    assert.deepEqual(decodeState(await readFile(join(dir, PREVIOUS_STATE_FILE))), { ok: true, state: A });
  });

  it('returns the empty state, with no complaint, for a missing directory or file', async () => {
    const missing = await loadState(join(root, 'never-created'));
    assert.deepEqual(missing, { state: emptyState(), source: 'empty', file: null, bad: [] });
    assert.deepEqual(emptyState(), { version: STATE_VERSION, savedAt: 0, services: [] });
  });

  it('detects the newest file cut short at every byte and falls back to the previous generation', async () => {
    const dir = freshDir();
    await saveState(dir, A);
    await saveState(dir, B);
    const full = await readFile(join(dir, STATE_FILE));
    for (let cut = 0; cut < full.length; cut++) {
      await writeFile(join(dir, STATE_FILE), full.subarray(0, cut));
      const loaded = await loadState(dir);
      assert.equal(loaded.source, 'previous', `cut at ${cut} of ${full.length} was not detected`);
      assert.deepEqual(loaded.state, A);
      assert.equal(loaded.bad.length, 1);
      assert.equal(loaded.bad[0]!.file, join(dir, STATE_FILE));
    }
  });

  it('reports why a lone bad file was rejected and starts empty', async () => {
    const dir = freshDir();
    await saveState(dir, A);
    const full = await readFile(join(dir, STATE_FILE));
    await writeFile(join(dir, STATE_FILE), full.subarray(0, full.length - 10));
    const loaded = await loadState(dir);
    assert.equal(loaded.source, 'empty');
    assert.deepEqual(loaded.state, emptyState());
    assert.match(loaded.bad[0]!.reason, /^truncated: body has \d+ of \d+ bytes$/);
  });

  it('detects any single flipped byte', () => {
    const full = encodeState(B);
    for (let i = 0; i < full.length; i++) {
      const copy = Buffer.from(full);
      copy[i] = copy[i]! ^ 0x01;
      assert.equal(decodeState(copy).ok, false, `flip at byte ${i} of ${full.length} was not detected`);
    }
    const copy = Buffer.from(full);
    copy[full.length - 20] = copy[full.length - 20]! ^ 0x40;
    assert.deepEqual(decodeState(copy), { ok: false, reason: 'checksum mismatch (the file is corrupt)' });
  });

  it('rejects a well-formed file whose body is not a state, and extra bytes', () => {
    const wrong = { ...B, services: [{ ...B.services[0]!, table: { changeNumber: 1, buckets: [null] } }] };
    assert.deepEqual(decodeState(encodeState(wrong as PersistedState)), {
      ok: false,
      reason: 'services[0].table.buckets does not have 256 entries',
    });
    assert.deepEqual(decodeState(Buffer.concat([encodeState(A), Buffer.from('x')])), {
      ok: false,
      reason: '1 unexpected bytes after the body',
    });
    assert.equal(decodeState(Buffer.from('{"version":1}\n')).ok, false);
    const twice = { ...A, services: [A.services[0]!, { ...A.services[0]!, receiveId: 9 }] };
    assert.deepEqual(decodeState(encodeState(twice)), {
      ok: false,
      reason: 'services[1].id 0 is listed already (services[0])',
    });
  });

  it('serializes concurrent saves: the last call wins, the one before is the previous generation', async () => {
    const dir = freshDir();
    const states = Array.from({ length: 25 }, (_, i) => stateWith(100 + i, [`192.0.2.${10 + (i % 5)}`, '192.0.2.50']));
    await Promise.all(states.map((s) => saveState(dir, s)));
    const loaded = await loadState(dir);
    assert.deepEqual(loaded.state, states[24]);
    assert.deepEqual(decodeState(await readFile(join(dir, PREVIOUS_STATE_FILE))), { ok: true, state: states[23] });
    assert.deepEqual(
      (await readdir(dir)).sort(),
      [STATE_FILE, PREVIOUS_STATE_FILE].sort(),
      'no temp file is left behind',
    );
  });

  it('rejects a save it cannot write, and later saves still work', async () => {
    const dir = freshDir();
    await writeFile(dir, 'a file where the directory should be');
    await assert.rejects(saveState(dir, A), /EEXIST|ENOTDIR/);
    const dir2 = freshDir();
    await saveState(dir2, A);
    assert.deepEqual((await loadState(dir2)).state, A);
  });
});
