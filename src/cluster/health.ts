// Health verdicts from active probes (docs/architecture.md, decision 7; docs/health.md): rise/fall per engine and probe
// kind, HAProxy-style, with hard
// evidence counted apart from silence. Pure: the probers (control/probes) report outcomes, the clock is injected,
// nothing here touches a socket or a timer. Probes can only take buckets away from an engine WCCP says is alive; they
// never make a silent engine usable.
import type {
  DetectionTimes,
  HealthSettings,
  HealthVerdict,
  ProbeKind,
  ProbeOutcome,
  ProbeSettings,
  ProbeVerdictFigures,
} from './types.js';
import { HOUR_MS } from '../duration.js';

export const PROBE_KINDS: readonly ProbeKind[] = ['http', 'tcp', 'icp', 'icmp'];
/** Which RTT the admin views show: the lowest layer that is probed. */
const RTT_PREFERENCE: readonly ProbeKind[] = ['icmp', 'tcp', 'http', 'icp'];
/** ICP replies that say "I will fetch for you": they end a MISS_NOFETCH drain. */
const ICP_FETCHING = new Set(['HIT', 'MISS', 'HIT_OBJ']);
export const ICP_DRAIN_REASON = 'ICP MISS_NOFETCH';

/** The loss rates `wccpctl status` prints the false-verdict chance for. */
export const REPORTED_LOSS_RATES: readonly number[] = [0.05, 0.2];
/** A TCP or HTTP probe starts another connection attempt this often while none has connected (lost SYNs). */
export const CONNECT_RETRY_MS = 100;
/** At most this many connection attempts per probe. */
export const CONNECT_ATTEMPTS = 3;
/** Linux retransmits a data segment after RTO_min (200 ms), then doubles; offsets of the transmissions. */
const SEGMENT_SENDS_MS: readonly number[] = [0, 200, 600, 1400, 3000, 6200];
/** Linux retransmits a SYN after 1 s, then doubles. */
const SYN_SENDS_MS: readonly number[] = [0, 1000, 3000, 7000, 15000];

/** Worst case from the last pass to the verdict on silence: the failure starts just after a pass, then fall probes time
 * out. */
export function worstCaseDetectionMs(p: ProbeSettings): number {
  return p.intervalMs * p.fall + p.timeoutMs;
}

/** Worst case on hard evidence: hardFall probes, each refused within a round trip (taken as at most one timeout). */
export function hardWorstCaseDetectionMs(p: ProbeSettings): number {
  return p.intervalMs * p.hardFall + Math.min(p.timeoutMs, 50);
}

/** The times at which one probe's connection attempts send a SYN (ours every CONNECT_RETRY_MS, the kernel's retries).
 * */
function synSends(timeoutMs: number): number[] {
  const out: number[] = [];
  for (let a = 0; a < CONNECT_ATTEMPTS && a * CONNECT_RETRY_MS < timeoutMs; a++) {
    for (const r of SYN_SENDS_MS) if (a * CONNECT_RETRY_MS + r < timeoutMs) out.push(a * CONNECT_RETRY_MS + r);
  }
  return out.sort((x, y) => x - y);
}

/**
 * The chance that one probe of a healthy engine fails when each packet is lost with probability `loss`, independently,
 * in both directions (docs/health.md has the model). A handshake needs the SYN and the SYN-ACK; an HTTP exchange then
 * needs the request and the answer, each retransmitted on the kernel's schedule; ICP and ICMP are one datagram each
 * way.
 */
export function probeFailureChance(kind: ProbeKind, p: Pick<ProbeSettings, 'timeoutMs'>, loss: number): number {
  const L = Math.min(Math.max(loss, 0), 1);
  const roundTrip = (1 - L) * (1 - L);
  if (kind === 'icp' || kind === 'icmp') return 1 - roundTrip;
  const sends = synSends(p.timeoutMs);
  if (kind === 'tcp') return (1 - roundTrip) ** sends.length;
  // http: connected at the first SYN that gets through, then the request and the answer within the time left.
  let pass = 0;
  let noneYet = 1;
  for (const at of sends) {
    let exchange = 0;
    SEGMENT_SENDS_MS.forEach((req, i) => {
      SEGMENT_SENDS_MS.forEach((ans, j) => {
        if (at + req + ans < p.timeoutMs) exchange += L ** i * (1 - L) * L ** j * (1 - L);
      });
    });
    pass += noneYet * roundTrip * exchange;
    noneYet *= 1 - roundTrip;
  }
  return Math.min(1, Math.max(0, 1 - pass));
}

/**
 * The chance that loss alone makes `fall` probes in a row fail within an hour, i.e. a false verdict. Loss never makes
 * a host refuse, so hard evidence plays no part. Runs of failures start (1 - q) * q^fall of the time per probe.
 */
export function falseVerdictPerHour(q: number, p: Pick<ProbeSettings, 'intervalMs' | 'fall'>): number {
  const probes = HOUR_MS / p.intervalMs;
  const expected = probes * (1 - q) * q ** p.fall + q ** p.fall;
  return Math.min(1, -Math.expm1(-expected));
}

export function verdictFigures(
  kind: ProbeKind,
  p: ProbeSettings,
  lossRates: readonly number[] = REPORTED_LOSS_RATES,
): ProbeVerdictFigures {
  return {
    kind,
    intervalMs: p.intervalMs,
    timeoutMs: p.timeoutMs,
    fall: p.fall,
    hardFall: p.hardFall,
    worstCaseMs: worstCaseDetectionMs(p),
    hardWorstCaseMs: hardWorstCaseDetectionMs(p),
    falseVerdict: lossRates.map((loss) => {
      const probeFailure = probeFailureChance(kind, p, loss);
      return { loss, probeFailure, perHour: falseVerdictPerHour(probeFailure, p) };
    }),
  };
}

