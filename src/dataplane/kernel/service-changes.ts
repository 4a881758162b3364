// applyAll and removeService of a kernel backend (nft, ingress): in the backend's queue, once it is started, the
// services in force after the change handed to its commit with those removed and those whose objects are written again
// (every other one keeps its maps and chains).
import { byServiceId } from '../redirector.js';
import type { ServiceRedirect } from '../redirector.js';
import type { ChangeQueue } from './change-queue.js';

/** Writes `next` in ONE transaction; `changed`: the services whose objects are rewritten. */
export type CommitServices = (
  next: Map<number, ServiceRedirect>,
  removed: number[],
  changed: ReadonlySet<number>,
) => Promise<void>;

export interface ServiceChangesOptions {
  readonly queue: ChangeQueue;
  /** The services in force. */
  readonly inForce: () => ReadonlyMap<number, ServiceRedirect>;
  /** Throws unless the backend is started. */
  readonly mustBeStarted: () => void;
  /** Throws for a service the backend cannot redirect (every given one is checked before anything is written). */
  readonly check: (service: ServiceRedirect) => void;
  /** A change of the services in force, in the queue already. */
  readonly commit: CommitServices;
}

export class ServiceChanges {
  constructor(private readonly o: ServiceChangesOptions) {}

  /** Every given service in ONE commit, in its place among those in force; nothing when none is given. */
  applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    return this.o.queue.serial(async () => {
      this.o.mustBeStarted();
      const given = byServiceId(services);
      if (given.size === 0) return;
      for (const service of given.values()) this.o.check(service);
      const next = new Map(this.o.inForce());
      for (const [id, service] of given) next.set(id, service);
      await this.o.commit(next, [], new Set(given.keys()));
    });
  }

  /** One commit of the services in force without `serviceId`; nothing when it is not applied. */
  removeService(serviceId: number): Promise<void> {
    return this.o.queue.serial(async () => {
      this.o.mustBeStarted();
      if (!this.o.inForce().has(serviceId)) return;
      const next = new Map(this.o.inForce());
      next.delete(serviceId);
      await this.o.commit(next, [serviceId], new Set());
    });
  }
}
