// Runs each enabled probe kind every interval for every engine present in a service group, spread evenly over the
// interval so probes do not burst. Probes of one engine may overlap when the timeout is longer than the interval (a
// silent engine is then noticed after fall intervals, not fall timeouts), at most ceil(timeout / interval) + 1 at once
// (one when the timeout is not longer than the interval).
// The only real timers of the health checks live here; verdicts are the cluster's.
import { hardWorstCaseDetectionMs } from '../../cluster/index.js';
import type { DetectionTimes, HealthSettings, ProbeKind, ProbeOutcome } from '../../cluster/index.js';
import type { Log } from '../../log.js';
import { formatDuration } from '../../duration.js';
import type { Prober } from './types.js';

/** The part of the cluster the scheduler needs. */
export interface ProbeTarget {
  probeTargets(): string[];
  probe(engine: string, outcome: ProbeOutcome): void;
  readonly detection: DetectionTimes;
}

export interface ProbeSchedulerOptions {
  readonly cluster: ProbeTarget;
  readonly settings: HealthSettings;
  /** A kind enabled in settings but without a prober here is not run (e.g. ICMP without raw sockets). */
  readonly probers: Partial<Record<ProbeKind, Prober>>;
  readonly log: Log;
}

const KINDS: readonly ProbeKind[] = ['http', 'tcp', 'icp', 'icmp'];

export class ProbeScheduler {
  private readonly rounds = new Set<ReturnType<typeof setInterval>>();
  private readonly spread = new Set<ReturnType<typeof setTimeout>>();
  private readonly inFlight = new Map<string, number>();
  private stopped = true;

  constructor(private readonly options: ProbeSchedulerOptions) {}

  /** The kinds that will run: enabled and with a prober. */
  running(): ProbeKind[] {
    return KINDS.filter((k) => this.options.settings[k].enabled && this.options.probers[k] !== undefined);
  }

  start(): void {
    this.stopped = false;
    const { settings, log, cluster } = this.options;
    const d = cluster.detection;
    const perKind = Object.fromEntries(
      this.running().map((k) => [
        k,
        {
          intervalMs: settings[k].intervalMs,
          timeoutMs: settings[k].timeoutMs,
          rise: settings[k].rise,
          fall: settings[k].fall,
          worstCaseDetectionMs: d[k],
        },
      ]),
    );
    const words = this.running().map(
      (k) =>
        `${k} ${formatDuration(d[k] ?? 0)} (${formatDuration(settings[k].intervalMs)} x ${settings[k].fall} + ` +
        `${formatDuration(settings[k].timeoutMs)}), hard evidence ${formatDuration(hardWorstCaseDetectionMs(settings[k]))}`,
    );
    log.info(
      { probes: perKind, hereIAmWorstCaseMs: d.hereIAmMs },
      `worst-case detection: HERE_I_AM ${formatDuration(d.hereIAmMs)} (3 x HERE_I_AM_T)${words.length > 0 ? `; ${words.join('; ')}` : '; no active probes'}`,
    );
    for (const kind of this.running()) {
      this.round(kind);
      this.rounds.add(setInterval(() => this.round(kind), settings[kind].intervalMs));
    }
  }

  /** One round of a kind: every present engine once, at even offsets inside the interval. */
  private round(kind: ProbeKind): void {
    const engines = this.options.cluster.probeTargets();
    const step = this.options.settings[kind].intervalMs / Math.max(1, engines.length);
    engines.forEach((engine, i) => {
      const t = setTimeout(
        () => {
          this.spread.delete(t);
          this.probeOne(kind, engine);
        },
        Math.floor(i * step),
      );
      this.spread.add(t);
    });
  }

  private probeOne(kind: ProbeKind, engine: string): void {
    const prober = this.options.probers[kind];
    const key = `${kind} ${engine}`;
    const { intervalMs, timeoutMs } = this.options.settings[kind];
    const running = this.inFlight.get(key) ?? 0;
    if (this.stopped || !prober || running >= (timeoutMs <= intervalMs ? 1 : Math.ceil(timeoutMs / intervalMs) + 1))
      return;
    this.inFlight.set(key, running + 1);
    const finished = (): void => {
      const n = (this.inFlight.get(key) ?? 1) - 1;
      if (n > 0) this.inFlight.set(key, n);
      else this.inFlight.delete(key);
    };
    prober(engine, this.options.settings[kind].timeoutMs)
      .catch((err: unknown): ProbeOutcome => ({
        kind,
        ok: false,
        detail: err instanceof Error ? err.message : String(err),
      }))
      .then((outcome) => {
        finished();
        if (this.stopped) return;
        try {
          this.options.cluster.probe(engine, outcome);
        } catch (err) {
          this.options.log.error(
            { probe: kind, engine, err: err instanceof Error ? err.message : String(err) },
            `${kind} probe result for ${engine} not applied`,
          );
        }
      }, finished);
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.rounds) clearInterval(t);
    for (const t of this.spread) clearTimeout(t);
    this.rounds.clear();
    this.spread.clear();
  }
}
