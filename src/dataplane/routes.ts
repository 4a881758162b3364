// Per-engine policy routes: a packet whose mark field holds slot s -> `ip rule` priority 2048 `fwmark s<<19/0xfff80000
// lookup 2048000000+s` -> that table's default route is the engine (L2: `via <engine> dev <its segment>`, the frame
// goes
// to the engine's MAC with the destination IP unchanged; GRE: the engine's tunnel device, one per engine shared by all
// its slots, since the kernel refuses a second tunnel to the same endpoint). Every object is written
// to the ownership record before it is created, and only recorded objects, or objects that carry all of wccpd's
// names (names.ts), are ever removed.
import type { EngineAddress } from '../buckets/table.js';
import { DataplaneError } from './errors.js';
import type { Exec } from './nft-exec.js';
import {
  RULE_PRIORITY,
  fieldOf,
  fwmarkSelector,
  guardRuleArgs,
  isOurGreDevice,
  isOurGuardRule,
  isOurRouteTable,
  isOurRule,
  landingRuleArgs,
  routeTable,
} from './names.js';
import type { OwnedObject, OwnershipRecord } from './ownership.js';
import type { ForwardingMethod } from './redirector.js';

interface RouteGet {
  dev?: string;
  gateway?: string;
  prefsrc?: string;
  type?: string;
}

/**
 * Where the engine is reached from, and our source address towards it, from `ip route get`. L2 forwarding rewrites
 * only the frame, so the engine must be on a directly attached segment; a GRE engine may be any number of hops away.
 */
export async function findEngineSegment(
  exec: Exec,
  engine: EngineAddress,
  forwarding: ForwardingMethod = 'l2',
): Promise<{ dev: string; src?: string }> {
  let routes: RouteGet[];
  try {
    routes = JSON.parse(await exec('ip', ['-j', 'route', 'get', engine])) as RouteGet[];
  } catch (e) {
    throw new DataplaneError('engine-not-attached', `engine ${engine}: no route to it (${(e as Error).message})`);
  }
  const r = routes[0];
  if (r === undefined || r.dev === undefined || r.type === 'local' || r.dev === 'lo') {
    throw new DataplaneError('engine-not-attached', `engine ${engine} is not on a network this gateway reaches`);
  }
  if (r.gateway !== undefined && forwarding === 'l2') {
    throw new DataplaneError(
      'engine-not-attached',
      `engine ${engine} is reached via the router ${r.gateway}, not directly: L2 forwarding needs the engine on a ` +
        `segment attached to this gateway (${r.dev}); attach it or use forwarding: gre`,
    );
  }
  return r.prefsrc !== undefined ? { dev: r.dev, src: r.prefsrc } : { dev: r.dev };
}

/** The kernel objects of one slot (a GRE engine's tunnel device is the engine's, not the slot's). */
export function slotObjects(slot: number): OwnedObject[] {
  return [
    { kind: 'rule', value: slot },
    { kind: 'route', table: routeTable(slot) },
  ];
}

const ruleArgs = (value: number): string[] => [
  'priority',
  String(RULE_PRIORITY),
  'fwmark',
  fwmarkSelector(value),
  'lookup',
  String(routeTable(value)),
];

export interface SlotRoute {
  readonly slot: number;
  readonly engine: EngineAddress;
  readonly forwarding: ForwardingMethod;
  /** GRE: the engine's tunnel device (greDevice(n)). */
  readonly device?: string;
}

/** A GRE engine's tunnel device. */
export interface GreTunnel {
  readonly device: string;
  readonly engine: EngineAddress;
}

/** Runs `ip -batch -`: one process for many commands. `force` goes on after a failed line (removals). */
async function ipBatch(exec: Exec, lines: readonly string[], force = false): Promise<void> {
  if (lines.length === 0) return;
  const run = exec('ip', [...(force ? ['-force'] : []), '-batch', '-'], `${lines.join('\n')}\n`);
  await (force ? run.catch(() => undefined) : run);
}

/** Looks up each engine's segment, a few `ip route get` at a time. */
async function segments(
  exec: Exec,
  wanted: readonly { engine: EngineAddress; forwarding: ForwardingMethod }[],
): Promise<{ dev: string; src?: string }[]> {
  const out: { dev: string; src?: string }[] = [];
  for (let i = 0; i < wanted.length; i += 8) {
    out.push(
      ...(await Promise.all(wanted.slice(i, i + 8).map((r) => findEngineSegment(exec, r.engine, r.forwarding)))),
    );
  }
  return out;
}

/**
 * Records, then installs (or replaces) the slots' rules and routing tables and the new GRE engines' tunnel devices
 * (`tunnels`, created before the routes that use them): a few processes in all.
 */
export async function installSlotRoutes(
  exec: Exec,
  record: OwnershipRecord,
  routes: readonly SlotRoute[],
  tunnels: readonly GreTunnel[] = [],
): Promise<void> {
  if (routes.length === 0 && tunnels.length === 0) return;
  const segs = await segments(exec, [
    ...routes,
    ...tunnels.map((t) => ({ engine: t.engine, forwarding: 'gre' as const })),
  ]);
  const tunnelSegs = segs.slice(routes.length);
  await record.add([
    ...tunnels.map((t): OwnedObject => ({ kind: 'link', name: t.device })),
    ...routes.flatMap((r) => slotObjects(r.slot)),
  ]);
  // A crashed run's leftovers of these exact objects (all recorded, all ours) go first.
  await ipBatch(
    exec,
    [...routes.map((r) => `rule del ${ruleArgs(r.slot).join(' ')}`), ...tunnels.map((t) => `link del ${t.device}`)],
    true,
  );
  await ipBatch(
    exec,
    tunnels.flatMap((t, i) => {
      const src = tunnelSegs[i]?.src;
      return [
        `link add ${t.device} type gre remote ${t.engine}${src !== undefined ? ` local ${src}` : ''}`,
        `link set ${t.device} up`,
      ];
    }),
  );
  await ipBatch(
    exec,
    routes.map((r, i) => {
      const table = String(routeTable(r.slot));
      if (r.forwarding === 'l2')
        return `route replace default via ${r.engine} dev ${segs[i]?.dev ?? ''} table ${table}`;
      if (r.device === undefined)
        throw new DataplaneError('command-failed', `slot ${r.slot}: GRE route without a device`);
      return `route replace default dev ${r.device} table ${table}`;
    }),
  );
  await ipBatch(
    exec,
    routes.map((r) => `rule add ${ruleArgs(r.slot).join(' ')}`),
  );
}

