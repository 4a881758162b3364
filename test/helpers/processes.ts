// A process and everything it started, for tests whose children start children of their own (strace and the daemon
// it traces, a daemon and its nft and ip): killing only the first leaves the rest running, holding the test's pipes.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** `pid` and its descendants (from /proc, every thread's children), parents before children. */
export function processTree(pid: number): number[] {
  const out: number[] = [];
  const walk = (p: number): void => {
    if (out.includes(p)) return;
    out.push(p);
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${p}/task`);
    } catch {
      return; // gone
    }
    for (const t of tasks) {
      let children = '';
      try {
        children = readFileSync(`/proc/${p}/task/${t}/children`, 'utf8');
      } catch {
        continue;
      }
      for (const c of children.trim().split(/\s+/).filter(Boolean)) walk(Number(c));
    }
  };
  walk(pid);
  return out;
}

/** SIGKILLs `pid` and every descendant, all read before the first signal (a killed parent's children move to init). */
export function killTree(pid: number): void {
  for (const p of processTree(pid)) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
}

/** `p`, or an Error naming `what` after `ms`: an await that cannot hang a test file. */
export async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * SIGKILLs every process still in network namespace `ns` (`ip netns pids`), before it is deleted: one left there (a
 * SIGKILLed daemon's `nft monitor`, a server a test forgot) would run on for ever in the deleted namespace.
 * Synchronous, for exit handlers; a namespace that does not exist is nothing to do.
 */
export function killNamespaceProcesses(ns: string): void {
  let pids = '';
  try {
    pids = execFileSync('ip', ['netns', 'pids', ns], {
      encoding: 'utf8',
      timeout: 2000,
      stdio: ['ignore', 'pipe', 'ignore'],
    });
  } catch {
    return; // no such namespace
  }
  for (const p of pids.split(/\s+/).filter(Boolean)) {
    try {
      process.kill(Number(p), 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}
