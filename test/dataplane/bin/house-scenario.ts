// One scenario with a checkout's built daemon in a namespace lab of our own (test/dataplane/topology.ts, 3 engines),
// dumping what it installed in the gateway at each point: start, each of 3 engines joined, the second one gone, the
// third drained through the admin API, stopped. scripts/house-check runs it for two commits and diffs the dumps.
// Run as root: npx tsx test/dataplane/bin/house-scenario.ts --repo DIR --backend nft|ingress --out DIR
// Bounded (--timeout-s, default 240); the namespaces and processes it made are removed by PID on every exit.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { BucketsView, EnginesView, StatusView } from '../../../src/admin/api-types.js';
import { waitFor } from '../../helpers/daemon.js';
import { within } from '../../helpers/processes.js';
import { startGwDaemon, type GwDaemon } from '../gw-daemon.js';
import { Topology } from '../topology.js';

const { values } = parseArgs({
  options: {
    repo: { type: 'string' },
    backend: { type: 'string' },
    out: { type: 'string' },
    'timeout-s': { type: 'string', default: '240' },
  },
});
const { repo, backend, out } = values;
if (repo === undefined || out === undefined || (backend !== 'nft' && backend !== 'ingress')) {
  console.error('usage: house-scenario --repo DIR --backend nft|ingress --out DIR [--timeout-s N]');
  process.exit(2);
}

const topo = new Topology('hc', 3);
let daemon: GwDaemon | undefined;
let cleaning: Promise<void> | null = null;
const cleanUp = (): Promise<void> =>
  (cleaning ??= (async () => {
    await daemon?.close().catch(() => undefined);
    await topo.down().catch(() => undefined);
  })());
const bail = (why: string) => {
  console.error(`house-scenario (${backend}): ${why}`);
  void cleanUp().then(() => process.exit(1));
};
process.on('SIGINT', () => bail('interrupted'));
process.on('SIGTERM', () => bail('terminated'));
const deadline = setTimeout(() => bail(`not done within ${values['timeout-s']} s`), Number(values['timeout-s']) * 1000);

/** What the daemon installed, in the gateway's namespace; figures that move with time or traffic left out. */
function dump(): string {
  const ruleset = topo
    .inGw('nft list ruleset')
    .replace(/packets \d+ bytes \d+/g, 'packets N bytes N')
    .replace(/ expires [0-9hms]+/g, '');
  const routes = topo
    .inGw('ip route show table all')
    .split('\n')
    .filter((l) => !/fe80:/.test(l))
    .join('\n');
  return `## nft list ruleset\n${ruleset}\n## ip rule\n${topo.inGw('ip rule')}\n## ip route show table all (no fe80::)\n${routes}\n`;
}

const json = <T>(path: string): T | null => {
  const text = daemon?.api(path) ?? '';
  return text === '' ? null : (JSON.parse(text) as T);
};

/** The table decided is in force, no bucket is in a move, and two reads a second apart install the same. */
async function settled(what: string): Promise<string> {
  return waitFor(
    `${what}: a steady gateway`,
    async () => {
      const s = json<StatusView>('/api/v1/status')?.services[0];
      if (s === undefined) return null;
      if (s.inForce !== null && s.inForce.changeNumber !== s.changeNumber) return null;
      if ((s.movedBuckets ?? 0) !== 0) return null;
      const first = dump();
      await new Promise((r) => setTimeout(r, 1000));
      return dump() === first ? first : null;
    },
    60_000,
  );
}

let step = 0;
async function record(name: string, dumped?: string): Promise<void> {
  const text = dumped ?? (await settled(name));
  const buckets = json<BucketsView>('/api/v1/services/0/buckets');
  const table = buckets === null ? '' : `## buckets (change ${buckets.changeNumber})\n${buckets.buckets.join(' ')}\n`;
  step++;
  writeFileSync(join(out!, `${String(step).padStart(2, '0')}-${name}.txt`), text + table);
  console.log(`${backend}: ${name}`);
}

const engineState = (i: number) =>
  json<EnginesView>('/api/v1/services/0/engines')?.engines.find((e) => e.address === topo.engineAddress(i));

try {
  mkdirSync(out, { recursive: true });
  await topo.up(false);
  daemon = startGwDaemon(topo, { backend, repo, ...(backend === 'ingress' ? { flowsIdle: '10s' } : {}) });
  const d = daemon;
  await waitFor('the daemon listening', async () => (d.api('/api/v1/status') !== '' ? true : null), 30_000);
  await record('start');
  for (let i = 0; i < 3; i++) {
    d.startEngine(600, i);
    const holds = () => engineState(i)?.state === 'usable' && (engineState(i)?.buckets ?? 0) > 0;
    await waitFor(`engine ${i + 1} usable with buckets`, async () => holds() || null, 30_000);
    await record(`join-${i + 1}`);
  }
  await d.stopEngine(1);
  await waitFor('engine 2 gone', async () => (engineState(1)?.state ?? 'gone') === 'gone' || null, 30_000);
  await record('leave-2');
  const drained = topo.inGw(
    `curl -s --max-time 10 -X POST -H 'Authorization: Bearer t' ` +
      `http://127.0.0.1:8080/api/v1/services/0/engines/${topo.engineAddress(2)}/drain`,
  );
  if (!/drained/.test(drained)) throw new Error(`drain refused: ${drained}`);
  await waitFor('engine 3 without buckets', async () => (engineState(2)?.buckets === 0 ? true : null), 30_000);
  await record('drain-3');
  process.kill(d.pid, 'SIGTERM');
  const code = await within(d.exited, 30_000, 'the daemon after SIGTERM');
  await record(`stopped-${String(code)}`, dump());
} catch (e) {
  console.error(`house-scenario (${backend}): ${(e as Error).message}`);
  console.error(daemon?.output.join('').split('\n').slice(-20).join('\n') ?? '');
  process.exitCode = 1;
} finally {
  clearTimeout(deadline);
  await cleanUp();
}
