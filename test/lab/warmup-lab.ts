// The warm-up lab both warm-up lab tests share: wccpd with its broker, two Debian Squid 5.7 engines started together
// (docs/warmup.md's sibling lines), one object per bucket on an origin that counts fetches, and a hot-inserted third
// Squid. What each object's fetch went through is read from the newcomer's access.log, the origin's counts and the
// broker's counters, so a test asserts what the protocol promises instead of how fast a loaded machine was.
import assert from 'node:assert/strict';
import { createLab, originAddressForBucket, ROUTER_ADDRESS, type AccessLogEntry, type Lab } from './lab.js';
import { getBuckets, getJson, shares, startDaemon, waitUntil, writeLabConfig, type Daemon } from '../e2e/harness.js';
import type { EnginesView, StatusView } from '../../src/admin/api-types.js';

/** The lab's `minSourceHold`: engines 1 and 2 register within it of each other, and hold their buckets longer before
 * engine 3 comes. */
export const SOURCE_HOLD_MS = 15_000;
export const PEER_TIMEOUT_MS = 100;

export interface WarmupLab {
  readonly lab: Lab;
  readonly daemon: Daemon;
  /** One object per bucket (the origin address hashing to it), max-age 3600: fresh through the whole test. */
  readonly urls: readonly string[];
  /** How often the origin served each URL. */
  originCounts(): Promise<(url: string) => number>;
  /** The broker's counters (GET /api/v1/status `warmup`). */
  broker(): Promise<Record<string, number>>;
  /**
   * Starts engine 3 once engines 1 and 2 have held their buckets SOURCE_HOLD_MS, and waits for its share. Returns the
   * table before and after, and the newcomer's address.
   */
  insertNewcomer(): Promise<{ old: readonly (string | null)[]; now: readonly (string | null)[]; newcomer: string }>;
  /** The newcomer's access.log lines after line `from` for `urls`, once there is one for each (Squid logs at the end).
   * */
  newcomerLines(from: number, urls: readonly string[]): Promise<Map<string, AccessLogEntry>>;
}

/** How the newcomer got each of `urls` (its access.log): through the broker, or from the origin after Squid waited out
 * its ICP timeout, or from the origin after an ICP MISS. */
export function split(
  lines: ReadonlyMap<string, AccessLogEntry>,
  urls: readonly string[],
): { viaBroker: string[]; icpTimeout: string[]; direct: string[] } {
  const out = { viaBroker: [] as string[], icpTimeout: [] as string[], direct: [] as string[] };
  for (const u of urls) {
    const e = lines.get(u);
    if (e?.hierarchy === 'SIBLING_HIT' && e.peer === ROUTER_ADDRESS) out.viaBroker.push(u);
    else if (e?.hierarchy.startsWith('TIMEOUT_')) out.icpTimeout.push(u);
    else out.direct.push(u);
  }
  return out;
}

export async function startWarmupLab(name: string, tag: string): Promise<WarmupLab> {
  const lab = await createLab({ engines: 3, name });
  try {
    await lab.startOrigin();
    const config = writeLabConfig(lab, 'wccpd', {
      top: ['warmup:', `  listen: ${ROUTER_ADDRESS}`],
      services: [
        '  - id: 0',
        '    clientInterfaces: [c0]',
        '    engines:',
        '      allow: [192.0.2.0/24]',
        `    warmup: { duration: 5m, peerTimeout: ${PEER_TIMEOUT_MS}ms, minSourceHold: ${SOURCE_HOLD_MS / 1000}s }`,
      ],
    });
    const daemon = await startDaemon(lab, config);
    const buckets = () => getBuckets(lab).catch(() => null);
    await Promise.all([1, 2].map((i) => lab.startSquid(i, { sibling: ROUTER_ADDRESS })));
    const shared = await waitUntil(buckets, (v) => v !== null && shares(v.buckets).get(lab.engineAddress(1)) === 128, {
      timeoutMs: 60_000,
      intervalMs: 200,
      what: 'two Squids sharing the buckets',
    });
    // A farm that starts warms nothing: engine 2 took its half from an engine heard a moment before (minSourceHold).
    const engines = await getJson<EnginesView>(lab, 'services/0/engines');
    assert.deepEqual(
      engines.engines.filter((e) => e.flags.warming || e.warmup !== null).map((e) => e.address),
      [],
      'engines that start together warm nothing from each other',
    );

    const urls = Array.from({ length: 256 }, (_, b) => `http://${originAddressForBucket(b)}/long/${name}/${tag}/${b}`);
    return {
      lab,
      daemon,
      urls,
      async originCounts() {
        const r = await lab.curl(`http://${originAddressForBucket(0)}/_counts`, { ns: lab.ns.origin });
        assert.equal(r.status, 200, r.error);
        const c = r.json as Record<string, number>;
        return (url) => {
          const u = new URL(url);
          return c[`${u.hostname} ${u.pathname}`] ?? 0;
        };
      },
      // The API may be slow on a loaded machine: a timed-out read is retried (bounded), not a failure.
      async broker() {
        const s = await waitUntil(
          () => getJson<StatusView>(lab, 'status').catch(() => null),
          (v) => v !== null,
          { timeoutMs: 30_000, intervalMs: 500, what: 'the status API' },
        );
        return s.value?.warmup ?? {};
      },
      async insertNewcomer() {
        const wait = shared.at + SOURCE_HOLD_MS + 1000 - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const old = (await getBuckets(lab)).buckets;
        await lab.startSquid(3, { sibling: ROUTER_ADDRESS });
        const newcomer = lab.engineAddress(3);
        const table = await waitUntil(buckets, (v) => v !== null && (shares(v.buckets).get(newcomer) ?? 0) >= 85, {
          timeoutMs: 60_000,
          intervalMs: 200,
          what: 'the newcomer holding its share',
        });
        const view = await getJson<EnginesView>(lab, 'services/0/engines');
        assert.equal(view.engines.find((e) => e.address === newcomer)?.flags.warming, true, 'the newcomer is warming');
        return { old, now: table.value?.buckets ?? [], newcomer };
      },
      async newcomerLines(from, want) {
        const set = new Set(want);
        const lines = await waitUntil(
          async () =>
            lab
              .squidAccessLog(3)
              .slice(from)
              .filter((e) => set.has(e.url)),
          (l) => new Set(l.map((e) => e.url)).size >= set.size,
          { timeoutMs: 15_000, intervalMs: 200, what: "the newcomer's access.log lines" },
        );
        return new Map(lines.value.map((e) => [e.url, e]));
      },
    };
  } catch (e) {
    await lab.destroy();
    throw e;
  }
}
