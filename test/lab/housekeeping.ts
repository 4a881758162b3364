// What a lab holds of the host (its namespaces, its temporary dir, the processes it spawned in them) and how it gives
// it all back: at destroy(), or synchronously at exit if the test process ends without it. lab.ts and ha-lab.ts each
// keep one.
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { LabError } from './errors.js';
import { isGone, run, terminate, waitGone } from './proc.js';
import { spawnInNs, type LabProcess } from './process.js';
import { killNamespaceProcesses } from '../helpers/processes.js';

export interface TeardownTimes {
  /** How long the tracked processes other than Squid get between SIGTERM and SIGKILL. */
  readonly graceMs: number;
  /** How long the strays and the survivors get to be gone after SIGKILL. */
  readonly goneMs: number;
}

export interface LabHousekeeping {
  /** The running Squid of each engine number; spawned with spawn() by the lab, set and deleted by it. */
  readonly squids: Map<number, LabProcess>;
  /** Starts a long-running command in a namespace, tracked by PID until it exits. */
  spawn(ns: string, cmd: string, args: readonly string[], env?: NodeJS.ProcessEnv): LabProcess;
  /**
   * Gives everything back: the Squids are killed at once (their clean shutdown takes ~2.5 s and nothing here needs
   * it), the other tracked processes get `graceMs`, then anything still in a lab namespace (a helper someone forked,
   * keepalived's VRRP child) is killed; the namespaces and the dir are removed. Resolves with those strays, or null
   * when it ran already; throws if a process survived SIGKILL.
   */
  teardown(times: TeardownTimes): Promise<number[] | null>;
}

export function labHousekeeping(allNs: readonly string[], dir: string): LabHousekeeping {
  const tracked = new Map<number, LabProcess>();
  const squids = new Map<number, LabProcess>();
  let destroyed = false;

  // Synchronous last resort if the test process exits without destroy().
  const onExit = (): void => {
    if (destroyed) return;
    for (const pid of tracked.keys()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    for (const n of allNs) {
      killNamespaceProcesses(n);
      try {
        execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore', timeout: 2000 });
      } catch {
        /* already gone */
      }
      rmSync(`/etc/netns/${n}`, { recursive: true, force: true });
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', onExit);

  const spawn = (n: string, cmd: string, args: readonly string[], env?: NodeJS.ProcessEnv): LabProcess => {
    if (destroyed) throw new LabError('lab already destroyed');
    const p = spawnInNs(n, cmd, args, env);
    tracked.set(p.pid, p);
    void p.exited.then(() => tracked.delete(p.pid));
    return p;
  };

  async function teardown({ graceMs, goneMs }: TeardownTimes): Promise<number[] | null> {
    if (destroyed) return null;
    destroyed = true;
    const squidPids = [...squids.values()].map((p) => p.pid);
    for (const pid of squidPids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    const others = [...tracked.keys()].filter((p) => !squidPids.includes(p));
    const survivors = [...(await terminate(others, graceMs)), ...(await waitGone(squidPids, 2000))];
    const strays: number[] = [];
    for (const n of allNs) {
      const r = await run('ip', ['netns', 'pids', n], { allowFail: true, timeoutMs: 2000 });
      for (const p of r.stdout.split(/\s+/).filter(Boolean).map(Number)) if (!isGone(p)) strays.push(p);
    }
    for (const p of strays) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    const left = await waitGone([...strays, ...survivors], goneMs);
    for (const n of allNs) {
      await run('ip', ['netns', 'del', n], { allowFail: true, timeoutMs: 5000 });
      rmSync(`/etc/netns/${n}`, { recursive: true, force: true });
    }
    rmSync(dir, { recursive: true, force: true });
    process.off('exit', onExit);
    if (left.length > 0) throw new LabError(`destroy: processes ${left.join(', ')} survived SIGKILL`);
    return strays;
  }

  return { squids, spawn, teardown };
}