/** Installs one slot (see installSlotRoutes). */
export async function installSlotRoute(
  exec: Exec,
  record: OwnershipRecord,
  slot: number,
  engine: EngineAddress,
  forwarding: ForwardingMethod,
  tunnel?: GreTunnel,
): Promise<void> {
  await installSlotRoutes(
    exec,
    record,
    [{ slot, engine, forwarding, ...(tunnel ? { device: tunnel.device } : {}) }],
    tunnel !== undefined ? [tunnel] : [],
  );
}

/**
 * Removes the slots' rules and routes, then the given tunnel devices (no slot may route through them any more);
 * absent pieces are not an error; then forgets them.
 */
export async function removeSlotRoutes(
  exec: Exec,
  record: OwnershipRecord,
  slots: readonly number[],
  devices: readonly string[] = [],
): Promise<void> {
  const objects = [
    ...slots.flatMap((s) => slotObjects(s)),
    ...devices.map((name): OwnedObject => ({ kind: 'link', name })).filter((o) => record.has(o)),
  ];
  await removeObjects(exec, objects);
  await record.remove(objects);
}

/** Removes one slot (see removeSlotRoutes). */
export async function removeSlotRoute(exec: Exec, record: OwnershipRecord, slot: number): Promise<void> {
  await removeSlotRoutes(exec, record, [slot]);
}

/**
 * Records, then installs the guard pair (names.ts): packets whose mark field is empty skip the slots' rules. The
 * landing rule goes first, so the guard never points at nothing (a goto without its target is skipped anyway).
 */
export async function installGuard(exec: Exec, record: OwnershipRecord): Promise<void> {
  await record.add([{ kind: 'guard' }]);
  await ipBatch(exec, [`rule del ${guardRuleArgs().join(' ')}`, `rule del ${landingRuleArgs().join(' ')}`], true);
  await ipBatch(exec, [`rule add ${landingRuleArgs().join(' ')}`, `rule add ${guardRuleArgs().join(' ')}`]);
}

/** Removes the guard pair (absent is not an error), then forgets it. */
export async function removeGuard(exec: Exec, record: OwnershipRecord): Promise<void> {
  await removeObjects(exec, [{ kind: 'guard' }]);
  await record.remove([{ kind: 'guard' }]);
}

async function removeObjects(exec: Exec, objects: readonly OwnedObject[]): Promise<void> {
  // Rules first: no packet is steered into a table while it is taken apart.
  await ipBatch(
    exec,
    [
      ...objects.flatMap((o) =>
        o.kind === 'guard' ? [`rule del ${guardRuleArgs().join(' ')}`, `rule del ${landingRuleArgs().join(' ')}`] : [],
      ),
      ...objects.flatMap((o) => (o.kind === 'rule' ? [`rule del ${ruleArgs(o.value).join(' ')}`] : [])),
      ...objects.flatMap((o) => (o.kind === 'route' ? [`route del default table ${o.table}`] : [])),
      ...objects.flatMap((o) => (o.kind === 'link' ? [`link del ${o.name}`] : [])),
    ],
    true,
  );
}

interface RuleJson {
  priority?: number;
  fwmark?: string;
  fwmask?: string;
  table?: string | number;
  goto?: number;
  nop?: null;
}
interface LinkJson {
  ifname?: string;
  linkinfo?: { info_kind?: string };
}

/**
 * Removes what a previous run left: every recorded object, every `ip rule` that carries all of wccpd's names (its
 * priority, a value/mask in its mark field, its table) and that rule's default route, and GRE devices named
 * `wccpd-gre<slot>`. Nothing else: the main table, other tools' rules and tables are never read for deletion.
 */
export async function removeAllRoutes(exec: Exec, record: OwnershipRecord): Promise<void> {
  const objects = new Map<string, OwnedObject>();
  const add = (o: OwnedObject): void => {
    objects.set(JSON.stringify(o), o);
  };
  for (const o of record.objects()) add(o);
  const rules = JSON.parse(await exec('ip', ['-j', '-4', 'rule', 'list'])) as RuleJson[];
  for (const r of rules) {
    if (isOurGuardRule(r)) add({ kind: 'guard' });
    if (!isOurRule(r)) continue;
    const value = fieldOf(Number(r.fwmark));
    add({ kind: 'rule', value });
    if (isOurRouteTable(routeTable(value))) add({ kind: 'route', table: routeTable(value) });
  }
  const links = JSON.parse(await exec('ip', ['-j', '-d', 'link', 'show'])) as LinkJson[];
  for (const l of links) {
    if (l.ifname !== undefined && isOurGreDevice(l.ifname) && l.linkinfo?.info_kind === 'gre') {
      add({ kind: 'link', name: l.ifname });
    }
  }
  await removeObjects(exec, [...objects.values()]);
  await record.remove(record.objects());
}
