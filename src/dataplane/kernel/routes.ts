// Per-engine policy routes: a packet whose mark field holds slot s -> `ip rule` priority 2048 `fwmark s<<19/0xfff80000
// lookup 2048000000+s` -> that table's default route is the engine (L2: `via <engine> dev <its segment>`, the frame
// goes
// to the engine's MAC with the destination IP unchanged; GRE: the engine's tunnel device, one per engine shared by all
// its slots, since the kernel refuses a second tunnel to the same endpoint). Every object is written
// to the ownership record before it is created, and only recorded objects, or objects that carry all of wccpd's
// names (names.ts), are ever removed.
import type { EngineAddress } from '../../buckets/table.js';
import { DataplaneError } from '../errors.js';
import type { Exec } from './exec.js';
import type { BatchResult } from './ip-session.js';
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
import type { ForwardingMethod } from '../redirector.js';

interface RouteGet {
  dst?: string;
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
  return segmentOf(engine, routes[0], forwarding);
}

/** Where an L2 engine is now: its device, or why it is not on-link (the error its join would get). */
export type EngineSegment = { readonly dev: string } | { readonly error: DataplaneError };

/** `route get` answers of an `ip -j -batch` output (one JSON line per answer), by destination. */
function routeAnswers(out: string): Map<string, RouteGet> {
  const answers = new Map<string, RouteGet>();
  for (const l of out.split('\n')) {
    if (!l.startsWith('[')) continue;
    for (const r of JSON.parse(l) as RouteGet[]) if (r.dst !== undefined) answers.set(r.dst, r);
  }
  return answers;
}

/** One answer checked as findEngineSegment checks it (L2), as a value. */
function l2Segment(engine: EngineAddress, r: RouteGet | undefined): EngineSegment {
  try {
    return { dev: segmentOf(engine, r, 'l2').dev };
  } catch (e) {
    if (e instanceof DataplaneError) return { error: e };
    throw e;
  }
}

/**
 * Each L2 engine's segment now, in ONE `ip -j -force -batch` of `route get` lines (an engine that moved to another
 * interface; docs/dataplane/nft.md, "An engine that moves"): one process whatever the number of engines.
 */
export async function engineSegments(
  batch: RunBatch,
  engines: readonly EngineAddress[],
): Promise<Map<EngineAddress, EngineSegment>> {
  const out = new Map<EngineAddress, EngineSegment>();
  if (engines.length === 0) return out;
  const answers = routeAnswers((await batch(engines.map((e) => `route get ${e}`))).out);
  for (const e of engines) out.set(e, l2Segment(e, answers.get(e)));
  return out;
}

