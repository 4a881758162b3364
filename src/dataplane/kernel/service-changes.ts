// What applyAll and removeService of a kernel backend (nft, ingress) hand to its commit: the services in force after
// the change, those removed, and those whose objects are written again (every other one keeps its maps and chains).
import { byServiceId } from '../redirector.js';
import type { ServiceRedirect } from '../redirector.js';

/** Writes `next` in ONE transaction; `changed`: the services whose objects are rewritten. */
export type CommitServices = (
  next: Map<number, ServiceRedirect>,
  removed: number[],
  changed: ReadonlySet<number>,
) => Promise<void>;

/**
 * applyAll: every given service checked first (`check` throws for what the backend cannot do), then one commit of the
 * services in force with the given ones in their place; nothing when none is given.
 */
export async function applyServices(
  inForce: ReadonlyMap<number, ServiceRedirect>,
  services: readonly ServiceRedirect[],
  check: (service: ServiceRedirect) => void,
  commit: CommitServices,
): Promise<void> {
  const given = byServiceId(services);
  if (given.size === 0) return;
  for (const service of given.values()) check(service);
  const next = new Map(inForce);
  for (const [id, service] of given) next.set(id, service);
  await commit(next, [], new Set(given.keys()));
}

/** removeService: one commit of the services in force without `serviceId`; nothing when it is not applied. */
export async function removeServiceFrom(
  inForce: ReadonlyMap<number, ServiceRedirect>,
  serviceId: number,
  commit: CommitServices,
): Promise<void> {
  if (!inForce.has(serviceId)) return;
  const next = new Map(inForce);
  next.delete(serviceId);
  await commit(next, [serviceId], new Set());
}
