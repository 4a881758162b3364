// Soak: one engine flaps. A strict test engine sends 10,000 HERE_I_AMs to a real wccpd over UDP on loopback, each
// echoing the Receive ID it got last and alternating its Assignment Weight (or, with --capability, its forwarding
// method), while a second engine holds the rest of the table. Prints the table changes the daemon made (its JSON
// log), the requests timers.settle coalesced (status API), and the most changes seen in any one settle interval.
//   npx tsx bench/soak/churn.ts [--count 10000] [--capability]
import { startDaemon } from '../../test/helpers/daemon.js';
import { TestEngine } from '../../test/helpers/wccp-engine.js';
import type { StatusView } from '../../src/admin/api-types.js';
import { checkArgs, orExit } from '../cli.js';

const CLI = {
  name: 'bench/soak/churn',
  usage: `usage: npx tsx bench/soak/churn.ts [--count 10000] [--capability]
One engine flaps against a real wccpd on loopback: --count HERE_I_AMs (default 10,000), alternating its Assignment
Weight, or with --capability its forwarding method; prints the table changes made, the requests timers.settle
coalesced and the most changes in one settle interval.`,
  values: ['--count'],
  switches: ['--capability'],
};
const args = orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));
const count = Number(args[args.indexOf('--count') + 1] ?? 10_000) || 10_000;
const capability = args.includes('--capability');
const SETTLE_MS = 250; // the default timers.settle the daemon runs with

const daemon = await startDaemon();
const router = { address: '127.0.0.1', port: daemon.udpPort };
const steady = new TestEngine({ address: '127.0.0.12', router });
const flapping: {
  address: string;
  router: typeof router;
  weight: number;
  capabilities: { forwarding: number; assignment: number; return: number };
} = {
  address: '127.0.0.11',
  router,
  weight: 10_000,
  capabilities: { forwarding: 0x2, assignment: 0x1, return: 0x2 },
};
const engine = new TestEngine(flapping);
try {
  await steady.start();
  await engine.start();
  for (const e of [engine, steady, engine, steady]) await e.hereIAm();
  await new Promise((r) => setTimeout(r, 2 * SETTLE_MS));
  const logStart = daemon.output.join('').length;
  const started = Date.now();
  let answered = 0;
  for (let i = 0; i < count; i++) {
    if (capability) flapping.capabilities = { ...flapping.capabilities, forwarding: i % 2 === 0 ? 0x1 : 0x2 };
    else flapping.weight = i % 2 === 0 ? 30_000 : 10_000;
    if (await engine.hereIAm({ timeoutMs: 2000 })) answered++;
  }
  const elapsedMs = Date.now() - started;
  await new Promise((r) => setTimeout(r, 4 * SETTLE_MS));
  const lines = daemon.output
    .join('')
    .slice(logStart)
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { event?: string; time?: number; to?: string });
  const tables = lines.filter((l) => l.event === 'table').map((l) => l.time ?? 0);
  const states = lines.filter((l) => l.event === 'engine-state').length;
  // Log times are taken when each line is written (ms resolution, a little after the change), so a window a couple
  // of ms shorter than settle is what the lines can show.
  const WINDOW_MS = SETTLE_MS - 2;
  let most = 0;
  for (let i = 0, j = 0; i < tables.length; i++) {
    while ((tables[i] ?? 0) - (tables[j] ?? 0) >= WINDOW_MS) j++;
    most = Math.max(most, i - j + 1);
  }
  const gaps = tables.slice(1).map((t, i) => t - (tables[i] ?? 0));
  const status = (await (await fetch(`${daemon.url}/api/v1/status`)).json()) as StatusView;
  const svc = status.services[0];
  const perSettle = tables.length / Math.max(1, (elapsedMs + 4 * SETTLE_MS) / SETTLE_MS);
  console.log(
    `churn: ${count} HERE_I_AMs alternating ${capability ? 'the forwarding method (GRE/L2)' : 'the weight (30000/10000)'} from 127.0.0.11, ${answered} answered, in ${(elapsedMs / 1000).toFixed(1)} s (${Math.round(count / (elapsedMs / 1000))}/s)`,
  );
  console.log(`  table changes              ${tables.length}   (per HERE_I_AM: ${(tables.length / count).toFixed(4)})`);
  console.log(`  coalesced (status)         ${svc?.counters.tableChangesCoalesced ?? '?'}`);
  console.log(`  most in one ${WINDOW_MS} ms window   ${most}   (bound 1; log timestamps)`);
  console.log(
    `  changes per settle interval ${perSettle.toFixed(2)} on average; shortest gap ${gaps.length > 0 ? Math.min(...gaps) : '-'} ms`,
  );
  console.log(
    `  engine-state log lines     ${states}   (the flapping engine's own transitions: at most 3 a second, then one counting the rest)`,
  );
  console.log(`  all log lines              ${lines.length}`);
} finally {
  await engine.stop();
  await steady.stop();
  await daemon.stop();
}