export function detectionTimes(settings: HealthSettings | undefined, hereIAmMs: number): DetectionTimes {
  const of = (k: ProbeKind) => (settings?.[k].enabled ? worstCaseDetectionMs(settings[k]) : null);
  return {
    hereIAmMs: 3 * hereIAmMs,
    http: of('http'),
    icp: of('icp'),
    tcp: of('tcp'),
    icmp: of('icmp'),
    probes: PROBE_KINDS.filter((k) => settings?.[k].enabled).map((k) =>
      verdictFigures(k, (settings as HealthSettings)[k]),
    ),
  };
}

export interface KindHealth {
  passes: number;
  failures: number;
  /** Consecutive hard failures (refused, reset, unreachable, not the protocol): reset by a pass or a silent failure. */
  hardFailures: number;
  lastRttMs: number | null;
  lastDetail: string | null;
  lastAt: number | null;
  lastPassAt: number | null;
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

  constructor(
    private current: HealthSettings | undefined,
    private readonly clock: { now(): number },
  ) {}

  settings(): HealthSettings | undefined {
    return this.current;
  }

  /**
   * New settings (a config reload): what a kind no longer enabled recorded is dropped, with an ICP drain when ICP is
   * off; an engine unhealthy by it is back once the kinds still probed have risen (none left: at once). The changes
   * are returned for the groups to apply.
   */
  setSettings(settings: HealthSettings): HealthChange[] {
    this.current = settings;
    const changes: HealthChange[] = [];
    for (const [engine, h] of this.engines) {
      const reasons: string[] = [];
      for (const kind of [...h.kinds.keys()]) if (!settings[kind].enabled) h.kinds.delete(kind);
      if (h.drain !== null && !settings.icp.enabled) {
        h.drain = null;
        reasons.push('ICP probes are off (config reload)');
      }
      if (h.unhealthy !== null && this.risen(h)) {
        h.unhealthy = null;
        reasons.push('the probes that failed are off (config reload)');
      }
      if (reasons.length > 0) changes.push({ engine, reason: reasons.join('; ') });
    }
    return changes;
  }

  enabledKinds(): ProbeKind[] {
    return PROBE_KINDS.filter((k) => this.current?.[k].enabled === true);
  }

  /** Records one probe outcome; returns the change to apply to the engine's state, or null when the verdict holds. */
  record(engine: string, outcome: ProbeOutcome): HealthChange | null {
    const s = this.current?.[outcome.kind];
    if (!s?.enabled) return null;
    const h = this.engines.get(engine) ?? { kinds: new Map<ProbeKind, KindHealth>(), unhealthy: null, drain: null };
    this.engines.set(engine, h);
    const k = h.kinds.get(outcome.kind) ?? {
      passes: 0,
      failures: 0,
      hardFailures: 0,
      lastRttMs: null,
      lastDetail: null,
      lastAt: null,
      lastPassAt: null,
    };
    h.kinds.set(outcome.kind, k);
    const now = this.clock.now();
    k.lastAt = now;
    const reasons: string[] = [];
    if (outcome.ok) {
      k.passes += 1;
      k.failures = 0;
      k.hardFailures = 0;
      k.lastRttMs = outcome.rttMs;
      k.lastDetail = null;
      k.lastPassAt = now;
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
        reasons.push(
          `probes pass again (${this.enabledKinds()
            .map((x) => `${x}: ${this.current?.[x].rise} consecutive passes`)
            .join(', ')})`,
        );
      }
    } else {
      k.passes = 0;
      k.failures += 1;
      k.hardFailures = outcome.hard === true ? k.hardFailures + 1 : 0;
      k.lastDetail = outcome.detail;
      if (h.unhealthy === null && k.hardFailures >= s.hardFall) {
        h.unhealthy = `${outcome.kind} probe: ${k.hardFailures} consecutive hard failures (${outcome.detail})`;
        reasons.push(h.unhealthy);
      } else if (h.unhealthy === null && k.failures >= s.fall) {
        h.unhealthy = `${outcome.kind} probe: ${k.failures} consecutive failures (${outcome.detail})`;
        reasons.push(h.unhealthy);
      }
    }
    return reasons.length > 0 ? { engine, reason: reasons.join('; ') } : null;
  }

  /** Back only when every enabled kind has passed `rise` times in a row. */
  private risen(h: EngineHealth): boolean {
    return this.enabledKinds().every((kind) => (h.kinds.get(kind)?.passes ?? 0) >= (this.current?.[kind].rise ?? 1));
  }

  /** Every enabled kind passed within its worst-case detection time, and none has failed `fall` times. */
  private vouches(h: EngineHealth): boolean {
    const kinds = this.enabledKinds();
    if (kinds.length === 0 || h.unhealthy !== null) return false;
    const now = this.clock.now();
    return kinds.every((kind) => {
      const k = h.kinds.get(kind);
      const s = this.current?.[kind];
      // A pass "in the future" (the clock was set back) vouches for nothing.
      return (
        k?.lastPassAt != null && s !== undefined && now >= k.lastPassAt && now - k.lastPassAt <= worstCaseDetectionMs(s)
      );
    });
  }

  verdict(engine: string): HealthVerdict {
    const h = this.engines.get(engine);
    if (!h) return { unhealthy: null, drain: null, probeRttMs: null, vouched: false };
    let probeRttMs: number | null = null;
    for (const kind of RTT_PREFERENCE) {
      const k = h.kinds.get(kind);
      if (this.current?.[kind].enabled && k?.lastRttMs != null && k.failures === 0) {
        probeRttMs = k.lastRttMs;
        break;
      }
    }
    return { unhealthy: h.unhealthy, drain: h.drain, probeRttMs, vouched: this.vouches(h) };
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
