// The soak bench in one run: the three abuse scenarios of docs/operations.md one after the other, each printing its
// own figures (churn coalesced by timers.settle, log lines bounded per reason, event-stream memory), then a line per
// scenario with its exit status. Builds dist/ first (sse.ts runs the built daemon).
//   npx tsx bench/soak/all.ts
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { checkArgs, orExit } from '../cli.js';

const CLI = {
  name: 'bench/soak/all',
  usage: `usage: npx tsx bench/soak/all.ts
Builds dist/, then runs bench/soak/churn.ts, logs.ts and sse.ts one after the other with their defaults, and prints a
line per scenario with its exit status (exit 1 if any failed). Takes no options; run a scenario alone for its own.`,
};
orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));

const root = fileURLToPath(new URL('../../', import.meta.url));
const build = spawnSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);

const results: { name: string; status: number | null }[] = [];
for (const name of ['churn', 'logs', 'sse']) {
  console.log(`\n=== bench/soak/${name}.ts`);
  const r = spawnSync(process.execPath, ['--import', 'tsx', `bench/soak/${name}.ts`], { cwd: root, stdio: 'inherit' });
  results.push({ name, status: r.status });
}
console.log('\nsoak summary');
for (const { name, status } of results)
  console.log(`  ${name.padEnd(6)} ${status === 0 ? 'ok' : `failed (exit ${status})`}`);
process.exit(results.every((r) => r.status === 0) ? 0 : 1);
