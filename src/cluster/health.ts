// Health verdicts from active probes (decision 7): rise/fall per engine and probe kind, HAProxy-style. Pure: the
// probers (control/probes) report outcomes, the clock is injected, nothing here touches a socket or a timer.
// Probes can only take buckets away from an engine WCCP says is alive; they never make a silent engine usable.
import type { DetectionTimes, HealthSettings, HealthVerdict, ProbeKind, ProbeOutcome, ProbeSettings } from './types.js';

export const PROBE_KINDS: readonly ProbeKind[] = ['icp', 'tcp', 'icmp'];
/** Which RTT the admin views show: the lowest layer that is probed. */
const RTT_PREFERENCE: readonly ProbeKind[] = ['icmp', 'tcp', 'icp'];
/** ICP replies that say "I will fetch for you": they end a MISS_NOFETCH drain. */
const ICP_FETCHING = new Set(['HIT', 'MISS', 'HIT_OBJ']);
export const ICP_DRAIN_REASON = 'ICP MISS_NOFETCH';

/** Worst case from the last pass to the verdict: the failure starts just after a pass, then fall probes time out. */
export function worstCaseDetectionMs(p: ProbeSettings): number {
  return p.intervalMs * p.fall + p.timeoutMs;
}

export function detectionTimes(settings: HealthSettings | undefined, hereIAmMs: number): DetectionTimes {
  const of = (k: ProbeKind) => (settings?.[k].enabled ? worstCaseDetectionMs(settings[k]) : null);
  return { hereIAmMs: 3 * hereIAmMs, icp: of('icp'), tcp: of('tcp'), icmp: of('icmp') };
}

export interface KindHealth {
  passes: number;
  failures: number;
  lastRttMs: number | null;
  lastDetail: string | null;
  lastAt: number | null;
}

interface EngineHealth {
  readonly kinds: Map<ProbeKind, KindHealth>;
  unhealthy: string | null;
  drain: string | null;
}

/** An outcome that changed the verdict on an engine; the reason goes into the engine-state event. */
export interface HealthChange {
  readonly engine: string;
  readonly reason: string;
}

export class HealthTracker {
  private readonly engines = new Map<string, EngineHealth>();

  constructor(private readonly settings: HealthSettings | undefined, private readonly clock: { now(): number }) {}

  enabledKinds(): ProbeKind[] {
    return PROBE_KINDS.filter((k) => this.settings?.[k].enabled === true);
  }

  /** Records one probe outcome; returns the change to apply to the engine's state, or null when the verdict holds. */
  record(engine: string, outcome: ProbeOutcome): HealthChange | null {
    const s = this.settings?.[outcome.kind];
    if (!s?.enabled) return null;
    const h = this.engines.get(engine) ?? { kinds: new Map<ProbeKind, KindHealth>(), unhealthy: null, drain: null };
    this.engines.set(engine, h);
    const k = h.kinds.get(outcome.kind) ?? { passes: 0, failures: 0, lastRttMs: null, lastDetail: null, lastAt: null };
    h.kinds.set(outcome.kind, k);
    k.lastAt = this.clock.now();
    const reasons: string[] = [];
    if (outcome.ok) {
      k.passes += 1;
      k.failures = 0;
      k.lastRttMs = outcome.rttMs;
      k.lastDetail = null;
      if (outcome.kind === 'icp' && outcome.icpOpcode !== undefined) {
        if (outcome.icpOpcode === 'MISS_NOFETCH' && h.drain === null) {
          h.drain = ICP_DRAIN_REASON;
          reasons.push(ICP_DRAIN_REASON);
        } else if (ICP_FETCHING.has(outcome.icpOpcode) && h.drain !== null) {
          h.drain = null;
          reasons.push(`ICP ${outcome.icpOpcode}: fetching again`);
        }
      }
      if (h.unhealthy !== null && this.risen(h)) {
        h.unhealthy = null;
        reasons.push(`probes pass again (${this.enabledKinds().map((x) => `${x}: ${this.settings?.[x].rise} consecutive passes`).join(', ')})`);
      }
    } else {
      k.passes = 0;
      k.failures += 1;
      k.lastDetail = outcome.detail;
      if (h.unhealthy === null && k.failures >= s.fall) {
        h.unhealthy = `${outcome.kind} probe: ${k.failures} consecutive failures (${outcome.detail})`;
        reasons.push(h.unhealthy);
      }
    }
    return reasons.length > 0 ? { engine, reason: reasons.join('; ') } : null;
  }

  /** Back only when every enabled kind has passed `rise` times in a row. */
  private risen(h: EngineHealth): boolean {
    return this.enabledKinds().every((kind) => (h.kinds.get(kind)?.passes ?? 0) >= (this.settings?.[kind].rise ?? 1));
  }

  verdict(engine: string): HealthVerdict {
    const h = this.engines.get(engine);
    if (!h) return { unhealthy: null, drain: null, probeRttMs: null };
    let probeRttMs: number | null = null;
    for (const kind of RTT_PREFERENCE) {
      const k = h.kinds.get(kind);
      if (this.settings?.[kind].enabled && k?.lastRttMs != null && k.failures === 0) {
        probeRttMs = k.lastRttMs;
        break;
      }
    }
    return { unhealthy: h.unhealthy, drain: h.drain, probeRttMs };
  }

  /** Per-kind counters of one engine, for views and logs. */
  kinds(engine: string): ReadonlyMap<ProbeKind, Readonly<KindHealth>> {
    return this.engines.get(engine)?.kinds ?? new Map();
  }

  known(): string[] {
    return [...this.engines.keys()];
  }

  /** Drops what is known of an engine: it starts healthy, as a new one does. */
  forget(engine: string): void {
    this.engines.delete(engine);
  }
}
