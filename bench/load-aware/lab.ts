// The lab of bench/load-aware.ts: test/dataplane/topology.ts with N engine namespaces, the built wccpd in the
// gateway with the nft backend (test/dataplane/gw-daemon.ts), one engine.ts per engine namespace (WCCP and the
// counting server) and client.ts in the client namespace. Everything it starts is stopped by PID; stopNow() is the
// synchronous form for exit handlers (SIGINT, a closed stdout).
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { startGwDaemon, type GwDaemon } from '../../test/dataplane/gw-daemon.js';
import { Topology } from '../../test/dataplane/topology.js';
import { killNamespaceProcesses, killTree, processTree } from '../../test/helpers/processes.js';

const ENGINE = fileURLToPath(new URL('./engine.ts', import.meta.url));
const CLIENT = fileURLToPath(new URL('./client.ts', import.meta.url));
const TSX = import.meta.resolve('tsx');

/** An engine's own count: connections received so far at `t` (unix ms), and its buckets in the last I_SEE_YOU. */
export interface EngineSample {
  readonly t: number;
  readonly connections: number;
  readonly buckets: number;
}

/** The client's running totals at `t`. */
export interface ClientSample {
  readonly t: number;
  readonly started: number;
  readonly ok: number;
  readonly failed: number;
  readonly skipped: number;
  readonly answered: Readonly<Record<string, number>>;
}

export interface ClientOptions {
  readonly rate: number;
  readonly seconds: number;
  readonly seed: number;
  readonly exponent: number;
}

/** Lines of a child's stdout, each handed to `on`. */
function lines(child: ChildProcess, on: (fields: string[]) => void): void {
  readline.createInterface({ input: child.stdout! }).on('line', (l) => on(l.trim().split(' ')));
}

export class LoadLab {
  readonly topo: Topology;
  daemon: GwDaemon | null = null;
  readonly engineSamples = new Map<string, EngineSample[]>();
  readonly clientSamples: ClientSample[] = [];
  /** Connections the client started per destination bucket (its last line). */
  clientBuckets: number[] | null = null;
  private readonly children: ChildProcess[] = [];
  private clientDone: Promise<void> | null = null;
  private stopped = false;

  constructor(readonly engineCount: number) {
    this.topo = new Topology('la', engineCount);
  }

  engineAddresses(): string[] {
    return this.topo.engines.map((_, i) => this.topo.engineAddress(i));
  }

  /**
   * Namespaces up, then the daemon (that of checkout `repo`, default this one) with `serviceLines` in service 0, then
   * every engine (each for `seconds`).
   */
  async up(serviceLines: readonly string[], seconds: number, repo?: string): Promise<void> {
    // The engines' servers are engine.ts's own (on :3129, where the namespaces redirect port 80).
    await this.topo.up(false);
    this.daemon = startGwDaemon(this.topo, { backend: 'nft', serviceLines, ...(repo !== undefined ? { repo } : {}) });
    for (const [i, ns] of this.topo.engines.entries()) {
      const address = this.topo.engineAddress(i);
      const samples: EngineSample[] = [];
      this.engineSamples.set(address, samples);
      const args = ['--address', address, '--router', '192.0.2.1', '--seconds', String(seconds)];
      const child = this.spawn(ns, ENGINE, args);
      lines(child, (f) => {
        if (f[0] === 'c') samples.push({ t: Number(f[1]), connections: Number(f[2]), buckets: Number(f[3]) });
      });
    }
  }

  startClient(o: ClientOptions): void {
    const args = ['--rate', String(o.rate), '--seconds', String(o.seconds), '--seed', String(o.seed)];
    const child = this.spawn(this.topo.client, CLIENT, [...args, '--exponent', String(o.exponent)]);
    this.clientDone = new Promise((r) => child.once('exit', () => r()));
    lines(child, (f) => {
      if (f[0] === 's') {
        const answered = Object.fromEntries(
          (f[6] ?? '')
            .split(',')
            .filter((x) => x.includes('='))
            .map((x) => [x.split('=')[0], Number(x.split('=')[1])]),
        );
        this.clientSamples.push({
          t: Number(f[1]),
          started: Number(f[2]),
          ok: Number(f[3]),
          failed: Number(f[4]),
          skipped: Number(f[5]),
          answered,
        });
      } else if (f[0] === 'b') this.clientBuckets = (f[1] ?? '').split(',').map(Number);
    });
  }

  /** Asks the client to stop (its connections in flight end within its timeout) and waits for it. */
  async stopClient(): Promise<void> {
    const c = this.children.find((x) => x.spawnargs.includes(CLIENT));
    c?.stdin?.end();
    await this.clientDone;
  }

  /** CPU seconds so far (user + system, each process and its descendants) of the daemon, the engines, the client. */
  cpu(): { t: number; daemon: number; engines: number; client: number } {
    const of = (children: readonly ChildProcess[]): number =>
      children.reduce((s, c) => s + (c.pid === undefined ? 0 : cpuSeconds(c.pid)), 0);
    return {
      t: Date.now(),
      daemon: this.daemon === null ? 0 : cpuSeconds(this.daemon.pid),
      engines: of(this.children.filter((c) => c.spawnargs.includes(ENGINE))),
      client: of(this.children.filter((c) => c.spawnargs.includes(CLIENT))),
    };
  }

  /** GET on the admin API inside the gateway (asynchronous: the samples keep arriving meanwhile); '' on failure. */
  api(path: string): Promise<string> {
    return new Promise((resolve) => {
      execFile(
        'ip',
        ['netns', 'exec', this.topo.gw, 'curl', '-s', '--max-time', '5', `http://127.0.0.1:8080${path}`],
        { maxBuffer: 16 << 20 },
        (err, out) => resolve(err === null ? out : ''),
      );
    });
  }

  /** Stops everything gracefully (engines and client end their loops, the daemon and namespaces go). */
  async down(): Promise<void> {
    for (const c of this.children) c.stdin?.end();
    await Promise.all(
      this.children.map(
        (c) =>
          new Promise<void>((r) => {
            if (c.exitCode !== null || c.signalCode !== null) return r();
            const t = setTimeout(() => {
              if (c.pid !== undefined) killTree(c.pid);
            }, 5000);
            c.once('exit', () => {
              clearTimeout(t);
              r();
            });
          }),
      ),
    );
    await this.daemon?.close();
    await this.topo.down();
    this.stopped = true;
  }

  /** For exit handlers: every child and the daemon SIGKILLed by PID, then what is left in the namespaces, which go. */
  stopNow(): void {
    if (this.stopped) return;
    this.stopped = true;
    for (const c of this.children) if (c.pid !== undefined && c.exitCode === null) killTree(c.pid);
    if (this.daemon !== null && this.daemon.pid > 0) killTree(this.daemon.pid);
    for (const ns of [this.topo.client, this.topo.gw, this.topo.origin, ...this.topo.engines]) {
      killNamespaceProcesses(ns);
      try {
        execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
      } catch {
        // not created
      }
    }
    if (this.daemon !== null)
      rmSync(this.daemon.config.replace(/\/wccpd\.yaml$/, ''), { recursive: true, force: true });
  }

  private spawn(ns: string, script: string, args: readonly string[]): ChildProcess {
    const child = spawn('ip', ['netns', 'exec', ns, process.execPath, '--import', TSX, script, ...args], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    child.stdin?.on('error', () => undefined);
    this.children.push(child);
    return child;
  }
}

/** CPU seconds (user + system) of `pid` and its descendants, from /proc (clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  let ticks = 0;
  for (const p of processTree(pid)) {
    try {
      const f = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // gone
    }
  }
  return ticks / 100;
}
