// What the userland namespace tests share: commands in namespaces with errors that say what failed, process stops by
// PID, and the gateway process (bin/userland-gw.ts) that runs the userland backend inside the gw namespace.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import assert from 'node:assert/strict';
import { createInterface } from 'node:readline';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { ServiceRedirect } from '../../src/dataplane/redirector.js';
import type { Topology } from './topology.js';

const GATEWAY_MAIN = fileURLToPath(new URL('./bin/userland-gw.ts', import.meta.url));

export function sh(args: string[], timeout = 20_000): string {
  try {
    return execFileSync(args[0] ?? 'true', args.slice(1), {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout,
    });
  } catch (e) {
    const err = e as { stderr?: string; signal?: string | null; status?: number | null };
    throw new Error(
      `${args.join(' ').slice(0, 200)} failed (exit ${err.status ?? '-'}, signal ${err.signal ?? '-'}): ` +
        `${String(err.stderr ?? '')
          .trim()
          .slice(0, 500)}`,
    );
  }
}

export const nsx = (ns: string, args: string[], timeout?: number): string =>
  sh(['ip', 'netns', 'exec', ns, ...args], timeout);

/** SIGTERM, then SIGKILL after 3 s; resolves when the process has exited. */
export function stopProcess(p: ChildProcess | undefined): Promise<void> {
  if (p === undefined || p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      p.kill('SIGKILL');
    }, 3000);
    p.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    p.kill('SIGTERM');
  });
}

export function deleteNamespaces(names: readonly string[]): void {
  for (const n of names) {
    try {
      sh(['ip', 'netns', 'del', n]);
    } catch {
      /* not created */
    }
  }
}

export interface UserlandGateway {
  readonly proc: ChildProcess;
  /** {ready, native, reason} once the service is applied. */
  readonly ready: Record<string, unknown>;
  /** The backend's stats() now (flows left out). */
  stats(): Promise<Record<string, unknown>>;
  /** The backend's restored() now (the guard table put back). */
  restored(): Promise<Record<string, unknown>>;
  /** What the backend logged so far: `<level> <message>` each. */
  log(): Promise<string[]>;
  /** Asks the gateway to stop; resolves with its {engines, buckets, stats}. */
  stop(): Promise<Record<string, unknown>>;
}

export async function startUserlandGateway(ns: string, service: ServiceRedirect): Promise<UserlandGateway> {
  const proc = spawn('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', GATEWAY_MAIN], {
    env: { ...process.env, WCCPD_USERLAND_SERVICE: JSON.stringify(service) },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: proc.stdout as NodeJS.ReadableStream })[Symbol.asyncIterator]();
  const next = async (): Promise<Record<string, unknown>> => {
    for (let r = await lines.next(); r.done !== true; r = await lines.next()) {
      if (r.value.startsWith('{')) return JSON.parse(r.value) as Record<string, unknown>;
    }
    throw new Error('the gateway process ended without answering');
  };
  const ready = await next();
  return {
    proc,
    ready,
    async stats() {
      const answer = next();
      proc.stdin?.write('stats\n');
      return answer;
    },
    async restored() {
      const answer = next();
      proc.stdin?.write('restored\n');
      return answer;
    },
    async log() {
      const answer = next();
      proc.stdin?.write('log\n');
      return (await answer).log as string[];
    },
    async stop() {
      const answer = next();
      proc.stdin?.write('stop\n');
      const result = await answer;
      await stopProcess(proc);
      return result;
    },
  };
}

/**
 * A suite's gateway with the native addons: before its tests, `topo` up and the gateway started (native packet I/O
 * asserted); after them, the gateway stopped and `topo` down. Returns the started gateway.
 */
export function nativeUserlandGateway(
  topo: Pick<Topology, 'gw' | 'up' | 'down'>,
  service: ServiceRedirect,
): () => UserlandGateway {
  let gw: UserlandGateway | undefined;
  before(async () => {
    await topo.up();
    gw = await startUserlandGateway(topo.gw, service);
    assert.equal(gw.ready.native, true, `native packet I/O: ${String(gw.ready.reason)}`);
  });
  after(async () => {
    try {
      // A test may have stopped it already (to read its final counts).
      if (gw !== undefined && gw.proc.exitCode === null && gw.proc.signalCode === null) await gw.stop();
    } finally {
      await topo.down();
    }
  });
  return () => {
    if (gw === undefined) throw new Error('the userland gateway has not started');
    return gw;
  };
}
