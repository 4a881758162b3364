// The kernel names the data plane owns, fixed so the systemd cleanup script and admins can find and remove them, and
// chosen so they never meet the kernel's or an admin's own (docs/dataplane.md, docs/operations.md):
//
//   nft tables     `inet wccpd` (nft backend), `inet wccpd_userland` (userland guard), `inet wccpd_closed` (what
//                  keeps a fail-closed service closed while wccpd is down).
//                  `netdev wccpd_ingress` (the ingress backend: no mark, no ip rule, no conntrack).
//   mark field     bits 19-31 of the packet mark and of the conntrack mark (MARK_MASK 0xfff80000); every write is
//                  masked (`ct mark set ct mark & 0x7ffff | V`), so other tools' bits (QoS and multi-WAN in the low
//                  16 bits, kube-proxy 0x4000/0x8000, mwan3 0x3f00, ...) survive. Field value v in a conntrack
//                  mark: 0 = no service claimed the connection, 1..MAX_SLOT = claimed by the service of that engine
//                  slot and redirected to its engine, DIRECT_VALUE = claimed and forwarded normally, REFUSED_VALUE =
//                  claimed and refused (fail closed), USERLAND_VALUE = handled by the userland backend.
//   ip rules       ONE priority, RULE_PRIORITY 2048, for every slot: `fwmark v<<19/0xfff80000 lookup TABLE_BASE+v`.
//                  Below main (32766) so it is consulted at all, above the local table (0), and away from the round
//                  numbers admins and tools pick (100, 1000, 5210-5270 Tailscale, 10000, 32764-32765 wg-quick).
//                  A rule is ours only when all three match: that priority, a value/mask in our field, that table.
//                  While any slot exists, one pair around them: GUARD_PRIORITY 2047 `fwmark 0/0xfff80000 goto 2049`
//                  and LANDING_PRIORITY 2049 `fwmark 0/0xfff80000 nop` (its target), so a packet whose field is 0
//                  (every packet wccpd does not redirect) meets 2 rules instead of one per slot. Ours only with
//                  exactly that priority, mark 0, our mask and that action.
//   routing tables TABLE_BASE+v = 2048000001..2048008191: far above the kernel's 0/253/254/255 and any table number an
//                  admin types (the decimal starts with 2048, WCCP's port); below 2^31 for tools with signed ids.
//   GRE devices    `wccpd-gre<n>`, one per GRE engine whatever the number of its slots (the kernel refuses a second
//                  tunnel to the same endpoint), n from 1 up; `wccpd-gre0` for the moment the ip_gre probe needs
//                  (gre-probe.ts).
//
// Slots: one per (service, forwarding method, engine) in use, so a mark names the service that claimed the
// connection as well as its engine (overlapping services never count or steer each other's connections); at most 32
// engines per service group x 206 service ids (0 and 51-255) = 6,592, below MAX_SLOT (7,935). A released slot is
// reused (after every other free one), so join and leave churn never runs out of slots.

export const NFT_FAMILY = 'inet';
export const NFT_TABLE = 'wccpd';
/** The table that keeps fail-closed services closed while wccpd is down (removed by `wccpd-cleanup --all`). */
export const CLOSED_TABLE = 'wccpd_closed';
/** The ingress backend's table, in the netdev family (its base chains hook the client interfaces' ingress). */
export const INGRESS_FAMILY = 'netdev';
export const INGRESS_TABLE = 'wccpd_ingress';

export const MARK_SHIFT = 19;
/** The bits of the packet mark and the conntrack mark wccpd owns; the others are never changed. */
export const MARK_MASK = 0xfff80000;
/** The largest value of the field (13 bits). */
export const FIELD_MAX = 0x1fff;
/** Field values from here up are not engine slots. */
export const RESERVED_FIRST = 0x1f00;
/** A connection a service claimed whose bucket has no engine: forwarded normally, left alone by every service. */
export const DIRECT_VALUE = RESERVED_FIRST;
/** A connection a service claimed while it fails closed with no usable engine: refused, left alone by the others. */
export const REFUSED_VALUE = RESERVED_FIRST + 1;
/** The field value of connections the userland backend handles itself (and of the packets it re-sends). */
export const USERLAND_VALUE = 0x1fff;

