// The daemon's side of the relay process (relay-child.ts): starts it, hands it connections, answers its questions
// through the broker, and starts it again when it ends unasked (a crash there ends nothing here: counted, logged,
// restarted after a pause; meanwhile the engines get 504 and go to the origin).
import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { setPriority } from 'node:os';
import type { FromChild, RelaySettings, RequestDecision, ToChild } from './relay-messages.js';

const START_TIMEOUT_MS = 30_000;
/**
 * The relay process's nice value: on a busy gateway the control plane (probes, the router, the API) gets the CPU
 * first, and the relay what is left (docs/warmup.md, "Where the relay runs").
 */
const RELAY_NICE = 10;
const RESTART_MIN_MS = 500;
const RESTART_MAX_MS = 30_000;
/** A process that ran this long before it ended starts again after the shortest pause. */
const STABLE_MS = 60_000;

export interface RelayProcessHooks {
  request(m: Extract<FromChild, { t: 'request' }>): RequestDecision;
  closed(conn: number): void;
  counts(c: Readonly<Record<string, number>>): void;
  log(m: Extract<FromChild, { t: 'log' }>): void;
  sourceFailed(source: string): void;
  /** It ended unasked (every connection it held is gone); `restartInMs`: when it starts again. */
  exited(code: number | null, signal: string | null, restartInMs: number): void;
  restarted(): void;
  restartFailed(err: unknown): void;
}

/** The node flags that load this code (tsx's loader in development and tests); not --test or --inspect. */
function loaderArgs(): string[] {
  const out: string[] = [];
  const a = process.execArgv;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] ?? '';
    if (/^--(import|loader|experimental-loader|require)=/.test(x) || /^-r$/.test(x)) {
      out.push(x);
      if (x === '-r') out.push(a[++i] ?? '');
    } else if (/^--(import|loader|experimental-loader|require)$/.test(x)) {
      out.push(x, a[++i] ?? '');
    }
  }
  return out;
}

const ENTRY = new URL(import.meta.url.endsWith('.ts') ? './relay-child.ts' : './relay-child.js', import.meta.url);

export class RelayProcess {
  private child: ChildProcess | null = null;
  private ready = false;
  private stopping = false;
  private startedAt = 0;
  private pause = RESTART_MIN_MS;
  private restartTimer: ReturnType<typeof setTimeout> | null = null;
  private pings = new Map<number, () => void>();
  private nextPing = 1;

  constructor(
    private settings: RelaySettings,
    private readonly hooks: RelayProcessHooks,
  ) {}

  /** Starts the process; resolves once it can take connections. */
  async start(): Promise<void> {
    const child = fork(ENTRY, [], { execArgv: loaderArgs(), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.child = child;
    this.startedAt = Date.now();
    if (child.pid !== undefined) {
      try {
        setPriority(child.pid, RELAY_NICE);
      } catch {
        // Not allowed (a nice value below the daemon's own needs CAP_SYS_NICE): it runs at the daemon's.
      }
    }
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`the relay process did not start within ${START_TIMEOUT_MS / 1000} s`));
      }, START_TIMEOUT_MS);
      const early = (code: number | null, signal: string | null): void => {
        clearTimeout(timer);
        reject(new Error(`the relay process ended as it started (${signal ?? `exit ${code}`})`));
      };
      child.once('exit', early);
      child.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.on('message', (m: FromChild) => {
        if (m.t === 'ready' && !this.ready) {
          clearTimeout(timer);
          child.off('exit', early);
          this.ready = true;
          resolve();
          return;
        }
        this.onMessage(child, m);
      });
      child.send({ t: 'init', settings: this.settings } satisfies ToChild);
    });
    child.once('exit', (code, signal) => this.onExit(child, code, signal));
  }

  private send(child: ChildProcess, m: ToChild): void {
    if (!child.connected) return;
    try {
      child.send(m);
    } catch {
      // It is ending: onExit follows.
    }
  }

  private onMessage(child: ChildProcess, m: FromChild): void {
    switch (m.t) {
      case 'request':
        this.send(child, { t: 'decision', rid: m.rid, decision: this.hooks.request(m) });
        return;
      case 'closed':
        this.hooks.closed(m.conn);
        return;
      case 'counts':
        this.hooks.counts(m.counts);
        return;
      case 'log':
        this.hooks.log(m);
        return;
      case 'source-failed':
        this.hooks.sourceFailed(m.source);
        return;
      case 'pong':
        this.pings.get(m.n)?.();
        this.pings.delete(m.n);
        return;
      case 'ready':
        return;
    }
  }

  private onExit(child: ChildProcess, code: number | null, signal: string | null): void {
    if (this.child !== child) return;
    this.child = null;
    this.ready = false;
    for (const done of this.pings.values()) done();
    this.pings.clear();
    if (this.stopping) return;
    if (Date.now() - this.startedAt >= STABLE_MS) this.pause = RESTART_MIN_MS;
    this.hooks.exited(code, signal, this.pause);
    this.scheduleRestart();
  }

  private scheduleRestart(): void {
    const wait = this.pause;
    this.pause = Math.min(RESTART_MAX_MS, this.pause * 2);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (this.stopping) return;
      this.start().then(
        () => this.hooks.restarted(),
        (err: unknown) => {
          this.child = null;
          this.hooks.restartFailed(err);
          if (!this.stopping) this.scheduleRestart();
        },
      );
    }, wait);
    this.restartTimer.unref();
  }

  /** Hands a connection over; false when the process cannot take it now (the caller answers the engine). */
  hand(conn: number, socket: Socket): boolean {
    const child = this.child;
    if (child === null || !this.ready || !child.connected) return false;
    try {
      child.send({ t: 'conn', conn } satisfies ToChild, socket, { keepOpen: false }, (err) => {
        if (err) {
          socket.destroy();
          this.hooks.closed(conn);
        }
      });
    } catch {
      return false;
    }
    return true;
  }

  /** New budgets (maxRelayRate, maxObjectBytes) for the relays that start from now on. */
  update(settings: RelaySettings): void {
    this.settings = settings;
    if (this.child) this.send(this.child, { t: 'settings', settings });
  }

  /** Resolves once every counter and closed connection the process had to report before now has arrived. */
  settled(): Promise<void> {
    const child = this.child;
    if (child === null || !this.ready) return Promise.resolve();
    const n = this.nextPing++;
    return new Promise((resolve) => {
      this.pings.set(n, resolve);
      this.send(child, { t: 'ping', n });
    });
  }

  /** The process's PID while it takes connections. */
  pid(): number | null {
    return this.ready ? (this.child?.pid ?? null) : null;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.restartTimer !== null) clearTimeout(this.restartTimer);
    const child = this.child;
    if (child === null) return;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    this.send(child, { t: 'stop' });
    const timer = setTimeout(() => child.kill('SIGKILL'), 2000);
    await exited;
    clearTimeout(timer);
  }
}
