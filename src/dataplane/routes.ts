// Per-engine policy routes: fwmark 0x100+slot -> `ip rule` priority 10000+slot -> table 100+slot whose default route
// is the engine (L2: `via <engine> dev <its segment>`, the frame goes to the engine's MAC with the destination IP
// unchanged; GRE: a tunnel device to the engine).
import type { EngineAddress } from '../buckets/table.js';
import { DataplaneError } from './errors.js';
import type { Exec } from './nft-exec.js';
import { engineMark, greDevice, isOurRouteTable, isOurRulePriority, routeTable, rulePriority } from './names.js';
import type { ForwardingMethod } from './redirector.js';

interface RouteGet { dev?: string; gateway?: string; prefsrc?: string; type?: string }

/** The interface the engine is directly attached to (and our source address on it), from `ip route get`. */
export async function findEngineSegment(exec: Exec, engine: EngineAddress): Promise<{ dev: string; src?: string }> {
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
  if (r.gateway !== undefined) {
    throw new DataplaneError('engine-not-attached',
      `engine ${engine} is reached via the router ${r.gateway}, not directly: L2 forwarding needs the engine on a ` +
      `segment attached to this gateway (${r.dev}); attach it or use forwarding: gre`);
  }
  return r.prefsrc !== undefined ? { dev: r.dev, src: r.prefsrc } : { dev: r.dev };
}

/** Installs (or replaces) the slot's rule and routing table. */
export async function installSlotRoute(
  exec: Exec, slot: number, engine: EngineAddress, forwarding: ForwardingMethod,
): Promise<void> {
  const seg = await findEngineSegment(exec, engine);
  const table = String(routeTable(slot));
  if (forwarding === 'l2') {
    await exec('ip', ['route', 'replace', 'default', 'via', engine, 'dev', seg.dev, 'table', table]);
  } else {
    const dev = greDevice(slot);
    await exec('ip', ['link', 'del', dev]).catch(() => undefined);
    await exec('ip', ['link', 'add', dev, 'type', 'gre', 'remote', engine, ...(seg.src ? ['local', seg.src] : [])]);
    await exec('ip', ['link', 'set', dev, 'up']);
    await exec('ip', ['route', 'replace', 'default', 'dev', dev, 'table', table]);
  }
  const prio = String(rulePriority(slot));
  await exec('ip', ['rule', 'del', 'priority', prio]).catch(() => undefined);
  await exec('ip', ['rule', 'add', 'priority', prio, 'fwmark', `0x${engineMark(slot).toString(16)}`,
    'lookup', table]);
}

/** Removes the slot's rule, table and tunnel; absent pieces are not an error. */
export async function removeSlotRoute(exec: Exec, slot: number): Promise<void> {
  await exec('ip', ['rule', 'del', 'priority', String(rulePriority(slot))]).catch(() => undefined);
  await exec('ip', ['route', 'flush', 'table', String(routeTable(slot))]).catch(() => undefined);
  await exec('ip', ['link', 'del', greDevice(slot)]).catch(() => undefined);
}

/** Removes every rule, routing table and tunnel in our ranges: a crashed run's leftovers, or all of ours on stop. */
export async function removeAllRoutes(exec: Exec): Promise<void> {
  const rules = JSON.parse(await exec('ip', ['-j', 'rule', 'list'])) as { priority?: number }[];
  for (const r of rules) {
    if (r.priority !== undefined && isOurRulePriority(r.priority)) {
      await exec('ip', ['rule', 'del', 'priority', String(r.priority)]).catch(() => undefined);
    }
  }
  const routes = JSON.parse(await exec('ip', ['-j', 'route', 'show', 'table', 'all'])) as { table?: string | number }[];
  const tables = new Set<number>();
  for (const r of routes) {
    const t = Number(r.table);
    if (Number.isInteger(t) && isOurRouteTable(t)) tables.add(t);
  }
  for (const t of tables) await exec('ip', ['route', 'flush', 'table', String(t)]).catch(() => undefined);
  const links = JSON.parse(await exec('ip', ['-j', 'link', 'show'])) as { ifname?: string }[];
  for (const l of links) {
    if (l.ifname !== undefined && /^wccpd-gre\d+$/.test(l.ifname)) {
      await exec('ip', ['link', 'del', l.ifname]).catch(() => undefined);
    }
  }
}
