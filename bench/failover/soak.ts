// bench/failover --soak: healthy Squid engines behind 20% packet loss in both directions (nft `numgen random` drop
// rules in each engine's namespace, on every IP packet of its link: WCCP, probes, all) while both CPUs are busy
// (bounded busy-loop workers), for 10 minutes, with wccpd's defaults. Counts false removals: a healthy engine leaving
// `usable` (the daemon's engine-state events) or losing a bucket (the table, polled every second). Must be 0.
import { spawn } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { createLab } from '../../test/lab/lab.js';
import { terminate } from '../../test/lab/proc.js';
import { getBuckets, getEngines, startDaemon, writeConfig } from '../../test/e2e/harness.js';
import { sleep } from './client.js';

const ENGINES = 3;
const LOSS_TABLE = 'wccpbenchloss';

function lossRules(percent: number): string {
  return [
    `table inet ${LOSS_TABLE} {`,
    ' chain in {',
    '  type filter hook prerouting priority -300; policy accept;',
    '  iifname "eth0" counter',
    `  iifname "eth0" numgen random mod 100 < ${percent} counter drop`,
    ' }',
    ' chain out {',
    '  type filter hook postrouting priority 300; policy accept;',
    '  oifname "eth0" counter',
    `  oifname "eth0" numgen random mod 100 < ${percent} counter drop`,
    ' }',
    '}',
    '',
  ].join('\n');
}

export async function runSoak(o: { minutes: number; lossPercent: number }): Promise<number> {
  const started = new Date();
  const durationMs = o.minutes * 60_000;
  console.log(
    `bench/failover --soak ${started.toISOString()}: ${ENGINES} Debian Squid engines, wccpd defaults, ` +
      `${o.lossPercent}% loss each way on every engine link, ${cpus().length} busy-loop workers, ${o.minutes} min; ` +
      `load average before ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}`,
  );
  const lab = await createLab({ engines: ENGINES, name: 'fosoak' });
  const workers: number[] = [];
  try {
    for (let i = 1; i <= ENGINES; i++) await lab.startSquid(i);
    const daemon = await startDaemon(lab, writeConfig(lab, 'soak', {}));
    let initial: (string | null)[] = [];
    const deadline0 = Date.now() + 60_000;
    while (Date.now() < deadline0) {
      const got = await Promise.all([getEngines(lab), getBuckets(lab)]).catch(() => null);
      if (got === null) {
        await sleep(200);
        continue;
      }
      const [e, b] = got;
      if (
        e.engines.filter((x) => x.state === 'usable' && x.buckets > 0).length === ENGINES &&
        !b.buckets.includes(null)
      ) {
        initial = [...b.buckets];
        break;
      }
      await sleep(200);
    }
    if (initial.length === 0) throw new Error('the engines did not all become usable within 60 s');
    for (let i = 1; i <= ENGINES; i++) {
      await lab.exec(lab.engineNs(i), 'nft', ['-f', '-'], { input: lossRules(o.lossPercent) });
    }
    // Busy loops that end by themselves a little after the soak, whatever happens to this process.
    const busyMs = durationMs + 30_000;
    for (let c = 0; c < cpus().length; c++) {
      const w = spawn(
        process.execPath,
        ['-e', `const end = Date.now() + ${busyMs}; let x = 0; while (Date.now() < end) x++;`],
        { stdio: 'ignore' },
      );
      if (w.pid !== undefined) workers.push(w.pid);
    }
    const t0 = Date.now();
    let polls = 0;
    let pollErrors = 0;
    let lostBuckets = 0;
    const losers = new Set<string>();
    let slowest = 0;
    let lastReport = t0;
    while (Date.now() - t0 < durationMs) {
      const p0 = Date.now();
      try {
        const b = (await getBuckets(lab)).buckets;
        polls++;
        const lost = b.flatMap((a, i) => (a !== initial[i] ? [i] : []));
        if (lost.length > 0) {
          lostBuckets++;
          for (const i of lost) losers.add(initial[i] ?? 'none');
          console.log(
            `  ${((Date.now() - t0) / 1000).toFixed(0)} s: ${lost.length} buckets moved away from ${[...new Set(lost.map((i) => initial[i]))].join(', ')}`,
          );
        }
      } catch (err) {
        pollErrors++;
        if (pollErrors <= 5) console.log(`  poll failed: ${(err as Error).message.split('\n')[0]?.slice(0, 200)}`);
      }
      slowest = Math.max(slowest, Date.now() - p0);
      if (Date.now() - lastReport >= 60_000) {
        lastReport = Date.now();
        console.log(
          `  ${((lastReport - t0) / 60_000).toFixed(0)} min: ${polls} polls, tables with a moved bucket ${lostBuckets}`,
        );
      }
      await sleep(Math.max(0, 1000 - (Date.now() - p0)));
    }
    const end = Date.now();
    // The daemon's log is the record that misses nothing (a poll can time out on a starved gateway): read it first.
    const states = daemon.proc
      .lines()
      .filter((l) => l.startsWith('{'))
      .map((l) => {
        try {
          return JSON.parse(l) as {
            time: number;
            event?: string;
            engine?: string;
            from?: string;
            to?: string;
            reason?: string;
          };
        } catch {
          return null;
        }
      })
      .filter((e) => e !== null && e.event === 'engine-state' && e.time >= t0 && e.time <= end);
    const removals = states.filter((e) => e?.from === 'usable');
    for (const e of removals) console.log(`  false removal: ${e?.engine} ${e?.from} -> ${e?.to}: ${e?.reason}`);
    const seen: string[] = [];
    for (let i = 1; i <= ENGINES; i++) {
      const r = await lab.exec(lab.engineNs(i), 'nft', ['list', 'table', 'inet', LOSS_TABLE]);
      const c = [...r.stdout.matchAll(/counter packets (\d+)/g)].map((m) => Number(m[1]));
      const [inAll = 0, inDrop = 0, outAll = 0, outDrop = 0] = c;
      seen.push(
        `engine${i} in ${((100 * inDrop) / Math.max(1, inAll)).toFixed(1)}% of ${inAll}, out ${((100 * outDrop) / Math.max(1, outAll)).toFixed(1)}% of ${outAll}`,
      );
      await lab.exec(lab.engineNs(i), 'nft', ['delete', 'table', 'inet', LOSS_TABLE]);
    }
    console.log(`  packets dropped: ${seen.join('; ')}`);
    const engines = await getEngines(lab).catch(() => null);
    console.log(
      `  engines at the end: ${engines?.engines.map((e) => `${e.address} ${e.state} ${e.buckets}`).join(', ') ?? '(API did not answer)'}`,
    );
    const falseRemovals = removals.length + (removals.length === 0 && lostBuckets > 0 ? losers.size : 0);
    console.log(
      `\nsoak ${started.toISOString().slice(0, 10)}: ${((end - t0) / 60_000).toFixed(1)} min, ${o.lossPercent}% loss each way, ` +
        `CPUs busy: false removals ${falseRemovals} (engine-state events leaving usable: ${removals.length}; polled tables with ` +
        `a moved bucket: ${lostBuckets} of ${polls}; failed polls ${pollErrors}; slowest poll ${slowest} ms); target 0: ` +
        `${falseRemovals === 0 ? 'met' : 'MISSED'}`,
    );
    return falseRemovals === 0 && polls > 0 ? 0 : 1;
  } finally {
    await terminate(workers, 500);
    await lab.destroy();
  }
}
