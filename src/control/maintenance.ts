// Maintenance windows on a schedule: node-cron parses each window's cron text, fires at its starts and says when the
// next one comes; a timer ends each occurrence after its duration. The cluster gets start/end/next through
// setMaintenance() and drains the engines the window covers (apart from any admin drain). A window already running
// when wccpd starts (a restart inside the window) is found by matching the cron text backwards over one duration.
// Starts are wall-clock times (cron texts are); a window's length is monotonic time, so a clock step while it runs
// neither stretches nor shortens it (docs/operations.md, "Clock steps").
import { createTask } from 'node-cron';
import type { MaintenanceWindowState } from '../cluster/index.js';
import type { WallClock } from '../clock.js';
import type { Log } from '../log.js';

export interface MaintenanceWindow {
  readonly key: string;
  readonly service: number;
  readonly engine: string | null;
  readonly cron: string;
  readonly durationMs: number;
  readonly timezone: string | null;
}

/** The part of a node-cron task used here. */
export interface CronTask {
  match(date: Date): boolean;
  getNextRun(): Date | null;
  start(): void | Promise<void>;
  destroy(): void | Promise<void>;
}
export type CronFactory = (cron: string, onFire: () => void, timezone: string | null) => CronTask;

export const nodeCronFactory: CronFactory = (cron, onFire, timezone) =>
  createTask(cron, () => onFire(), {
    ...(timezone !== null ? { timezone } : {}),
    name: `maintenance ${cron}`,
    noOverlap: false,
  });

/** A cron text with a seconds field matches on any second; otherwise only at second 0 of a minute. */
export function cronStepMs(cron: string): number {
  return cron.trim().split(/\s+/).length === 6 ? 1000 : 60_000;
}

/**
 * The start of the occurrence running at `now`, or null: the latest time t in (now - duration, now] the cron text
 * matches. Bounded: at most duration / step checks (a week of minutes is 10,080).
 */
export function runningSince(
  match: (d: Date) => boolean,
  now: number,
  durationMs: number,
  stepMs: number,
): number | null {
  for (let t = Math.floor(now / stepMs) * stepMs; t > now - durationMs; t -= stepMs) if (match(new Date(t))) return t;
  return null;
}

export interface MaintenanceTarget {
  setMaintenance(state: MaintenanceWindowState): void;
  /** A window no longer configured (a reload): ended if it runs, then forgotten. */
  forgetMaintenance?(key: string): void;
}

export interface MaintenanceSchedulerOptions {
  readonly cluster: MaintenanceTarget;
  readonly windows: readonly MaintenanceWindow[];
  /** wall() for the cron texts and what is shown; now() (monotonic) for a window's length. */
  readonly clock: WallClock;
  readonly log: Log;
  readonly cron?: CronFactory;
}

interface Running {
  readonly window: MaintenanceWindow;
  readonly task: CronTask;
  /** Monotonic time the running occurrence ends, or null. */
  activeUntil: number | null;
  endTimer: ReturnType<typeof setTimeout> | null;
  backupTimer: ReturnType<typeof setTimeout> | null;
}

/** A fire node-cron missed (a busy event loop) is caught this long after the start it announced. */
const BACKUP_DELAY_MS = 1000;
const MAX_TIMER_MS = 2 ** 31 - 1;

export class MaintenanceScheduler {
  private readonly running = new Map<string, Running>();
  private stopped = true;

  constructor(private readonly options: MaintenanceSchedulerOptions) {}

  start(): void {
    this.stopped = false;
    for (const w of this.options.windows) this.startWindow(w);
  }

  private startWindow(w: MaintenanceWindow): void {
    const factory = this.options.cron ?? nodeCronFactory;
    const wall = this.options.clock.wall();
    const now = this.options.clock.now();
    const r: Running = {
      window: w,
      task: factory(w.cron, () => this.fire(w.key), w.timezone),
      activeUntil: null,
      endTimer: null,
      backupTimer: null,
    };
    this.running.set(w.key, r);
    void r.task.start();
    const since = runningSince((d) => r.task.match(d), wall, w.durationMs, cronStepMs(w.cron));
    if (since !== null)
      this.begin(
        r,
        now + since + w.durationMs - wall,
        `already running at start (since ${new Date(since).toISOString()})`,
      );
    else this.publish(r);
  }