/** Checks one `ip -j route get` answer (see findEngineSegment). */
function segmentOf(
  engine: EngineAddress,
  r: RouteGet | undefined,
  forwarding: ForwardingMethod,
): { dev: string; src?: string } {
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

export const ruleArgs = (value: number): string[] => [
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
async function ipBatch(exec: Exec, lines: readonly string[], force = false, ipv6 = false): Promise<void> {
  if (lines.length === 0) return;
  const run = exec(
    'ip',
    [...(ipv6 ? ['-6'] : []), ...(force ? ['-force'] : []), '-batch', '-'],
    `${lines.join('\n')}\n`,
  );
  await (force ? run.catch(() => undefined) : run);
}

/** What one change does to the slots' ip objects, in ONE `ip -batch` process (changeRoutes). */
export interface RouteChange {
  /** Slots whose rule and routing table are made (recorded first). */
  readonly create: readonly SlotRoute[];
  /** Slots whose rule is there already (a parked slot): only their route is pointed at this engine. */
  readonly retarget: readonly SlotRoute[];
  /** New GRE engines' tunnel devices, made before the routes that use them. */
  readonly tunnels: readonly GreTunnel[];
  /** Install the guard pair (the first slot). */
  readonly addGuard: boolean;
  /** Slots whose rule and route go, then these devices, then the guard pair when `removeGuard`. */
  readonly remove: readonly number[];
  readonly removeDevices: readonly string[];
  readonly removeGuard: boolean;
}

export const NO_ROUTE_CHANGE: RouteChange = {
  create: [],
  retarget: [],
  tunnels: [],
  addGuard: false,
  remove: [],
  removeDevices: [],
  removeGuard: false,
};

/** A batch line, and what its failure means. */
interface BatchLine {
  readonly text: string;
  /** get: an L2 engine's `route get` (its answer is checked); del: absent is fine; add: must work. */
  readonly kind: 'get' | 'del' | 'add';
  readonly engine?: EngineAddress;
}

/**
 * Makes, repoints and removes the slots' rules, routes and tunnel devices in ONE `ip -j -force -batch -` batch
 * (`batch`: the persistent ip of ip-session.ts, or one process through exec).
 * Each L2 engine's `route get` runs in the same batch and is checked after it (on-link, not one of our addresses:
 * findEngineSegment's rules); the kernel itself refuses a route via an engine that is not on-link. A new GRE tunnel's
 * local address needs its engine's route first: that lookup (rare: a new GRE engine) is its own process. A removal of
 * something absent is not an error; an existing identical rule (a crashed run's) is kept. The record lists new objects
 * before the batch and forgets removed ones after it. Throws when anything to be made was not; the caller removes
 * what this change made (removeSlotRoutes). Returns the device each L2 engine routed here is on.
 */
export async function changeRoutes(
  exec: Exec,
  record: OwnershipRecord,
  c: RouteChange,
  batch: RunBatch = execBatch(exec),
): Promise<Map<EngineAddress, string>> {
  const tunnelSrc = await Promise.all(c.tunnels.map(async (t) => (await findEngineSegment(exec, t.engine, 'gre')).src));
  await record.add([
    ...(c.addGuard ? [{ kind: 'guard' } as const] : []),
    ...c.tunnels.map((t): OwnedObject => ({ kind: 'link', name: t.device })),
    ...c.create.flatMap((r) => slotObjects(r.slot)),
  ]);
  const lines: BatchLine[] = [];
  const del = (text: string): void => void lines.push({ text, kind: 'del' });
  const add = (text: string): void => void lines.push({ text, kind: 'add' });
  const routed = [...c.create, ...c.retarget];
  for (const e of new Set(routed.filter((r) => r.forwarding === 'l2').map((r) => r.engine)))
    lines.push({ text: `route get ${e}`, kind: 'get', engine: e });
  // Removals first (parked slots that go: nothing steers to them); rules before routes, devices last.
  for (const s of c.remove) del(`rule del ${ruleArgs(s).join(' ')}`);
  for (const s of c.remove) del(`route del default table ${routeTable(s)}`);
  for (const d of c.removeDevices) del(`link del ${d}`);
  if (c.removeGuard) {
    del(`rule del ${guardRuleArgs().join(' ')}`);
    del(`rule del ${landingRuleArgs().join(' ')}`);
  }
  // A crashed run's device of the same name goes first (the kernel refuses a second tunnel to the same engine).
  for (const t of c.tunnels) del(`link del ${t.device}`);
  c.tunnels.forEach((t, i) => {
    const src = tunnelSrc[i];
    add(`link add ${t.device} type gre remote ${t.engine}${src !== undefined ? ` local ${src}` : ''}`);
    add(`link set ${t.device} up`);
  });
  // The landing rule goes first, so the guard never points at nothing (a goto without its target is skipped anyway).
  if (c.addGuard) {
    add(`rule add ${landingRuleArgs().join(' ')}`);
    add(`rule add ${guardRuleArgs().join(' ')}`);
  }
  for (const r of routed) {
    const table = String(routeTable(r.slot));
    if (r.forwarding === 'l2') add(`route replace default via ${r.engine} table ${table}`);
    else if (r.device !== undefined) add(`route replace default dev ${r.device} table ${table}`);
    else throw new DataplaneError('command-failed', `slot ${r.slot}: GRE route without a device`);
  }
  for (const r of c.create) add(`rule add ${ruleArgs(r.slot).join(' ')}`);
  const devices = new Map<EngineAddress, string>();
  if (lines.length > 0) {
    const { out, failed } = await batch(lines.map((l) => l.text));
    const answers = routeAnswers(out);
    for (const l of lines)
      if (l.kind === 'get' && l.engine !== undefined)
        devices.set(l.engine, segmentOf(l.engine, answers.get(l.engine), 'l2').dev);
    for (const [n, why] of failed) {
      const l = lines[n - 1];
      if (l === undefined || l.kind === 'del') continue;
      // Our own rule, identical, left by a crashed run: it is the one wanted.
      if (l.kind === 'add' && l.text.startsWith('rule add ') && /File exists/.test(why)) continue;
      throw new DataplaneError(
        'command-failed',
        `ip -batch: \`${l.text}\` failed: ${why}`,
        'ip -j -force -batch -',
        why,
      );
    }
  }
  await record.remove([
    ...c.remove.flatMap((s) => slotObjects(s)),
    ...c.removeDevices.map((name): OwnedObject => ({ kind: 'link', name })),
    ...(c.removeGuard ? [{ kind: 'guard' } as const] : []),
  ]);
  return devices;
}

/** Runs `ip -j -force -batch` lines: what they printed, and each failed line's error text by its 1-based index. */
export type RunBatch = (lines: readonly string[]) => Promise<BatchResult>;

/** One `ip -j -force -batch -` process per batch, through exec (`ip -6 ...` for IPv6 rules and routes). */
export function execBatch(exec: Exec, ipv6 = false): RunBatch {
  const args = [...(ipv6 ? ['-6'] : []), '-j', '-force', '-batch', '-'];
  return async (lines) => {
    try {
      return { out: await exec('ip', args, `${lines.join('\n')}\n`), failed: new Map() };
    } catch (e) {
      if (!(e instanceof DataplaneError) || e.stderr === undefined) throw e;
      const failed = failedLines(e.stderr);
      if (failed.size === 0) throw e;
      return { out: e.stdout ?? '', failed };
    }
  };
}

/** `ip -force -batch` stderr: each failed line's error text, by line number (the text before "Command failed -:N"). */
function failedLines(stderr: string): Map<number, string> {
  const failed = new Map<number, string>();
  let text: string[] = [];
  for (const l of stderr.split('\n')) {
    const m = /^Command failed -:(\d+)$/.exec(l.trim());
    if (m === null) {
      if (l.trim() !== '') text.push(l.trim());
      continue;
    }
    failed.set(Number(m[1]), text.join(' '));
    text = [];
  }
  return failed;
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
  // Rules first: no packet is steered into a table while it is taken apart. IPv6's in an `ip -6` batch of their own.
  await ipBatch(
    exec,
    [
      ...(objects.some((o) => o.kind === 'guard6')
        ? [`rule del ${guardRuleArgs().join(' ')}`, `rule del ${landingRuleArgs().join(' ')}`]
        : []),
      ...objects.flatMap((o) => (o.kind === 'rule6' ? [`rule del ${ruleArgs(o.value).join(' ')}`] : [])),
      ...objects.flatMap((o) => (o.kind === 'route6' ? [`route del default table ${o.table}`] : [])),
    ],
    true,
    true,
  );
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

/** An `ip -j rule list` entry. */
export interface RuleJson {
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
  const found = (rules: readonly RuleJson[], ipv6: boolean): void => {
    for (const r of rules) {
      if (isOurGuardRule(r)) add({ kind: ipv6 ? 'guard6' : 'guard' });
      if (!isOurRule(r)) continue;
      const value = fieldOf(Number(r.fwmark));
      add({ kind: ipv6 ? 'rule6' : 'rule', value });
      if (isOurRouteTable(routeTable(value))) add({ kind: ipv6 ? 'route6' : 'route', table: routeTable(value) });
    }
  };
  found(JSON.parse(await exec('ip', ['-j', '-4', 'rule', 'list'])) as RuleJson[], false);
  // A kernel without IPv6 (ipv6.disable=1) has no IPv6 rules to find.
  found(
    await exec('ip', ['-j', '-6', 'rule', 'list'])
      .then((out) => JSON.parse(out) as RuleJson[])
      .catch(() => []),
    true,
  );
  const links = JSON.parse(await exec('ip', ['-j', '-d', 'link', 'show'])) as LinkJson[];
  for (const l of links) {
    if (l.ifname !== undefined && isOurGreDevice(l.ifname) && l.linkinfo?.info_kind === 'gre') {
      add({ kind: 'link', name: l.ifname });
    }
  }
  await removeObjects(exec, [...objects.values()]);
  await record.remove(record.objects());
}

/** What of the slots' ip objects is no longer in the kernel as wccpd made it (missingIpObjects). */
export interface MissingIp {
  /** Slots whose ip rule is gone (their route is made again too). */
  readonly rules: readonly number[];
  /** Slots whose route is gone or names another next hop. */
  readonly routes: readonly number[];
  /** One or both rules of the guard pair are gone. */
  readonly guard: boolean;
  /** Each L2 engine asked about: the device the kernel reaches it through now, or why it is not on-link. */
  readonly segments: ReadonlyMap<EngineAddress, EngineSegment>;
  /** The device of each slot's route that is there (a route on another device than its engine's now: a move). */
  readonly routeDevices: ReadonlyMap<number, string>;
}

interface RouteJson {
  dst?: string;
  gateway?: string;
  dev?: string;
}

/**
 * Reads back the slots' rules and routes and the guard pair, in ONE batch: `rule list`, each slot's table, and the
 * `route get` of each L2 engine given. A link that goes down takes every route through it along, and the kernel tells
 * no one (no route deletion message); an admin's `ip rule flush` takes the rules; an `ip route` change moves an engine
 * to another interface while its slots' routes stay on the old one (a route names its device when it is made). Only
 * our own objects are compared; nothing else is read for change.
 */
export async function missingIpObjects(
  batch: RunBatch,
  slots: readonly SlotRoute[],
  guarded: boolean,
  engines: readonly EngineAddress[] = [],
): Promise<MissingIp> {
  const tables = slots.map((s) => `route show table ${routeTable(s.slot)}`);
  const lines = ['rule list', ...tables, ...engines.map((e) => `route get ${e}`)];
  const { out, failed } = await batch(lines);
  if (failed.has(1)) throw new DataplaneError('command-failed', `ip rule list failed: ${failed.get(1)}`);
  // One JSON line per line that did not fail, in order; a table with no route left may answer with an error.
  const answers = out.split('\n').filter((l) => l.startsWith('['));
  let next = 0;
  const answer = <T>(n: number): T[] => (failed.has(n) ? [] : (JSON.parse(answers[next++] ?? '[]') as T[]));
  const rules = answer<RuleJson>(1);
  const ruled = new Set(rules.filter(isOurRule).map((r) => fieldOf(Number(r.fwmark))));
  const guards = rules.filter(isOurGuardRule).length;
  const defaults = slots.map((_, i) => answer<RouteJson>(i + 2).find((r) => r.dst === 'default'));
  const segments = new Map<EngineAddress, EngineSegment>();
  const got = new Map<string, RouteGet>();
  engines.forEach((_, i) => {
    for (const r of answer<RouteGet>(tables.length + i + 2)) if (r.dst !== undefined) got.set(r.dst, r);
  });
  for (const e of engines) segments.set(e, l2Segment(e, got.get(e)));
  const routes: number[] = [];
  const routeDevices = new Map<number, string>();
  slots.forEach((s, i) => {
    const d = defaults[i];
    if (d?.dev !== undefined) routeDevices.set(s.slot, d.dev);
    const now = segments.get(s.engine);
    const right =
      d !== undefined &&
      (s.forwarding === 'l2'
        ? d.gateway === s.engine && (now === undefined || !('dev' in now) || d.dev === now.dev)
        : s.device !== undefined && d.dev === s.device);
    // A route via an engine that is not on-link now cannot be made again: not counted as missing (the caller says why).
    if (!right && !(s.forwarding === 'l2' && now !== undefined && 'error' in now)) routes.push(s.slot);
  });
  return {
    rules: slots.map((s) => s.slot).filter((s) => !ruled.has(s)),
    routes,
    guard: guarded && guards < 2,
    segments,
    routeDevices,
  };
}

/**
 * The error for engines a check found no longer on-link: each one's own (the error its join would get), and the
 * device it was on.
 */
export function offLinkError(
  offLink: ReadonlyMap<EngineAddress, DataplaneError>,
  devices: ReadonlyMap<EngineAddress, string>,
): DataplaneError {
  const why = [...offLink].map(([engine, e]) => {
    const was = devices.get(engine);
    return `${e.message}${was !== undefined ? ` (it was on ${was})` : ''}`;
  });
  return new DataplaneError(
    'engine-not-attached',
    `no longer on-link, its redirected traffic is not delivered until it is again: ${why.join('; ')}`,
  );
}
