// The nft backend: the kernel does the packets. start() loads our table with the small static hash maps (~0.1 s);
// apply() rewrites the services' bucket maps and chains in ONE `nft -f -` transaction and keeps one policy route
// per engine; stop() removes everything. A failed nft call leaves the previous ruleset in force (transactions are
// atomic) and throws a DataplaneError with nft's stderr.
import type { EngineAddress } from '../buckets/table.js';
import { DataplaneError } from './errors.js';
import { kernelHasIpGre } from './gre-probe.js';
import { parseCounterSet, parseNamedCounter } from './counters.js';
import { createExec } from './nft-exec.js';
import type { Exec, ExecOptions } from './nft-exec.js';
import { MAX_SLOT, MIN_SLOT, NFT_FAMILY, NFT_TABLE, engineMark } from './names.js';
import { BUCKET_COUNT } from '../buckets/table.js';
import type {
  BucketCounters, ForwardingMethod, RedirectCounters, Redirector, ServiceRedirect,
} from './redirector.js';
import { installSlotRoute, removeAllRoutes, removeSlotRoute } from './routes.js';
import {
  baseRuleset, bucketCounterSet, deniedCounter, engineCounterSet, planService, removeTableRuleset, servicesRuleset,
  unassignedCounter,
} from './ruleset.js';

export interface NftRedirectorOptions extends ExecOptions {
  /** Replaces the real command runner (tests). */
  readonly exec?: Exec;
  /** Replaces the ip_gre probe (tests). */
  readonly probeGre?: () => Promise<boolean>;
}

/** A slot is one (forwarding method, engine) pair with its own fwmark, ip rule and routing table. */
const slotKey = (forwarding: ForwardingMethod, engine: EngineAddress): string => `${forwarding} ${engine}`;

export class NftRedirector implements Redirector {
  readonly name = 'nft';
  private readonly exec: Exec;
  private readonly probeGre: () => Promise<boolean>;
  private started = false;
  private greAvailable = false;
  private services = new Map<number, ServiceRedirect>();
  private slots = new Map<string, number>();
  private lastSlot = MIN_SLOT - 1;
  /** Per service: the engine marks its counter set holds. */
  private countedMarks = new Map<number, number[]>();
  /** Serializes operations: two transactions never interleave. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(options: NftRedirectorOptions = {}) {
    this.exec = options.exec ?? createExec(options);
    this.probeGre = options.probeGre ?? (() => kernelHasIpGre(this.exec));
  }

  start(): Promise<void> {
    return this.serial(async () => {
      await this.removeEverything();
      await this.exec('nft', ['-f', '-'], baseRuleset());
      this.greAvailable = await this.probeGre();
      this.started = true;
    });
  }

  apply(service: ServiceRedirect): Promise<void> {
    return this.serial(async () => {
      this.mustBeStarted();
      if (service.forwarding === 'gre' && !this.greAvailable) {
        throw new DataplaneError('missing-kernel-feature',
          `service ${service.serviceId}: forwarding gre needs GRE tunnel devices, and this kernel has no ip_gre ` +
          '(built in or as a module); use `dataplane.backend: userland`, which sends GRE from userland, or ' +
          'forwarding: l2');
      }
      const next = new Map(this.services);
      next.set(service.serviceId, service);
      await this.commit(next, []);
    });
  }

  removeService(serviceId: number): Promise<void> {
    return this.serial(async () => {
      this.mustBeStarted();
      if (!this.services.has(serviceId)) return;
      const next = new Map(this.services);
      next.delete(serviceId);
      await this.commit(next, [serviceId]);
    });
  }

  stop(): Promise<void> {
    return this.serial(async () => {
      await this.removeEverything();
      this.started = false;
    });
  }

  counters(): Promise<RedirectCounters> {
    return this.serial(async () => {
      this.mustBeStarted();
      const buckets = new Map<number, readonly BucketCounters[]>();
      const engines = new Map<number, ReadonlyMap<EngineAddress, BucketCounters>>();
      const services = new Map<number, { denied: BucketCounters; unassigned: BucketCounters }>();
      for (const s of this.services.values()) {
        const id = s.serviceId;
        const seen = parseCounterSet(await this.listSet(bucketCounterSet(id)));
        buckets.set(id, Array.from({ length: BUCKET_COUNT }, (_, b) => seen.get(b) ?? { packets: 0, bytes: 0 }));
        const byMark = parseCounterSet(await this.listSet(engineCounterSet(id)));
        const perEngine = new Map<EngineAddress, BucketCounters>();
        for (const e of s.engines) {
          const slot = this.slots.get(slotKey(s.forwarding, e));
          const c = slot !== undefined ? byMark.get(engineMark(slot)) : undefined;
          if (c !== undefined) perEngine.set(e, c);
        }
        engines.set(id, perEngine);
        services.set(id, {
          denied: parseNamedCounter(await this.listCounter(deniedCounter(id))),
          unassigned: parseNamedCounter(await this.listCounter(unassignedCounter(id))),
        });
      }
      return { buckets, engines, services };
    });
  }

  /** The slot of each (forwarding, engine) now in force; for tests and the admin views. */
  slotsInUse(): ReadonlyMap<string, number> {
    return new Map(this.slots);
  }

