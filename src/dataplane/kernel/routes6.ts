// IPv6 for an engine that registered over IPv4 (docs/dataplane/nft.md, "IPv6"): L2 forwarding needs only the engine's
// MAC address, the same for both families, but an IPv6 route needs an IPv6 next hop (Linux refuses an IPv4 gateway on
// an IPv6 route: "IPv6 does not support RTA_VIA"). So the engine's IPv6 next hop is its IPv6 neighbour on its segment:
// an entry of the neighbour table with the MAC of its IPv4 entry (link-local first). A slot of a service that
// redirects IPv6 then gets the IPv6 twin of its IPv4 objects, with the same names (priority 2048, the slot's fwmark,
// table 2048000000+slot: IPv6 rules and tables are the kernel's separate IPv6 ones), made in one `ip -6` batch.
import type { EngineAddress } from '../../buckets/table.js';
import { DataplaneError } from '../errors.js';
import type { Exec } from './exec.js';
import { fieldOf, guardRuleArgs, isOurGuardRule, isOurRule, landingRuleArgs, routeTable } from './names.js';
import type { OwnedObject, OwnershipRecord } from './ownership.js';
import { execBatch, ruleArgs, type RuleJson, type RunBatch } from './routes.js';

interface NeighbourJson {
  dst?: string;
  dev?: string;
  lladdr?: string;
  state?: string[];
}

/** Where an engine's IPv6 frames go: its IPv6 neighbour on its segment, and every IPv6 address it has there. */
export interface Ipv6NextHop {
  readonly via: string;
  readonly dev: string;
  readonly mac: string;
  /** Every IPv6 neighbour address with the engine's MAC on its segment: what it sends from is never redirected. */
  readonly addresses: readonly string[];
}

const UNUSABLE = new Set(['FAILED', 'INCOMPLETE', 'NOARP']);

/**
 * Each engine's IPv6 next hop from ONE `neigh show` (both families) through `batch`, or null when the engine has no
 * IPv6 neighbour entry with its MAC on its segment (or no IPv4 entry to learn its MAC from). `engines`: engine ->
 * the device its IPv4 route names.
 */
export async function ipv6NextHops(
  batch: RunBatch,
  engines: ReadonlyMap<EngineAddress, string>,
): Promise<Map<EngineAddress, Ipv6NextHop | null>> {
  const out = new Map<EngineAddress, Ipv6NextHop | null>();
  if (engines.size === 0) return out;
  const { out: text, failed } = await batch(['neigh show']);
  if (failed.size > 0) throw new DataplaneError('command-failed', `ip neigh show failed: ${[...failed.values()][0]}`);
  const all = text
    .split('\n')
    .filter((l) => l.startsWith('['))
    .flatMap((l) => JSON.parse(l) as NeighbourJson[]);
  for (const [engine, dev] of engines) out.set(engine, nextHopOf(all, engine, dev));
  return out;
}

function nextHopOf(all: readonly NeighbourJson[], engine: EngineAddress, dev: string): Ipv6NextHop | null {
  const usable = (n: NeighbourJson): boolean =>
    n.dev === dev && n.lladdr !== undefined && !(n.state ?? []).some((s) => UNUSABLE.has(s));
  const mac = all.find((n) => n.dst === engine && usable(n))?.lladdr?.toLowerCase();
  if (mac === undefined) return null;
  const addresses = all
    .filter((n) => usable(n) && n.dst?.includes(':') === true && n.lladdr?.toLowerCase() === mac)
    .map((n) => n.dst!)
    .sort((a, b) => Number(!a.startsWith('fe80:')) - Number(!b.startsWith('fe80:')) || a.localeCompare(b));
  const via = addresses[0];
  return via === undefined ? null : { via, dev, mac, addresses };
}

/** One IPv6 slot route: the slot's table's default route via the engine's IPv6 neighbour. */
export interface SlotRoute6 {
  readonly slot: number;
  readonly via: string;
  readonly dev: string;
}

export interface RouteChange6 {
  /** Slots whose IPv6 rule and table are made (recorded first). */
  readonly create: readonly SlotRoute6[];
  /** Slots whose IPv6 rule is there: only the route is pointed anew. */
  readonly retarget: readonly SlotRoute6[];
  readonly remove: readonly number[];
  readonly addGuard: boolean;
  readonly removeGuard: boolean;
}