  /**
   * A config reload's windows: those unchanged run on untouched; one changed or no longer listed stops (ending its
   * drain if it runs), and a changed or new one starts as at a start (found running if it matches now).
   */
  setWindows(windows: readonly MaintenanceWindow[]): void {
    const wanted = new Map(windows.map((w) => [w.key, w]));
    for (const [key, r] of [...this.running]) {
      const w = wanted.get(key);
      if (w !== undefined && JSON.stringify(w) === JSON.stringify(r.window)) {
        wanted.delete(key);
        continue;
      }
      this.stopWindow(r);
      this.running.delete(key);
      this.options.cluster.forgetMaintenance?.(key);
    }
    if (!this.stopped) for (const w of wanted.values()) this.startWindow(w);
  }

  private stopWindow(r: Running): void {
    if (r.endTimer !== null) clearTimeout(r.endTimer);
    if (r.backupTimer !== null) clearTimeout(r.backupTimer);
    void r.task.destroy();
  }

  private fire(key: string): void {
    const r = this.running.get(key);
    if (!r || this.stopped) return;
    this.begin(r, this.options.clock.now() + r.window.durationMs, 'cron');
  }

  private begin(r: Running, until: number, why: string): void {
    const w = r.window;
    const wasActive = r.activeUntil !== null;
    r.activeUntil = Math.max(r.activeUntil ?? 0, until);
    if (r.endTimer !== null) clearTimeout(r.endTimer);
    r.endTimer = setTimeout(
      () => this.end(r),
      Math.min(MAX_TIMER_MS, Math.max(0, r.activeUntil - this.options.clock.now())),
    );
    if (!wasActive) {
      this.options.log.info(
        {
          maintenance: w.cron,
          service: w.service,
          engine: w.engine ?? 'all',
          until: new Date(this.wallOf(r.activeUntil)).toISOString(),
          why,
        },
        `maintenance window "${w.cron}" of service ${w.service} (${w.engine ?? 'every engine'}) starts: drain until ${new Date(this.wallOf(r.activeUntil)).toISOString()} (${why})`,
      );
    }
    this.publish(r);
  }

  private end(r: Running): void {
    r.endTimer = null;
    if (this.stopped) return;
    const w = r.window;
    r.activeUntil = null;
    this.options.log.info(
      { maintenance: w.cron, service: w.service, engine: w.engine ?? 'all' },
      `maintenance window "${w.cron}" of service ${w.service} (${w.engine ?? 'every engine'}) over`,
    );
    this.publish(r);
  }

  /** A monotonic time as wall-clock ms, read now. */
  private wallOf(t: number): number {
    return this.options.clock.wall() - (this.options.clock.now() - t);
  }

  /** Tells the cluster the window's state and next start (wall-clock times); arms the backup for that start. */
  private publish(r: Running): void {
    const now = this.options.clock.wall();
    let next = r.task.getNextRun()?.getTime() ?? null;
    if (next !== null && r.activeUntil !== null && next <= now) next = null;
    this.options.cluster.setMaintenance({
      key: r.window.key,
      service: r.window.service,
      engine: r.window.engine,
      cron: r.window.cron,
      durationMs: r.window.durationMs,
      activeUntil: r.activeUntil === null ? null : this.wallOf(r.activeUntil),
      next,
    });
    if (r.backupTimer !== null) clearTimeout(r.backupTimer);
    r.backupTimer = null;
    if (next !== null && next - now + BACKUP_DELAY_MS <= MAX_TIMER_MS) {
      r.backupTimer = setTimeout(
        () => {
          r.backupTimer = null;
          if (this.stopped) return;
          const at = this.options.clock.wall();
          const since = runningSince((d) => r.task.match(d), at, r.window.durationMs, cronStepMs(r.window.cron));
          const until = since === null ? null : this.options.clock.now() + since + r.window.durationMs - at;
          if (until !== null && (r.activeUntil === null || r.activeUntil < until))
            this.begin(r, until, 'a missed cron fire');
          else this.publish(r);
        },
        next - now + BACKUP_DELAY_MS,
      );
      r.backupTimer.unref?.();
    }
  }

  stop(): void {
    this.stopped = true;
    for (const r of this.running.values()) this.stopWindow(r);
    this.running.clear();
  }
}
