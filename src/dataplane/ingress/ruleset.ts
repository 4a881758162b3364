// Pure generation of the ingress backend's ruleset text (docs/dataplane/ingress.md, "The ingress backend"): the table
// and each transaction here, a service's own objects in service-objects.ts, the names and numbers in names.ts. Nothing
// here runs a command.
//
// Table `netdev wccpd_ingress`: base chains in the ingress hook of the client interfaces, so a redirected packet is
// handed to its engine by L2 (`fwd ip to <engine> device <dev>`: the frame's destination MAC is the engine's, the IP
// header is untouched) before routing, conntrack or any ip rule sees it. Stickiness is a per-service flow map filled
// from the packet path: the first packet of a flow is classified by the current table (the same exact WCCP hash as
// the nft backend, ruleset.ts's @byte/@nibxor chains, or the mask maps) and its verdict recorded as an engine slot
// number; later packets look it up. `meta priority` (skb->priority) carries the bucket and the slot number as scratch:
// every path that wrote it sets it back to 0 before the packet leaves the hook, so no qdisc ever sees our value.
import { DIRECT_VALUE } from '../kernel/names.js';
import {
  bucketCounterSet,
  bucketMap,
  claimChain,
  classifyChain,
  compareServiceOrder,
  deniedCounter,
  engineCounter,
  enginesSet,
  hashChains6,
  hashStatics,
  maskMap,
  portProtocol,
  quote,
  serviceChain,
  slotChain,
  unassignedCounter,
} from '../kernel/rules.js';
import type { ServicePlan } from '../kernel/rules.js';
import {
  I,
  SLOTS_MAP,
  GONE_CHAIN,
  DIRECT_CHAIN,
  LOST_VALUE,
  closingValue,
  HOOK_PRIORITY,
  flowsMap,
  flowsFullCounter,
  reopenedSet,
  tcpChains,
  unassignedChain,
  refusedChain,
  hookChain,
  tcpMaps,
  familyName,
} from './names.js';
import type { AddressFamily } from '../../vocabulary.js';
import type { FlowLimits, FlowKeyKind } from './names.js';
import { ingressServiceObjects, slotRule } from './service-objects.js';
import type { IngressService, IngressSlot, IngressWritten } from './service-objects.js';

/** Removes our table if it exists (the `add` makes the `delete` safe when it does not). */
export function removeIngressTableRuleset(): string {
  return `add table ${I}\ndelete table ${I}\n`;
}

/**
 * The static part (start()): the hash maps and chains, the slots map, `gone` and `direct`. No hook yet: nothing
 * passes through the table until a service with client interfaces is applied.
 */
export function ingressBaseRuleset(): string {
  return [
    removeIngressTableRuleset().trimEnd(),
    `add table ${I}`,
    ...hashStatics(I, { cache: true }),
    `add map ${I} ${SLOTS_MAP} { typeof meta priority : verdict; }`,
    `add chain ${I} ${GONE_CHAIN}`,
    `add rule ${I} ${GONE_CHAIN} meta priority set 0`,
    `add rule ${I} ${GONE_CHAIN} meta l4proto tcp reject with tcp reset`,
    `add rule ${I} ${GONE_CHAIN} reject`,
    `add chain ${I} ${DIRECT_CHAIN}`,
    `add rule ${I} ${DIRECT_CHAIN} meta priority set 0 accept`,
    `add element ${I} ${SLOTS_MAP} { ${DIRECT_VALUE} : goto ${DIRECT_CHAIN}, ${closingValue(DIRECT_VALUE)} : goto ${DIRECT_CHAIN} }`,
    `add element ${I} ${SLOTS_MAP} { ${closingValue(LOST_VALUE)} : goto ${GONE_CHAIN} }`,
    '',
  ].join('\n');
}

/**
 * The static part of IPv6 (docs/dataplane/ingress.md, "IPv6"), written with the first service that redirects IPv6: the
 * IPv6 hash chains and caches (on the IPv4 ones' @byte and @nibxor) and @slots6, the IPv6 twin of @slots.
 */
export function ingress6Statics(): string[] {
  const slots6 = familyName('ipv6', SLOTS_MAP);
  return [
    ...hashChains6(I, { cache: true }),
    `add map ${I} ${slots6} { typeof meta priority : verdict; }`,
    `flush map ${I} ${slots6}`,
    `add element ${I} ${slots6} { ${DIRECT_VALUE} : goto ${DIRECT_CHAIN}, ${closingValue(DIRECT_VALUE)} : goto ${DIRECT_CHAIN} }`,
    `add element ${I} ${slots6} { ${closingValue(LOST_VALUE)} : goto ${GONE_CHAIN} }`,
  ];
}

