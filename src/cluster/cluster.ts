// All service groups of this router. Routes decoded messages and admin commands to the right group, fans events out
// to listeners, and answers snapshots. No sockets, no real timers: control/timers.ts calls tick() when nextDue() says.
import { assignBuckets } from '../buckets/assign.js';
import { ServiceGroup } from './service-group.js';
import type { AssignVerdict, CommandResult } from './service-group.js';
import type {
  AssignFn, Clock, ClusterEvent, HereIAm, HereIAmOutcome, ISeeYouPlan, RedirectAssign, RemovalQueryPlan, ServiceConfig,
  ServiceMemory, ServiceSnapshot,
} from './types.js';

export interface ClusterOptions {
  readonly clock: Clock;
  /** Defaults to src/buckets assignBuckets. */
  readonly assign?: AssignFn;
  /** Our router address (Router ID, assignment key in appliance mode). */
  readonly routerAddress: string;
  readonly hereIAmMs: number;
  readonly services: readonly ServiceConfig[];
}

export interface ClusterSnapshot {
  readonly routerAddress: string;
  readonly services: readonly ServiceSnapshot[];
  readonly counters: Readonly<Record<string, number>>;
}

export type ServiceCommandResult = CommandResult | { readonly ok: false; readonly error: 'unknown-service'; readonly message: string };

export class Cluster {
  private readonly groups = new Map<number, ServiceGroup>();
  private readonly listeners = new Set<(e: ClusterEvent) => void>();
  private readonly counters: Record<string, number> = {};

  constructor(private readonly options: ClusterOptions) {
    for (const s of options.services) {
      this.groups.set(s.id, new ServiceGroup(s, {
        clock: options.clock, assign: options.assign ?? assignBuckets, routerAddress: options.routerAddress,
        hereIAmMs: options.hereIAmMs, emit: (e) => this.emit(e),
      }));
    }
  }

  get routerAddress(): string {
    return this.options.routerAddress;
  }

  onEvent(listener: (e: ClusterEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private emit(e: ClusterEvent): void {
    for (const l of this.listeners) l(e);
  }

  private count(name: string): void {
    this.counters[name] = (this.counters[name] ?? 0) + 1;
  }

  serviceIds(): number[] {
    return [...this.groups.keys()].sort((a, b) => a - b);
  }

  hasService(id: number): boolean {
    return this.groups.has(id);
  }

  restore(memory: ServiceMemory): void {
    this.groups.get(memory.id)?.restore(memory);
  }

  hereIAm(msg: HereIAm): HereIAmOutcome {
    const g = this.groups.get(msg.service.id);
    if (!g) {
      this.count('unknown-service');
      return { kind: 'refused', reason: `service ${msg.service.id} is not configured`, counter: 'unknown-service', answer: false };
    }
    return g.hereIAm(msg);
  }

  /** Plans (and records) the I_SEE_YOU answering `engine`; null for an unknown service. */
  iSeeYou(serviceId: number, engine: string): ISeeYouPlan | null {
    return this.groups.get(serviceId)?.iSeeYou(engine) ?? null;
  }

  redirectAssign(ra: RedirectAssign): AssignVerdict {
    const g = this.groups.get(ra.serviceId);
    if (!g) {
      this.count('unknown-service');
      return { accepted: false, reason: `service ${ra.serviceId} is not configured` };
    }
    return g.redirectAssign(ra);
  }

  authFailure(serviceId: number): void {
    const g = this.groups.get(serviceId);
    if (g) g.authFailure();
    else this.count('auth-failures');
  }

  tick(): RemovalQueryPlan[] {
    return [...this.groups.values()].flatMap((g) => g.tick());
  }

  nextDue(): number | null {
    let due: number | null = null;
    for (const g of this.groups.values()) {
      const d = g.nextDue();
      if (d !== null && (due === null || d < due)) due = d;
    }
    return due;
  }

  private command(serviceId: number, run: (g: ServiceGroup) => CommandResult): ServiceCommandResult {
    const g = this.groups.get(serviceId);
    if (!g) return { ok: false, error: 'unknown-service', message: `service ${serviceId} is not configured` };
    return run(g);
  }

  drain(serviceId: number, engine: string, reason?: string): ServiceCommandResult {
    return this.command(serviceId, (g) => g.drain(engine, reason));
  }

  undrain(serviceId: number, engine: string, reason?: string): ServiceCommandResult {
    return this.command(serviceId, (g) => g.undrain(engine, reason));
  }

  /** null restores the engine's own Assignment Weight (or the configured override). */
  setWeight(serviceId: number, engine: string, weight: number | null): ServiceCommandResult {
    return this.command(serviceId, (g) => g.setWeight(engine, weight));
  }

  service(id: number): ServiceSnapshot | null {
    return this.groups.get(id)?.snapshot() ?? null;
  }

  snapshot(): ClusterSnapshot {
    return {
      routerAddress: this.options.routerAddress,
      services: this.serviceIds().map((id) => (this.groups.get(id) as ServiceGroup).snapshot()),
      counters: { ...this.counters },
    };
  }

  memory(): ServiceMemory[] {
    return this.serviceIds().map((id) => (this.groups.get(id) as ServiceGroup).memory());
  }
}
