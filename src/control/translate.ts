// Between the wire and the cluster: decoded WCCPv2 messages -> the cluster's inputs, and the cluster's plans ->
// messages to encode. No I/O here.
import { CapabilityType, CommandType, findComponent, VERSION_2_0, WebCacheFlag } from '../wire/wccp2/index.js';
import { ipv4Bytes } from '../address.js';
import { ASSIGNMENT_CAPABILITY, FORWARDING_CAPABILITY, RETURN_CAPABILITY } from '../vocabulary.js';
import type { Quirk } from '../vocabulary.js';
import type {
  AssignmentBucket,
  CapabilityElement,
  Component,
  MaskValueSet as WireMaskValueSet,
  ServiceInfo,
  WebCacheIdentityElement,
  Wccp2Message,
} from '../wire/wccp2/index.js';
import type {
  HereIAm,
  ISeeYouPlan,
  MaskValueSet,
  RedirectAssign,
  RemovalQueryPlan,
  ServiceDefinition,
} from '../cluster/index.js';

export type Translated<T> =
  { readonly ok: true; readonly value: T } | { readonly ok: false; readonly reason: string; readonly detail: string };

function serviceOf(s: ServiceInfo): ServiceDefinition {
  return {
    type: s.serviceType,
    id: s.serviceId,
    priority: s.priority,
    protocol: s.protocol,
    flags: s.flags,
    ports: s.ports.filter((p) => p !== 0),
  };
}

/** The service id a message is about, if it has a Service Info. */
export function serviceIdOf(msg: Wccp2Message): number | null {
  return findComponent(msg, 'service')?.serviceId ?? null;
}

/** A decoded HERE_I_AM as the cluster sees it; `routerAddress` picks our entry in the Web-Cache View. */
export function toHereIAm(msg: Wccp2Message, routerAddress: string): Translated<HereIAm> {
  const service = findComponent(msg, 'service');
  const identity = findComponent(msg, 'web-cache-identity');
  const view = findComponent(msg, 'web-cache-view');
  if (!service || !identity || !view)
    return { ok: false, reason: 'missing-component', detail: 'HERE_I_AM without Service, Web-Cache Identity or View' };
  const el = identity.element;
  const caps: { forwarding?: number; assignment?: number; return?: number } = {};
  for (const c of findComponent(msg, 'capabilities')?.elements ?? []) {
    if (c.form !== 'value') continue;
    if (c.type === CapabilityType.FORWARDING_METHOD) caps.forwarding = c.value;
    else if (c.type === CapabilityType.ASSIGNMENT_METHOD) caps.assignment = c.value;
    else if (c.type === CapabilityType.PACKET_RETURN_METHOD) caps.return = c.value;
  }
  const command = findComponent(msg, 'command-extension');
  const historical =
    (el.flags & WebCacheFlag.HISTORICAL) !== 0 && el.assignment.type === 'hash' ? el.assignment.buckets : undefined;
  const shutdown = command?.commandType === CommandType.SHUTDOWN;
  return {
    ok: true,
    value: {
      service: serviceOf(service),
      engine: el.address,
      weight: el.weight,
      status: el.status,
      ...(historical && historical.length > 0 ? { historicalBuckets: historical } : {}),
      capabilities: caps,
      receivedId: view.routers.find((r) => r.routerId === routerAddress)?.receiveId ?? 0,
      ...(shutdown ? { shutdown: true } : {}),
    },
  };
}

/** A decoded REDIRECT_ASSIGN (hash form, in Assignment Info or Alternate Assignment) as the cluster sees it. */
export function toRedirectAssign(msg: Wccp2Message, from: string): Translated<RedirectAssign> {
  const service = findComponent(msg, 'service');
  const info = findComponent(msg, 'assignment-info');
  const alt = findComponent(msg, 'alternate-assignment');
  const hash = info ?? (alt?.assignment.type === 'hash' ? alt.assignment : undefined);
  if (!service) return { ok: false, reason: 'missing-component', detail: 'REDIRECT_ASSIGN without Service Info' };
  if (!hash)
    return {
      ok: false,
      reason: 'unsupported-assignment',
      detail: 'REDIRECT_ASSIGN without a hash assignment (mask assignments are not obeyed)',
    };
  return {
    ok: true,
    value: {
      serviceId: service.serviceId,
      from,
      key: hash.key,
      routers: hash.routers.map((r) => ({
        routerId: r.routerId,
        receiveId: r.receiveId,
        changeNumber: r.changeNumber,
      })),
      engines: hash.caches,
      buckets: hash.buckets,
    },
  };
}

function wireService(s: ServiceDefinition): ServiceInfo {
  const ports = [...s.ports.slice(0, 8)];
  while (ports.length < 8) ports.push(0);
  return {
    kind: 'service',
    serviceType: s.type,
    serviceId: s.id,
    priority: s.priority,
    protocol: s.protocol,
    flags: s.flags,
    ports,
  };
}