export const MIN_SLOT = 1;
export const MAX_SLOT = RESERVED_FIRST - 1;

export const RULE_PRIORITY = 2048;
/** The guard before the slots' rules: a packet with an empty field jumps past them, to the landing rule. */
export const GUARD_PRIORITY = RULE_PRIORITY - 1;
export const LANDING_PRIORITY = RULE_PRIORITY + 1;
export const TABLE_BASE = 2_048_000_000;

/** The mark of a field value, in place (bits 19-31), as an unsigned 32-bit number. */
export const fieldMark = (value: number): number => (value * 2 ** MARK_SHIFT) >>> 0;
/** The field value a mark carries (0 when none of our bits are set). */
export const fieldOf = (mark: number): number => (mark >>> 0) >>> MARK_SHIFT;
export const engineMark = (slot: number): number => fieldMark(slot);
export const routeTable = (value: number): number => TABLE_BASE + value;
/** The GRE device of the n-th GRE engine (n >= 1); n = 0 is the ip_gre probe's. */
export const greDevice = (n: number): string => `wccpd-gre${n}`;

export const hex = (n: number): string => `0x${(n >>> 0).toString(16)}`;
/** `ip rule`'s fwmark selector of a field value: `0x80000/0xfff80000`. */
export const fwmarkSelector = (value: number): string => `${hex(fieldMark(value))}/${hex(MARK_MASK)}`;

/** Sets the field in a register and leaves every other bit: `ct mark set ct mark and 0x7ffff or 0x80000`. */
export const setField = (register: 'ct mark' | 'meta mark', value: number): string =>
  `${register} set ${register} and ${hex(~MARK_MASK)} or ${hex(fieldMark(value))}`;

export const isOurRouteTable = (t: number): boolean => t > TABLE_BASE && t <= TABLE_BASE + FIELD_MAX;

/** Is this `ip rule` one wccpd makes? Priority, fwmark value/mask and table must all be wccpd's. */
export function isOurRule(r: {
  priority?: number;
  fwmark?: string;
  fwmask?: string;
  table?: string | number;
}): boolean {
  if (r.priority !== RULE_PRIORITY || r.fwmark === undefined || r.fwmask === undefined) return false;
  const mark = Number(r.fwmark);
  const mask = Number(r.fwmask);
  if (!Number.isInteger(mark) || mask !== MARK_MASK || (mark & ~MARK_MASK) !== 0) return false;
  const value = fieldOf(mark);
  return value !== 0 && Number(r.table) === routeTable(value);
}

/** The guard pair's `ip rule` arguments (also their selectors for `rule del`). */
export const guardRuleArgs = (): string[] => [
  'priority',
  String(GUARD_PRIORITY),
  'fwmark',
  `0/${hex(MARK_MASK)}`,
  'goto',
  String(LANDING_PRIORITY),
];
export const landingRuleArgs = (): string[] => [
  'priority',
  String(LANDING_PRIORITY),
  'fwmark',
  `0/${hex(MARK_MASK)}`,
  'nop',
];

/** Is this `ip rule` (`ip -j rule list` form) one of the guard pair? Priority, mark 0, our mask and the action must
 * match. */
export function isOurGuardRule(r: {
  priority?: number;
  fwmark?: string;
  fwmask?: string;
  goto?: number | string;
  nop?: unknown;
  table?: unknown;
}): boolean {
  if (r.fwmark === undefined || Number(r.fwmark) !== 0 || Number(r.fwmask) !== MARK_MASK || r.table !== undefined)
    return false;
  if (r.priority === GUARD_PRIORITY) return Number(r.goto) === LANDING_PRIORITY;
  return r.priority === LANDING_PRIORITY && 'nop' in r && r.goto === undefined;
}

/** `wccpd-gre<n>`, and `wccpd-gre0`, the device the ip_gre probe creates and deletes at once (gre-probe.ts). */
const GRE_NAME = /^wccpd-gre(0|[1-9][0-9]{0,3})$/;
export const isOurGreDevice = (name: string): boolean => {
  const m = GRE_NAME.exec(name);
  return m !== null && Number(m[1]) <= MAX_SLOT;
};