export const slotObjects6 = (slot: number): OwnedObject[] => [
  { kind: 'rule6', value: slot },
  { kind: 'route6', table: routeTable(slot) },
];

/**
 * Makes, repoints and removes the IPv6 twins of the slots' rules and routes in ONE `ip -6 -j -force -batch -`
 * process (recorded before, forgotten after). A removal of something absent is not an error; an identical rule left by
 * a crashed run is kept; anything else that fails throws.
 */
export async function changeRoutes6(exec: Exec, record: OwnershipRecord, c: RouteChange6): Promise<void> {
  await record.add([
    ...(c.addGuard ? [{ kind: 'guard6' } as const] : []),
    ...c.create.flatMap((r) => slotObjects6(r.slot)),
  ]);
  const lines: { text: string; del: boolean }[] = [];
  const del = (text: string): void => void lines.push({ text, del: true });
  const add = (text: string): void => void lines.push({ text, del: false });
  for (const s of c.remove) del(`rule del ${ruleArgs(s).join(' ')}`);
  for (const s of c.remove) del(`route del default table ${routeTable(s)}`);
  if (c.removeGuard) {
    del(`rule del ${guardRuleArgs().join(' ')}`);
    del(`rule del ${landingRuleArgs().join(' ')}`);
  }
  if (c.addGuard) {
    add(`rule add ${landingRuleArgs().join(' ')}`);
    add(`rule add ${guardRuleArgs().join(' ')}`);
  }
  for (const r of [...c.create, ...c.retarget])
    add(`route replace default via ${r.via} dev ${r.dev} table ${routeTable(r.slot)}`);
  for (const r of c.create) add(`rule add ${ruleArgs(r.slot).join(' ')}`);
  if (lines.length > 0) {
    const { failed } = await execBatch(exec, true)(lines.map((l) => l.text));
    for (const [n, why] of failed) {
      const l = lines[n - 1];
      if (l === undefined || l.del) continue;
      if (l.text.startsWith('rule add ') && /File exists/.test(why)) continue;
      throw new DataplaneError(
        'command-failed',
        `ip -6 -batch: \`${l.text}\` failed: ${why}`,
        'ip -6 -j -force -batch -',
        why,
      );
    }
  }
  await record.remove([...c.remove.flatMap(slotObjects6), ...(c.removeGuard ? [{ kind: 'guard6' } as const] : [])]);
}

/** What of the IPv6 twins is no longer as wccpd made them (missingIpv6Objects). */
export interface MissingIp6 {
  /** Slots whose IPv6 rule is gone (their route is made again too). */
  readonly rules: readonly number[];
  /** Slots whose IPv6 default route is gone or names another next hop. */
  readonly routes: readonly number[];
  readonly guard: boolean;
}

/**
 * Reads back the IPv6 twins (`ip -6 rule list` and each slot's IPv6 table) in ONE `ip -6` batch, as missingIpObjects
 * does for IPv4: a link that goes down takes its IPv6 routes along too, and tells no one.
 */
export async function missingIpv6Objects(
  exec: Exec,
  routed: ReadonlyMap<number, { readonly via: string; readonly dev: string }>,
  guarded: boolean,
): Promise<MissingIp6> {
  const slots = [...routed.keys()];
  const { out, failed } = await execBatch(
    exec,
    true,
  )(['rule list', ...slots.map((s) => `route show table ${routeTable(s)}`)]);
  if (failed.has(1)) throw new DataplaneError('command-failed', `ip -6 rule list failed: ${failed.get(1)}`);
  const answers = out.split('\n').filter((l) => l.startsWith('['));
  let next = 0;
  const answer = <T>(n: number): T[] => (failed.has(n) ? [] : (JSON.parse(answers[next++] ?? '[]') as T[]));
  const rules = answer<RuleJson>(1);
  const ruled = new Set(rules.filter(isOurRule).map((r) => fieldOf(Number(r.fwmark))));
  const routes: number[] = [];
  slots.forEach((slot, i) => {
    const d = answer<{ dst?: string; gateway?: string; dev?: string }>(i + 2).find((r) => r.dst === 'default');
    const want = routed.get(slot);
    if (d === undefined || d.gateway !== want?.via || d.dev !== want?.dev) routes.push(slot);
  });
  return {
    rules: slots.filter((s) => !ruled.has(s)),
    routes,
    guard: guarded && rules.filter(isOurGuardRule).length < 2,
  };
}