/** A service whose objects go (of one family: a service that stops redirecting IPv6 loses its IPv6 objects). */
export interface IngressRemoved {
  readonly serviceId: number;
  /** Default ipv4 (with it, the service's hook rules go: every family's objects are removed with it). */
  readonly family?: AddressFamily;
  /** The mask maps it had. */
  readonly maskMaps: readonly number[];
  /** Its flow key (TCP services have the close, closing and closenew chains too). */
  readonly kind: FlowKeyKind;
}

/** The slots whose chains one family's objects gain and lose in a transaction. */
export interface SlotChanges {
  /** Slots no service holds any more: their chains and counter go, their flows are reset (@slots -> gone). */
  readonly released?: readonly number[];
  /** Slots new in this transaction (their @slots entry is written; a `gone` one replaced). */
  readonly added?: readonly number[];
  /** Slots whose @slots entry is `goto gone` before this transaction. */
  readonly goneBefore?: ReadonlySet<number>;
  /** IPv6: live slots whose chain is written again (their engine's or its device's MAC address changed). */
  readonly rewrite?: readonly IngressSlot[];
}

export interface IngressChange extends SlotChanges {
  /** Every service in force: its IPv4 objects, and (`family: 'ipv6'`) those of a service that redirects IPv6 too. */
  readonly services: readonly IngressService[];
  readonly removed?: readonly IngressRemoved[];
  /** IPv6's slot chains: the slots of the services that redirect IPv6 (released, added, gone), as the fields above. */
  readonly ipv6?: SlotChanges;
  /** Write the static part of IPv6 (ingress6Statics) first: it is not in the table yet. */
  readonly statics6?: boolean;
  /** The base chain now (null: none, no service has a client interface) and the one in force before. */
  readonly hook: { readonly chain: number | null; readonly previous: number | null };
  readonly limits: FlowLimits;
}

/** Every client interface of the services, sorted: the base chain's devices. */
export function hookDevices(plans: readonly Pick<ServicePlan, 'clientInterfaces'>[]): string[] {
  return [...new Set(plans.flatMap((p) => p.clientInterfaces))].sort();
}

/**
 * The match of a service's client packets in the base chain: its ports first, then IPv4 (an IPv6 packet never
 * matches), protocol, and the arriving interface only where the service does not listen on every device of the
 * chain. Ports first: every packet on a client interface meets this rule, and one of another port (unrelated traffic,
 * most of it) fails at the first compare, 2 expressions where the protocol tests first made it 6. `th` reads the
 * transport header raw, with no protocol test of its own (the tests after it make the match exact; a packet with no
 * transport header, ARP or a fragment, fails the load).
 */
export function ingressMatch(
  p: Pick<ServicePlan, 'clientInterfaces' | 'protocol' | 'ports' | 'portsAreSource'>,
  devices: readonly string[],
  family: AddressFamily = 'ipv4',
): string {
  const mine = new Set(p.clientInterfaces);
  const parts: string[] = [];
  if (p.ports.length > 0) parts.push(`th ${p.portsAreSource ? 'sport' : 'dport'} { ${p.ports.join(', ')} }`);
  parts.push(
    `meta protocol ${family === 'ipv4' ? 'ip' : 'ip6'}`,
    `meta l4proto ${portProtocol(p.protocol) ?? String(p.protocol)}`,
  );
  if (devices.some((d) => !mine.has(d))) parts.push(`iifname { ${[...mine].sort().map(quote).join(', ')} }`);
  return parts.join(' ');
}

/**
 * One atomic transaction: the base chain and its rules (one per service with client interfaces, in
 * compareServiceOrder), the written services' objects, the removed services' and released slots' objects gone, and
 * @slots in step (a released slot's flows are reset by `gone` until its number is placed again).
 */
export function ingressServicesRuleset(c: IngressChange): string {
  return ingressServicesWrite(c).text;
}