  private listCounter(name: string): Promise<string> {
    return this.exec('nft', ['-j', 'list', 'counter', NFT_FAMILY, NFT_TABLE, name]);
  }

  private listSet(name: string): Promise<string> {
    return this.exec('nft', ['-j', 'list', 'set', NFT_FAMILY, NFT_TABLE, name]);
  }

  private async commit(next: Map<number, ServiceRedirect>, removed: number[]): Promise<void> {
    // Slots: keep existing ones, allocate new ones, release those no service needs.
    const wanted = new Set<string>();
    for (const s of next.values()) for (const e of s.engines) wanted.add(slotKey(s.forwarding, e));
    const slots = new Map<string, number>();
    const added: [string, number][] = [];
    for (const key of wanted) {
      const existing = this.slots.get(key);
      if (existing !== undefined) slots.set(key, existing);
    }
    for (const key of wanted) {
      if (slots.has(key)) continue;
      const slot = this.allocateSlot(slots);
      slots.set(key, slot);
      added.push([key, slot]);
    }
    const plans = [...next.values()].sort((a, b) => a.serviceId - b.serviceId).map((s) => {
      const marks = new Map<EngineAddress, number>();
      for (const e of s.engines) marks.set(e, engineMark(slots.get(slotKey(s.forwarding, e)) ?? 0));
      return { ...planService(s, marks), previousEngineMarks: this.countedMarks.get(s.serviceId) ?? [] };
    });

    // Routes first, so a mark is never live without its route; undo them if anything fails.
    try {
      for (const [key, slot] of added) {
        const [forwarding, engine] = key.split(' ') as [ForwardingMethod, EngineAddress];
        await installSlotRoute(this.exec, slot, engine, forwarding);
      }
      await this.exec('nft', ['-f', '-'], servicesRuleset(plans, removed));
    } catch (e) {
      for (const [, slot] of added) await removeSlotRoute(this.exec, slot);
      throw e;
    }
    for (const [key, slot] of this.slots) if (!slots.has(key)) await removeSlotRoute(this.exec, slot);
    this.slots = slots;
    this.services = next;
    this.countedMarks = new Map(plans.map((p) => [p.serviceId, [...p.engineMarks.values()]]));
  }

  /** Rotates through the slot range so a released mark is not reused soon (a stale flow never meets a new engine). */
  private allocateSlot(taken: ReadonlyMap<string, number>): number {
    const used = new Set([...taken.values(), ...this.slots.values()]);
    const span = MAX_SLOT - MIN_SLOT + 1;
    for (let i = 1; i <= span; i++) {
      const slot = MIN_SLOT + ((this.lastSlot - MIN_SLOT + i) % span + span) % span;
      if (!used.has(slot)) {
        this.lastSlot = slot;
        return slot;
      }
    }
    throw new DataplaneError('unsupported-service', `more than ${span} engines: no free fwmark slot`);
  }

  private async removeEverything(): Promise<void> {
    await this.exec('nft', ['-f', '-'], removeTableRuleset());
    await removeAllRoutes(this.exec);
    this.services = new Map();
    this.slots = new Map();
    this.countedMarks = new Map();
  }

  private mustBeStarted(): void {
    if (!this.started) throw new DataplaneError('not-started', 'the nft data plane is not started: call start() first');
  }

  private serial<T>(job: () => Promise<T>): Promise<T> {
    const run = this.queue.then(job, job);
    this.queue = run.catch(() => undefined);
    return run;
  }
}
