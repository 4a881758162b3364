// The firewall-reload guard of the kernel backends (nft, ingress): their nftables tables put back when someone else
// deletes them or part of them (docs/dataplane.md, "A firewall reload"). The table watch (table-watch.ts) hints; the
// guard then has the backend check the kernel through the backend's serial queue (never in the middle of a change),
// once for any number of hints, after the backoff's delay when restores came in a row (on the monotonic clock, so a
// wall clock stepped back cannot keep every restore inside the window), and counts restores and failed checks. What a
// deletion means, what the check lists and how the table is written again stay the backend's.
import { monotonicNow } from '../../clock.js';
import type { Log } from '../../log.js';
import { DEFAULT_RESTORE_BACKOFF, restoreWait, watchTables } from './table-watch.js';
import type { DeletedObject, RestoreBackoff, TableWatch, TableWatchOptions } from './table-watch.js';

/** What a deletion asks for: nothing (one of our own changes), a check of the chains, or of the rules as well. */
export type DeletionHint = 'chains' | 'rules' | null;

export interface TableGuardOptions {
  /** The log lines' subject: `nft data plane`, `ingress data plane`. */
  readonly subject: string;
  /** What a watch started again checks, in its log line: `our tables`, `our table`. */
  readonly checking: string;
  /** How the other lines name what is guarded; default `our table`. */
  readonly table?: string | undefined;
  /** What a failed restore leaves, in its error line; default `redirection stays off until it works`. */
  readonly failedMeans?: string | undefined;
  /** Fields every line carries besides its own (`{ dataplane: 'userland' }`). */
  readonly fields?: Readonly<Record<string, unknown>> | undefined;
  readonly log?: Log | undefined;
  /** Watch inside this network namespace. */
  readonly netns?: string | undefined;
  readonly family: string;
  /** The table names (of `family`) whose deletions hint a check. */
  readonly tables: readonly string[];
  /** true: `nft -j monitor destroy` (watchTables()); false: no watch, no check; a function makes the watch (tests). */
  readonly watch: boolean | ((o: TableWatchOptions) => TableWatch);
  /** How restores in a row slow down; default DEFAULT_RESTORE_BACKOFF. */
  readonly backoff?: RestoreBackoff | undefined;
  /** Monotonic milliseconds; default monotonicNow() (src/clock.ts). */
  readonly now?: (() => number) | undefined;
  /** The check's delay; default an unref'd setTimeout. */
  readonly setTimer?: ((fn: () => void, ms: number) => { cancel(): void }) | undefined;
  /** What a deletion the watch reports asks for (a watch (re)started asks for the rules). */
  readonly onDeleted: (d: DeletedObject) => DeletionHint;
  /** Runs a job in the backend's serial queue. */
  readonly serial: (job: () => Promise<void>) => Promise<void>;
  /**
   * In the queue: the backend holds the kernel against its state and restores what went (calling restored() after a
   * restore); `rules`: a rule deletion or a watch start came since the last check. A throw counts as a failed check.
   */
  readonly check: (rules: boolean) => Promise<void>;
}

const unrefTimer = (fn: () => void, ms: number): { cancel(): void } => {
  const t = setTimeout(fn, ms);
  t.unref();
  return { cancel: () => clearTimeout(t) };
};

export class TableGuard {
  private readonly o: TableGuardOptions;
  private readonly backoff: RestoreBackoff;
  private readonly now: () => number;
  private readonly setTimer: (fn: () => void, ms: number) => { cancel(): void };
  private readonly table: string;
  private readonly fields: Readonly<Record<string, unknown>>;
  private watch: TableWatch | null = null;
  /** stop() was called: no check runs any more. */
  private stopping = false;
  /** A check is waiting (on its timer or in the queue): further hints are the same check. */
  private pending = false;
  /** The next check lists the rules too. */
  private rules = false;
  private timer: { cancel(): void } | null = null;
  /** When the recent restores (and failed checks) were: bounded by the backoff's window. */
  private readonly times: number[] = [];
  private restoredCount = 0;
  private failed = 0;

