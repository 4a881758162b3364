// The one place that turns the cluster's due times into real timers: one setTimeout armed for the earliest due time,
// re-armed after every tick and whenever activity may have moved the due times.
import type { Cluster, Clock, RemovalQueryPlan } from '../cluster/index.js';

/** Longest single wait: the cluster's due times are re-read at least this often, whatever moved them. */
const MAX_WAIT_MS = 60_000;

export class ClusterTimers {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private armedFor: number | null = null;
  private stopped = false;

  constructor(
    private readonly cluster: Cluster,
    private readonly clock: Clock,
    private readonly onRemovalQueries: (plans: readonly RemovalQueryPlan[]) => void,
  ) {}

  start(): void {
    this.stopped = false;
    this.rearm();
  }

  /** Re-arms if the earliest due time changed (call after anything that may change it). */
  rearm(): void {
    if (this.stopped) return;
    const due = this.cluster.nextDue();
    if (due === this.armedFor && this.timer !== null) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.armedFor = due;
    if (due === null) return;
    const wait = Math.min(Math.max(0, due - this.clock.now()), MAX_WAIT_MS);
    this.timer = setTimeout(() => this.fire(), wait);
  }

  private fire(): void {
    this.timer = null;
    this.armedFor = null;
    const plans = this.cluster.tick();
    if (plans.length > 0) this.onRemovalQueries(plans);
    this.rearm();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}
