// Per-engine policy routes: a packet whose mark field holds slot s -> `ip rule` priority 2048 `fwmark s<<19/0xfff80000
// lookup 2048000000+s` -> that table's default route is the engine (L2: `via <engine> dev <its segment>`, the frame goes
// to the engine's MAC with the destination IP unchanged; GRE: a tunnel device to the engine). Every object is written
// to the ownership record before it is created, and only recorded objects, or objects that carry all of wccpd's
// names (names.ts), are ever removed.
import type { EngineAddress } from '../buckets/table.js';
import { DataplaneError } from './errors.js';
import type { Exec } from './nft-exec.js';
import {
  RULE_PRIORITY, fieldOf, fwmarkSelector, greDevice, isOurGreDevice, isOurRouteTable, isOurRule, routeTable,
} from './names.js';
import type { OwnedObject, OwnershipRecord } from './ownership.js';
import type { ForwardingMethod } from './redirector.js';

interface RouteGet { dev?: string; gateway?: string; prefsrc?: string; type?: string }

/**
 * Where the engine is reached from, and our source address towards it, from `ip route get`. L2 forwarding rewrites
 * only the frame, so the engine must be on a directly attached segment; a GRE engine may be any number of hops away.
 */
export async function findEngineSegment(
  exec: Exec, engine: EngineAddress, forwarding: ForwardingMethod = 'l2',
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
    throw new DataplaneError('engine-not-attached',
      `engine ${engine} is reached via the router ${r.gateway}, not directly: L2 forwarding needs the engine on a ` +
      `segment attached to this gateway (${r.dev}); attach it or use forwarding: gre`);
  }
  return r.prefsrc !== undefined ? { dev: r.dev, src: r.prefsrc } : { dev: r.dev };
}

/** The kernel objects of one slot. */
export function slotObjects(slot: number, forwarding: ForwardingMethod): OwnedObject[] {
  return [
    { kind: 'rule', value: slot },
    { kind: 'route', table: routeTable(slot) },
    ...(forwarding === 'gre' ? [{ kind: 'link', name: greDevice(slot) } as const] : []),
  ];
}

const ruleArgs = (value: number): string[] =>
  ['priority', String(RULE_PRIORITY), 'fwmark', fwmarkSelector(value), 'lookup', String(routeTable(value))];

export interface SlotRoute {
  readonly slot: number;
  readonly engine: EngineAddress;
  readonly forwarding: ForwardingMethod;
}

/** Runs `ip -batch -`: one process for many commands. `force` goes on after a failed line (removals). */
async function ipBatch(exec: Exec, lines: readonly string[], force = false): Promise<void> {
  if (lines.length === 0) return;
  const run = exec('ip', [...(force ? ['-force'] : []), '-batch', '-'], `${lines.join('\n')}\n`);
  await (force ? run.catch(() => undefined) : run);
}

/** Looks up each engine's segment, a few `ip route get` at a time. */
async function segments(exec: Exec, routes: readonly SlotRoute[]): Promise<{ dev: string; src?: string }[]> {
  const out: { dev: string; src?: string }[] = [];
  for (let i = 0; i < routes.length; i += 8) {
    out.push(...await Promise.all(routes.slice(i, i + 8).map((r) => findEngineSegment(exec, r.engine, r.forwarding))));
  }
  return out;
}

/** Records, then installs (or replaces) the slots' rules, routing tables and tunnels: a few processes in all. */
export async function installSlotRoutes(exec: Exec, record: OwnershipRecord, routes: readonly SlotRoute[]): Promise<void> {
  if (routes.length === 0) return;
  const segs = await segments(exec, routes);
  await record.add(routes.flatMap((r) => slotObjects(r.slot, r.forwarding)));
  // A crashed run's leftovers of these exact objects (all recorded, all ours) go first.
  await ipBatch(exec, routes.flatMap((r) => [
    `rule del ${ruleArgs(r.slot).join(' ')}`, ...(r.forwarding === 'gre' ? [`link del ${greDevice(r.slot)}`] : []),
  ]), true);
  await ipBatch(exec, routes.flatMap((r, i) => {
    const seg = segs[i] ?? { dev: '' };
    const table = String(routeTable(r.slot));
    if (r.forwarding === 'l2') return [`route replace default via ${r.engine} dev ${seg.dev} table ${table}`];
    const dev = greDevice(r.slot);
    return [`link add ${dev} type gre remote ${r.engine}${seg.src !== undefined ? ` local ${seg.src}` : ''}`,
      `link set ${dev} up`, `route replace default dev ${dev} table ${table}`];
  }));
  await ipBatch(exec, routes.map((r) => `rule add ${ruleArgs(r.slot).join(' ')}`));
}

/** Installs one slot (see installSlotRoutes). */
export async function installSlotRoute(
  exec: Exec, record: OwnershipRecord, slot: number, engine: EngineAddress, forwarding: ForwardingMethod,
): Promise<void> {
  await installSlotRoutes(exec, record, [{ slot, engine, forwarding }]);
}

/** Removes the slots' rules, routes and tunnels (absent pieces are not an error), then forgets them. */
export async function removeSlotRoutes(exec: Exec, record: OwnershipRecord, slots: readonly number[]): Promise<void> {
  const objects = slots.flatMap((s) => slotObjects(s, 'gre')).filter((o) => o.kind !== 'link' || record.has(o));
  await removeObjects(exec, objects);
  await record.remove(objects);
}

/** Removes one slot (see removeSlotRoutes). */
export async function removeSlotRoute(exec: Exec, record: OwnershipRecord, slot: number): Promise<void> {
  await removeSlotRoutes(exec, record, [slot]);
}

async function removeObjects(exec: Exec, objects: readonly OwnedObject[]): Promise<void> {
  // Rules first: no packet is steered into a table while it is taken apart.
  await ipBatch(exec, [
    ...objects.flatMap((o) => (o.kind === 'rule' ? [`rule del ${ruleArgs(o.value).join(' ')}`] : [])),
    ...objects.flatMap((o) => (o.kind === 'route' ? [`route del default table ${o.table}`] : [])),
    ...objects.flatMap((o) => (o.kind === 'link' ? [`link del ${o.name}`] : [])),
  ], true);
}

interface RuleJson { priority?: number; fwmark?: string; fwmask?: string; table?: string | number }
interface LinkJson { ifname?: string; linkinfo?: { info_kind?: string } }

/**
 * Removes what a previous run left: every recorded object, every `ip rule` that carries all of wccpd's names (its
 * priority, a value/mask in its mark field, its table) and that rule's default route, and GRE devices named
 * `wccpd-gre<slot>`. Nothing else: the main table, other tools' rules and tables are never read for deletion.
 */
export async function removeAllRoutes(exec: Exec, record: OwnershipRecord): Promise<void> {
  const objects = new Map<string, OwnedObject>();
  const add = (o: OwnedObject): void => { objects.set(JSON.stringify(o), o); };
  for (const o of record.objects()) add(o);
  const rules = JSON.parse(await exec('ip', ['-j', '-4', 'rule', 'list'])) as RuleJson[];
  for (const r of rules) {
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