/** ingressServicesRuleset, and what it writes of each service it writes (for the next change's `written`). */
export function ingressServicesWrite(c: IngressChange): {
  text: string;
  written: Map<number, IngressWritten>;
  written6: Map<number, IngressWritten>;
} {
  const written = new Map<number, IngressWritten>();
  const written6 = new Map<number, IngressWritten>();
  const removed = c.removed ?? [];
  const released = c.released ?? [];
  const added = c.added ?? [];
  const released6 = c.ipv6?.released ?? [];
  const added6 = c.ipv6?.added ?? [];
  const lines: string[] = c.statics6 === true ? ingress6Statics() : [];
  const devices = hookDevices(c.services.map((s) => s.plan));
  const { chain: hook, previous } = c.hook;
  if (hook !== null && hook === previous) lines.push(`flush chain ${I} ${hookChain(hook)}`);
  else {
    if (previous !== null) lines.push(`flush chain ${I} ${hookChain(previous)}`);
    if (hook !== null) {
      lines.push(
        `add chain ${I} ${hookChain(hook)} { type filter hook ingress devices = { ${devices.map(quote).join(', ')} } ` +
          `priority ${HOOK_PRIORITY}; policy accept; }`,
      );
    }
  }
  const removedChains = (r: IngressRemoved): string[] =>
    [
      ...[serviceChain, classifyChain, unassignedChain, refusedChain].map((ch) => ch(r.serviceId)),
      ...(r.kind === 'tcp' ? tcpChains(r.serviceId) : []),
    ].map((ch) => familyName(r.family ?? 'ipv4', ch));
  const slotChains = (s: number, family: AddressFamily): string[] =>
    [claimChain(s), slotChain(s)].map((ch) => familyName(family, ch));
  for (const r of removed) for (const ch of removedChains(r)) lines.push(`flush chain ${I} ${ch}`);
  for (const s of released) lines.push(...slotChains(s, 'ipv4').map((ch) => `flush chain ${I} ${ch}`));
  for (const s of released6) lines.push(...slotChains(s, 'ipv6').map((ch) => `flush chain ${I} ${ch}`));
  const ordered = [...c.services].sort((a, b) => compareServiceOrder(a.plan, b.plan));
  const fresh = new Set(added);
  const fresh6 = new Set(added6);
  for (const s of ordered) {
    if (s.plan.unchanged === true) continue;
    const v6 = s.family === 'ipv6';
    const objects = ingressServiceObjects(s, c.limits, v6 ? fresh6 : fresh);
    lines.push(...objects.lines);
    (v6 ? written6 : written).set(s.plan.serviceId, objects.written);
  }
  // Both values of a slot, open and closing, go to the same chain; each family's slots in its own map.
  const both = (s: number, chain: string): string => `${s} : goto ${chain}, ${closingValue(s)} : goto ${chain}`;
  const slotElements = (family: AddressFamily, changes: SlotChanges): void => {
    const map = familyName(family, SLOTS_MAP);
    for (const s of changes.added ?? []) {
      if (changes.goneBefore?.has(s) === true) lines.push(`delete element ${I} ${map} { ${s}, ${closingValue(s)} }`);
      lines.push(`add element ${I} ${map} { ${both(s, familyName(family, slotChain(s)))} }`);
    }
    for (const s of changes.released ?? []) {
      lines.push(
        `delete element ${I} ${map} { ${s}, ${closingValue(s)} }`,
        `add element ${I} ${map} { ${both(s, GONE_CHAIN)} }`,
      );
    }
  };
  slotElements('ipv4', c);
  if (c.ipv6 !== undefined) slotElements('ipv6', c.ipv6);
  for (const t of c.ipv6?.rewrite ?? [])
    lines.push(`flush chain ${I} ${familyName('ipv6', slotChain(t.slot))}`, slotRule(t, 'ipv6'));
  for (const r of removed) {
    const id = r.serviceId;
    const n = (name: string): string => familyName(r.family ?? 'ipv4', name);
    lines.push(
      // The verdict maps first: their elements name unassigned_<id> and refused_<id> (`goto`), which the kernel will
      // not delete while they do (EBUSY).
      ...r.maskMaps.map((k) => `delete map ${I} ${maskMap(id, k)}`),
      `delete map ${I} ${n(bucketMap(id))}`,
      ...(r.kind === 'tcp' ? tcpMaps(id).map((m) => `delete map ${I} ${n(m)}`) : []),
      ...removedChains(r).map((ch) => `delete chain ${I} ${ch}`),
      `delete map ${I} ${n(flowsMap(id))}`,
      ...(r.kind === 'tcp' ? [`delete set ${I} ${n(reopenedSet(id))}`] : []),
      `delete set ${I} ${n(enginesSet(id))}`,
      `delete set ${I} ${n(bucketCounterSet(id))}`,
      ...[deniedCounter, unassignedCounter, flowsFullCounter].map((c) => `delete counter ${I} ${n(c(id))}`),
    );
  }
  const deleteSlots = (s: number, family: AddressFamily): string[] => [
    ...slotChains(s, family).map((ch) => `delete chain ${I} ${ch}`),
    `delete counter ${I} ${familyName(family, engineCounter(s))}`,
  ];
  for (const s of released) lines.push(...deleteSlots(s, 'ipv4'));
  for (const s of released6) lines.push(...deleteSlots(s, 'ipv6'));
  if (hook !== null) {
    for (const s of ordered) {
      if (s.plan.clientInterfaces.length === 0 || s.hooked === false) continue;
      const family = s.family ?? 'ipv4';
      lines.push(
        `add rule ${I} ${hookChain(hook)} ${ingressMatch(s.plan, devices, family)} ` +
          `jump ${familyName(family, serviceChain(s.plan.serviceId))}`,
      );
    }
  }
  if (previous !== null && previous !== hook) lines.push(`delete chain ${I} ${hookChain(previous)}`);
  lines.push('');
  return { text: lines.join('\n'), written, written6 };
}
