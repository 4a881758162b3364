// Does an engine's advertised capabilities fit the service's methods? Draft 4.4-4.5: an absent element means
// GRE forwarding, hash assignment, GRE return.
import type { AdvertisedCapabilities, AssignmentMethod, ForwardingMethod, ReturnMethod } from './types.js';

const METHOD_BIT = { gre: 0x1, l2: 0x2 } as const;
const ASSIGNMENT_BIT = { hash: 0x1, mask: 0x2 } as const;

function offered(bits: number, names: Record<string, number>): string {
  const out = Object.entries(names).filter(([, bit]) => (bits & bit) !== 0).map(([n]) => n.toUpperCase());
  return out.length > 0 ? out.join('+') : 'nothing';
}

/** null when the engine fits, else a sentence naming what differs. */
export function capabilityMismatch(
  adv: AdvertisedCapabilities,
  service: { forwarding: ForwardingMethod; assignment: AssignmentMethod; return: ReturnMethod },
): string | null {
  const problems: string[] = [];
  const fwd = adv.forwarding ?? METHOD_BIT.gre;
  if ((fwd & METHOD_BIT[service.forwarding]) === 0)
    problems.push(`forwarding method: engine offers ${offered(fwd, METHOD_BIT)}, service uses ${service.forwarding.toUpperCase()}`);
  const asg = adv.assignment ?? ASSIGNMENT_BIT.hash;
  if ((asg & ASSIGNMENT_BIT[service.assignment]) === 0)
    problems.push(`assignment method: engine offers ${offered(asg, ASSIGNMENT_BIT)}, service uses ${service.assignment.toUpperCase()}`);
  const ret = adv.return ?? METHOD_BIT.gre;
  if ((ret & METHOD_BIT[service.return]) === 0)
    problems.push(`return method: engine offers ${offered(ret, METHOD_BIT)}, service uses ${service.return.toUpperCase()}`);
  return problems.length > 0 ? problems.join('; ') : null;
}
