// Does an engine's advertised capabilities fit the service's methods? Draft 4.4-4.5: an absent element means
// GRE forwarding, hash assignment, GRE return.
import type { AdvertisedCapabilities, AssignmentMethod, ForwardingMethod, ReturnMethod } from './types.js';
import { ASSIGNMENT_CAPABILITY, FORWARDING_CAPABILITY, RETURN_CAPABILITY } from '../vocabulary.js';

function offered(bits: number, names: Record<string, number>): string {
  const out = Object.entries(names)
    .filter(([, bit]) => (bits & bit) !== 0)
    .map(([n]) => n.toUpperCase());
  return out.length > 0 ? out.join('+') : 'nothing';
}

/** null when the engine fits, else a sentence naming what differs. */
export function capabilityMismatch(
  adv: AdvertisedCapabilities,
  service: { forwarding: ForwardingMethod; assignment: AssignmentMethod; return: ReturnMethod },
): string | null {
  const problems: string[] = [];
  const fwd = adv.forwarding ?? FORWARDING_CAPABILITY.gre;
  if ((fwd & FORWARDING_CAPABILITY[service.forwarding]) === 0)
    problems.push(
      `forwarding method: engine offers ${offered(fwd, FORWARDING_CAPABILITY)}, service uses ${service.forwarding.toUpperCase()}`,
    );
  const asg = adv.assignment ?? ASSIGNMENT_CAPABILITY.hash;
  if ((asg & ASSIGNMENT_CAPABILITY[service.assignment]) === 0)
    problems.push(
      `assignment method: engine offers ${offered(asg, ASSIGNMENT_CAPABILITY)}, service uses ${service.assignment.toUpperCase()}`,
    );
  const ret = adv.return ?? RETURN_CAPABILITY.gre;
  if ((ret & RETURN_CAPABILITY[service.return]) === 0)
    problems.push(
      `return method: engine offers ${offered(ret, RETURN_CAPABILITY)}, service uses ${service.return.toUpperCase()}`,
    );
  return problems.length > 0 ? problems.join('; ') : null;
}