  constructor(options: TableGuardOptions) {
    this.o = options;
    this.backoff = options.backoff ?? DEFAULT_RESTORE_BACKOFF;
    this.now = options.now ?? monotonicNow;
    this.setTimer = options.setTimer ?? unrefTimer;
    this.table = options.table ?? 'our table';
    this.fields = options.fields ?? {};
  }

  /** Starts the watch (unless it runs, or watching is off); checks are possible again after a stop(). */
  start(): void {
    this.stopping = false;
    this.pending = false;
    if (this.o.watch === false || this.watch !== null) return;
    const { subject, log } = this.o;
    const options: TableWatchOptions = {
      ...(this.o.netns !== undefined ? { netns: this.o.netns } : {}),
      family: this.o.family,
      tables: this.o.tables,
      onDeleted: (d) => {
        const hint = this.o.onDeleted(d);
        if (hint === null) return;
        if (hint === 'rules') this.rules = true;
        this.hint();
      },
      onStarted: (restarted) => {
        if (restarted)
          log?.info({ ...this.fields }, `${subject}: the table watch runs again; checking ${this.o.checking}`);
        this.rules = true;
        this.hint();
      },
      onEnded: (why, retryMs) =>
        log?.warn(
          { ...this.fields, err: why, retryInMs: retryMs },
          `${subject}: the table watch (nft monitor) ended (${why}); a deletion of ${this.table} by a firewall ` +
            `reload is not noticed until it runs again in ${retryMs} ms`,
        ),
    };
    this.watch = this.o.watch === true ? watchTables(options) : this.o.watch(options);
  }

  /** No check from now on (what the backend deletes next is meant); resolves once the watch's process is gone. */
  stop(): Promise<void> {
    this.stopping = true;
    this.timer?.cancel();
    this.timer = null;
    this.pending = false;
    const watch = this.watch;
    this.watch = null;
    return watch?.stop() ?? Promise.resolve();
  }

  /**
   * A table of ours may be gone: check the kernel through the queue, once for any number of hints, and after the
   * backoff's delay when restores came in a row. Nothing while no watch runs.
   */
  hint(): void {
    if (this.watch === null || this.stopping || this.pending) return;
    this.pending = true;
    const b = this.backoff;
    const wait = restoreWait(this.times, this.now(), b);
    const { subject, log } = this.o;
    if (wait > 0)
      log?.warn(
        { ...this.fields, restoresInWindow: this.times.length, windowMs: b.windowMs, waitMs: wait },
        `${subject}: ${this.table} was deleted again (${this.times.length} restores in the last ` +
          `${b.windowMs / 1000} s): something keeps deleting it; backing off, next check in ${wait} ms`,
      );
    this.timer = this.setTimer(() => {
      this.timer = null;
      this.o
        .serial(() => this.runCheck())
        .catch((e: unknown) => {
          log?.error(
            { ...this.fields, err: (e as Error).message },
            `${subject}: putting ${this.table} back failed ` +
              `(${this.o.failedMeans ?? 'redirection stays off until it works'}): ${(e as Error).message}`,
          );
          // A failed check or restore counts as one: a lasting failure is tried again ever more slowly.
          this.times.push(this.now());
          this.failed += 1;
          this.hint();
        });
    }, wait);
  }

  /** The backend put its table back: counted, and kept for the backoff. Returns the count so far. */
  restored(): number {
    this.times.push(this.now());
    this.restoredCount += 1;
    return this.restoredCount;
  }

  /** Restores so far. */
  restores(): number {
    return this.restoredCount;
  }

  /** Checks (or restores) that failed so far. */
  failedChecks(): number {
    return this.failed;
  }

  /** The watch's monitor process id while one runs. */
  pid(): number | undefined {
    return this.watch?.pid();
  }

  private runCheck(): Promise<void> {
    this.pending = false;
    const rules = this.rules;
    this.rules = false;
    if (this.stopping) return Promise.resolve();
    return this.o.check(rules);
  }
}
