// Does an engine's advertised capabilities fit the service's methods? Draft 4.4-4.5: an absent element means
// GRE forwarding, hash assignment, GRE return.
import type { AdvertisedCapabilities, AssignmentMethod, ForwardingMethod, ReturnMethod } from './types.js';
import { ASSIGNMENT_CAPABILITY, FORWARDING_CAPABILITY, RETURN_CAPABILITY } from '../vocabulary.js';

function offeredNames(bits: number, names: Record<string, number>): string[] {
  return Object.entries(names)
    .filter(([, bit]) => (bits & bit) !== 0)
    .map(([n]) => n);
}

function offered(bits: number, names: Record<string, number>): string {
  const out = offeredNames(bits, names).map((n) => n.toUpperCase());
  return out.length > 0 ? out.join('+') : 'nothing';
}

/**
 * null when the engine fits, else a sentence naming what differs and the fix on either side: the squid.conf line
 * that makes a Squid engine offer the service's method (Squid's default is GRE forwarding and return, wccpd's L2),
 * or the wccpd key that takes the method the engine offers (docs/squid.md).
 */
export function capabilityMismatch(
  adv: AdvertisedCapabilities,
  service: { forwarding: ForwardingMethod; assignment: AssignmentMethod; return: ReturnMethod },
): string | null {
  const problems: string[] = [];
  const squid: string[] = [];
  const wccpd: string[] = [];
  const check = (
    what: 'forwarding' | 'assignment' | 'return',
    bits: number,
    names: Record<string, number>,
    squidDirective: string,
  ) => {
    const wanted = service[what];
    if ((bits & (names[wanted] ?? 0)) !== 0) return;
    problems.push(`${what} method: engine offers ${offered(bits, names)}, service uses ${wanted.toUpperCase()}`);
    squid.push(`${squidDirective} ${wanted}`);
    const theirs = offeredNames(bits, names)[0];
    if (theirs !== undefined) wccpd.push(`${what}: ${theirs}`);
  };
  check('forwarding', adv.forwarding ?? FORWARDING_CAPABILITY.gre, FORWARDING_CAPABILITY, 'wccp2_forwarding_method');
  check('assignment', adv.assignment ?? ASSIGNMENT_CAPABILITY.hash, ASSIGNMENT_CAPABILITY, 'wccp2_assignment_method');
  check('return', adv.return ?? RETURN_CAPABILITY.gre, RETURN_CAPABILITY, 'wccp2_return_method');
  if (problems.length === 0) return null;
  const fix =
    `fix: on a Squid engine add to squid.conf ${squid.map((l) => `"${l}"`).join(', ')}` +
    (wccpd.length > 0 ? `; or set ${wccpd.join(', ')} in the service's wccpd config` : '') +
    ' (docs/squid.md)';
  return `${problems.join('; ')}; ${fix}`;
}
