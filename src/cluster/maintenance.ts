// Maintenance windows as the cluster sees them: which windows run now and which comes next, per service and engine.
// Pure: control/maintenance.ts turns cron schedules into start/end calls with real timers; here only the state and
// the drain it implies. A maintenance drain is its own source: it never clears an admin drain, nor does an admin
// undrain end it (docs/health.md).

/** An engine's maintenance windows as the admin views show them (wall-clock times, ms). */
export interface MaintenanceView {
  /** The running window's end, or null. */
  readonly activeUntil: number | null;
  readonly activeCron: string | null;
  /** The next window's start, or null. */
  readonly next: number | null;
  readonly nextCron: string | null;
  readonly nextDurationMs: number | null;
}

export interface MaintenanceWindowState {
  /** Stable id of the window (service and index in the config). */
  readonly key: string;
  readonly service: number;
  /** null = every engine of the service. */
  readonly engine: string | null;
  readonly cron: string;
  readonly durationMs: number;
  /** Wall-clock time (ms) the running occurrence ends, or null when none runs; for the views. */
  activeUntil: number | null;
  /** Wall-clock time (ms) of the next start, or null when unknown. */
  next: number | null;
}

export class MaintenanceBook {
  private readonly windows = new Map<string, MaintenanceWindowState>();

  /** Records a window's state; returns whether its active/inactive status changed. */
  set(state: MaintenanceWindowState): boolean {
    const before = this.windows.get(state.key);
    this.windows.set(state.key, { ...state });
    return (before?.activeUntil != null) !== (state.activeUntil !== null);
  }

  forget(key: string): void {
    this.windows.delete(key);
  }

  get(key: string): MaintenanceWindowState | undefined {
    return this.windows.get(key);
  }

  private applies(w: MaintenanceWindowState, service: number, engine: string): boolean {
    return w.service === service && (w.engine === null || w.engine === engine);
  }

  /** The drain reason of the running window for this engine (the one ending last), or null. */
  activeReason(service: number, engine: string): string | null {
    let best: MaintenanceWindowState | null = null;
    for (const w of this.windows.values()) {
      if (
        w.activeUntil !== null &&
        this.applies(w, service, engine) &&
        (best === null || w.activeUntil > (best.activeUntil ?? 0))
      )
        best = w;
    }
    return best === null
      ? null
      : `maintenance window "${best.cron}" until ${new Date(best.activeUntil ?? 0).toISOString()}`;
  }

  /** What the admin views show for an engine: the running window if any, else the next to come. */
  viewFor(service: number, engine: string): MaintenanceView | null {
    let active: MaintenanceWindowState | null = null;
    let next: MaintenanceWindowState | null = null;
    for (const w of this.windows.values()) {
      if (!this.applies(w, service, engine)) continue;
      if (w.activeUntil !== null && (active === null || w.activeUntil > (active.activeUntil ?? 0))) active = w;
      if (w.next !== null && (next === null || w.next < (next.next ?? Infinity))) next = w;
    }
    if (active === null && next === null) return null;
    return {
      activeUntil: active?.activeUntil ?? null,
      activeCron: active?.cron ?? null,
      next: next?.next ?? null,
      nextCron: next?.cron ?? null,
      nextDurationMs: next?.durationMs ?? null,
    };
  }

  /** Every window of a service, for the service views. */
  ofService(service: number): MaintenanceWindowState[] {
    return [...this.windows.values()].filter((w) => w.service === service);
  }
}