function wireMaskSets(sets: readonly MaskValueSet[]): WireMaskValueSet[] {
  return sets.map((s) => ({
    mask: {
      srcAddrMask: s.mask.sourceAddressMask,
      dstAddrMask: s.mask.destinationAddressMask,
      srcPortMask: s.mask.sourcePortMask,
      dstPortMask: s.mask.destinationPortMask,
    },
    values: s.values.map((v) => ({
      srcAddrValue: v.sourceAddress,
      dstAddrValue: v.destinationAddress,
      srcPortValue: v.sourcePort,
      dstPortValue: v.destinationPort,
      webCache: v.engine,
    })),
  }));
}

/**
 * `squid-capability-stride`: current Squid steps through capability elements 12 bytes at a time (its parser disagrees
 * with its own encoder: docs/architecture.md, decision 4); a zero-length element after each real one lets it read all
 * three methods.
 * Wireshark then calls the last 4 bytes trailing ("too long"), so this is opt-in per service, never the default.
 */
const STRIDE_FILLER: CapabilityElement = { form: 'raw', type: 0, data: '' };

/** The unicast I_SEE_YOU of a plan; `shutdownResponse` adds the Command Extension answering a SHUTDOWN. */
export function iSeeYouMessage(
  plan: ISeeYouPlan,
  options: { md5: boolean; shutdownResponse?: boolean; quirks?: readonly Quirk[] },
): Wccp2Message {
  const methods: CapabilityElement[] = [
    {
      form: 'value',
      type: CapabilityType.FORWARDING_METHOD,
      value: FORWARDING_CAPABILITY[plan.capabilities.forwarding],
    },
    {
      form: 'value',
      type: CapabilityType.ASSIGNMENT_METHOD,
      value: ASSIGNMENT_CAPABILITY[plan.capabilities.assignment],
    },
    { form: 'value', type: CapabilityType.PACKET_RETURN_METHOD, value: RETURN_CAPABILITY[plan.capabilities.return] },
  ];
  const capabilities = options.quirks?.includes('squid-capability-stride')
    ? methods.flatMap((m) => [m, STRIDE_FILLER])
    : methods;
  const mask = plan.capabilities.assignment === 'mask';
  const maskSets = wireMaskSets(plan.maskSets);
  const caches: WebCacheIdentityElement[] = plan.engines.map((e) => ({
    address: e.address,
    hashRevision: 0,
    flags: 0,
    assignment: mask
      ? {
          type: 'mask',
          sets: maskSets.map((s) => ({ mask: s.mask, values: s.values.filter((v) => v.webCache === e.address) })),
        }
      : { type: 'hash', buckets: e.buckets },
    weight: Math.min(e.weight, 0xffff),
    status: 0,
  }));
  const index = new Map(plan.engines.map((e, i) => [e.address, i]));
  const buckets: AssignmentBucket[] = plan.table.buckets.map((owner) => {
    const i = owner === null ? undefined : index.get(owner);
    return i === undefined ? null : { cache: i, alternate: false };
  });
  const routers = [{ routerId: plan.routerAddress, receiveId: plan.receiveId, changeNumber: plan.memberChangeNumber }];
  const components: Component[] = [
    md5OrNone(options.md5),
    wireService(plan.service),
    {
      kind: 'router-identity',
      router: { routerId: plan.routerAddress, receiveId: plan.receiveId },
      sentTo: plan.routerAddress,
      receivedFrom: [plan.engine],
    },
    {
      kind: 'router-view',
      memberChangeNumber: plan.memberChangeNumber,
      assignmentKey: plan.assignmentKey,
      routers: plan.routers,
      caches,
    },
    mask
      ? { kind: 'assignment-map', sets: maskSets }
      : // Hash assignments ride in Alternate Assignment (type 13): Wireshark flags an Assignment Info (type 6) inside
        // an I_SEE_YOU as an error ("should not"), and the engines read their buckets from the Router View anyway.
        {
          kind: 'alternate-assignment',
          assignment: {
            type: 'hash',
            key: plan.assignmentKey,
            routers,
            caches: plan.engines.map((e) => e.address),
            buckets,
          },
        },
    { kind: 'capabilities', elements: capabilities },
  ];
  if (options.shutdownResponse) {
    components.push({
      kind: 'command-extension',
      commandType: CommandType.SHUTDOWN_RESPONSE,
      data: addressHex(plan.engine),
    });
  }
  return { type: 'I_SEE_YOU', version: VERSION_2_0, components };
}

export function removalQueryMessage(plan: RemovalQueryPlan, options: { md5: boolean }): Wccp2Message {
  return {
    type: 'REMOVAL_QUERY',
    version: VERSION_2_0,
    components: [
      md5OrNone(options.md5),
      wireService(plan.service),
      {
        kind: 'router-query',
        routerId: plan.routerAddress,
        receiveId: plan.receiveId,
        sentTo: plan.routerAddress,
        target: plan.engine,
      },
    ],
  };
}

function md5OrNone(md5: boolean): Component {
  return md5 ? { kind: 'security', option: 'md5', digest: '00'.repeat(16) } : { kind: 'security', option: 'none' };
}

function addressHex(address: string): string {
  return Buffer.from(ipv4Bytes(address) ?? []).toString('hex');
}
