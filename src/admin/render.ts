// Human output of wccpctl: fits 100 columns; colour only when asked (the CLI asks only on a terminal).
import type {
  BucketsView,
  RestoredObjectsView,
  EngineView,
  EngineWarmupView,
  EnginesView,
  EventView,
  InForceView,
  LoadStatusView,
  MovedBucketView,
  PeerStatusView,
  PlanMoveView,
  PlanView,
  StatusView,
  WhichView,
} from './api-types.js';
import { formatDuration } from '../duration.js';
import { bucketRanges } from '../wire/wccp2/index.js';

const LETTERS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef';
/** 256-colour ANSI backgrounds, one per engine letter. */
const ANSI = [
  27, 208, 34, 160, 98, 94, 170, 244, 142, 37, 18, 58, 136, 88, 90, 33, 166, 28, 61, 241, 74, 215, 71, 140, 247, 117,
  222, 151, 146, 194, 189, 223,
];

const pad = (s: string, n: number) => (s.length >= n ? s : s + ' '.repeat(n - s.length));
const pct = (share: number) => `${(share * 100).toFixed(2)}%`;

function row(label: string, value: string | number | null): string {
  if (value === null) value = '- (not counted by this data plane)';
  return `        ${pad(label + ':', 37)}${value}`;
}

function detectionText(d: StatusView['services'][number]['detection']): string {
  const probes = (['http', 'tcp', 'icp', 'icmp'] as const)
    .filter((k) => d[k] !== null)
    .map((k) => `${k} ${formatDuration(d[k]!)}`);
  return (
    [`HERE_I_AM ${formatDuration(d.hereIAmMs)}`, ...probes].join(', ') +
    (probes.length === 0 ? ' (no active probes)' : '')
  );
}

/**
 * The table in force in the data plane against the one decided: the admin can tell "the kernel is behind" (an apply
 * running or retried after a failure) from a wrong table. `backend` is known in status, not in the buckets view.
 */
export function inForceText(decided: number, inForce: InForceView | null, backend?: string): string {
  if (inForce === null) {
    if (backend === 'none') return 'none (data plane none redirects nothing)';
    return backend === undefined
      ? 'none (the data plane has applied no table: not yet, or its backend redirects nothing)'
      : 'none yet (the data plane has applied no table)';
  }
  if (inForce.changeNumber === decided) return `${inForce.changeNumber} (applied ${inForce.at})`;
  return `behind (decided ${decided}, in force ${inForce.changeNumber})`;
}

/** A chance in words that fit a column: 12.3%, 0.045%, 1.4e-5, 9.4e-21; 0 only when it is exactly 0. */
export function chanceText(p: number): string {
  if (p === 0) return '0';
  if (p >= 0.001) return `${Number((p * 100).toPrecision(3))}%`;
  const [m = '0', e = '0'] = p.toExponential(1).split('e');
  return `${m}e${Number(e)}`;
}

/** Two rows per probe kind: how fast it notices (silence, hard evidence), how often loss alone would fool it. */
function probeRows(d: StatusView['services'][number]['detection']): string[] {
  return d.probes.flatMap((p) => [
    row(
      `Probe ${p.kind}, worst-case detection`,
      `${formatDuration(p.worstCaseMs)} silent (${formatDuration(p.intervalMs)} x ${p.fall} + ` +
        `${formatDuration(p.timeoutMs)}), ${formatDuration(p.hardWorstCaseMs)} refused`,
    ),
    // Per engine and hour, at each loss rate (docs/health.md has the model).
    row(
      `Probe ${p.kind}, false verdict chance`,
      p.falseVerdict.map((f) => `${chanceText(f.perHour)}/h at ${Number((f.loss * 100).toFixed(1))}% loss`).join(', '),
    ),
  ]);
}

/** Only once something was put back or could not be: the line says someone else removed wccpd's objects. */
function restoredRows(r: RestoredObjectsView | undefined): string[] {
  const moved = [
    ...((r?.enginesMoved ?? 0) > 0 ? [row('Engines moved to another interface', String(r?.enginesMoved))] : []),
    ...((r?.enginesWithoutIpv6?.length ?? 0) > 0
      ? [
          row(
            'Engines without an IPv6 neighbour',
            `${r?.enginesWithoutIpv6?.join(', ')} (their IPv6 is not redirected)`,
          ),
        ]
      : []),
  ];
  if (r === undefined || r.ipRules + r.ipRoutes + r.ipGuard + r.nftTables + r.failedChecks === 0) return moved;
  return [
    ...moved,
    row(
      'Put back after removal',
      `nft tables ${r.nftTables}, ip routes ${r.ipRoutes}, ip rules ${r.ipRules}, guard pair ${r.ipGuard}` +
        (r.failedChecks > 0 ? `; ${r.failedChecks} checks could not yet` : ''),
    ),
  ];
}

/** The warm-up broker's drops of hostile or broken input, in `wccpctl status` when any happened. */
const WARMUP_DROPS: readonly (readonly [string, string])[] = [
  ['icp-bad', 'bad ICP'],
  ['icp-source-port-0', 'from port 0'],
  ['icp-denied-unanswered', 'DENIED unsent'],
  ['icp-miss-over-budget', 'over budget'],
  ['icp-internal-error', 'ICP errors'],
  ['http-connections-refused', 'connections'],
  ['http-bad-body', 'GET with body'],
  ['http-source-bad-status', 'bad source status'],
  ['http-internal-error', 'HTTP errors'],
];

/** The config file, when it was read, and the last reload: what it applied, or every reason it was refused. */
function configRows(c: StatusView['config']): string[] {
  if (c === undefined) return [];
  const last = c.lastReload;
  // Keys and problems are wrapped below the row, whole: a problem names the key and the fix, which a cut would lose.
  const below = (items: readonly string[], first: string) =>
    items.flatMap((item, n) => wrap(`${n === 0 ? first : ''}${item}`, 88).map((l) => `          ${l}`));
  return [
    row('Config file', c.file),
    row('Config loaded at', c.loadedAt),
    ...(last === null
      ? [row('Last reload', 'none since the start')]
      : last.ok
        ? [
            row('Last reload', `ok at ${last.at}${last.changed.length === 0 ? ', nothing changed' : ''}`),
            ...below(
              [last.changed.join(', ')].filter((x) => x !== ''),
              'applied: ',
            ),
          ]
        : [
            row('Last reload', `FAILED at ${last.at}, nothing applied:`),
            ...last.errors.flatMap((e) => below([e], '')),
          ]),
    row('Reloads', `${c.reloads} (${c.reloadFailures} failed)`),
  ];
}

export function renderStatus(s: StatusView): string {
  const out = [
    'Global WCCP information:',
    '    Router information:',
    row('Router Identifier', s.routerId),
    row('wccpd version', `${s.build.version} (commit ${s.build.commit})`),
    row('Protocol Version', s.protocolVersion),
    ...configRows(s.config),
    row('Data plane', `${s.dataplane.backend}${s.dataplane.detail ? ` (${s.dataplane.detail})` : ''}`),
    ...(s.dataplane.fastPath !== undefined ? [row('Software fast path', s.dataplane.fastPath.detail)] : []),
    ...restoredRows(s.dataplane.restored),
    ...(s.dataplane.bridgeNetfilter?.active === true
      ? [
          row(
            'WARNING: br_netfilter',
            `frames bridged on ${s.dataplane.bridgeNetfilter.bridges.join(', ')} run the IP hooks; ` +
              'set net.bridge.bridge-nf-call-iptables=0 (docs/operations.md)',
          ),
        ]
      : []),
    row(
      'Event-stream clients',
      `${s.admin.eventClients} of ${s.admin.eventClientsMax}; ` +
        `${s.admin.eventClientsRefused} refused at the cap, ${s.admin.eventClientsDropped} dropped`,
    ),
    row('Requests refused for their Host', s.admin.hostRefused),
    row('Connections refused at the cap', s.admin.connectionsRefused),
    row('Requests refused as malformed (400, 408, 431)', s.admin.badRequests),
    row('Changes refused without the token (401)', s.admin.unauthorized),
    ...(s.admin.internalErrors > 0 ? [row('Requests that failed inside wccpd (500)', s.admin.internalErrors)] : []),
  ];
  for (const svc of s.services) {
    const c = svc.counters;
    out.push(
      `    Service Identifier: ${svc.name} (${svc.id})`,
      row('Service mode', `${svc.state === 'active' ? svc.mode : svc.state}, fail ${svc.failMode}`),
      row('Methods', `forward ${svc.forwarding}, return ${svc.return}, ${svc.assignment} assignment, ${svc.authority}`),
      row('Number of Service Group Clients', `${svc.engines} (${svc.usableEngines} usable)`),
      row('Number of Service Group Routers', svc.routers.length),
      row('Routers', svc.routers.join(', ') || '-'),
      row('Designated engine', svc.designatedEngine ?? '-'),
      row('Change number', `${svc.changeNumber} (member change number ${svc.memberChangeNumber})`),
      row('Change number in force', inForceText(svc.changeNumber, svc.inForce, s.dataplane.backend)),
      ...(svc.movedBuckets !== null
        ? [
            row(
              'Buckets in a move',
              `${svc.movedBuckets}${svc.movedBuckets > 0 ? ' (wccpctl buckets lists them)' : ''}`,
            ),
          ]
        : []),
      row('Worst-case detection', detectionText(svc.detection)),
      ...probeRows(svc.detection),
      row('Total Packets Redirected', c.packetsRedirected),
      row('Total Bytes Redirected', c.bytesRedirected),
      row('Total Packets Denied Redirect', c.packetsDenied),
      row('Total Packets Unassigned', c.packetsUnassigned),
      ...(c.packetsFlowsFull !== null ? [row('Packets past a full flow map', c.packetsFlowsFull)] : []),
      ...(c.ipv6 !== null
        ? [
            row(
              'Of which IPv6',
              `${c.ipv6.packetsRedirected} packets (${c.ipv6.bytesRedirected} bytes) redirected, ` +
                `${c.ipv6.packetsDenied} denied, ${c.ipv6.packetsUnassigned} unassigned`,
            ),
          ]
        : []),
      row('Total Messages Denied to Group', c.messagesDenied),
      row('Total Authentication failures', c.authFailures),
      row('HERE_I_AMs received', c.hereIAmReceived),
      row('I_SEE_YOUs sent', c.iSeeYouSent),
      row('Rebalances', c.rebalances),
      ...(svc.load !== undefined ? [row('Load-aware', loadText(svc.load, c.loadMoves))] : []),
      row('Table changes coalesced (settle)', c.tableChangesCoalesced),
    );
  }
  for (const peer of s.peers ?? []) out.push(...renderPeer(peer));
  if (s.warmup) {
    const w = (k: string) => s.warmup?.[k] ?? 0;
    out.push(
      '    Warm-up broker:',
      row(
        'ICP queries (HIT / MISS / DENIED)',
        `${w('icp-received')} (${w('icp-answered-hit')} / ${w('icp-answered-miss')} / ${w('icp-answered-denied')})`,
      ),
      row(
        'Queries asked of a source',
        `${w('icp-asked')} (failed ${w('icp-source-failed')}, timed out ${w('icp-source-timeout')})`,
      ),
      row('Relayed: objects / source 504s', `${w('http-relayed')} / ${w('http-source-504')}`),
      row('HTTP refused (403)', w('http-denied')),
      row('Bytes relayed', w('http-bytes')),
      row('Relay budgets: too large / rate waits', `${w('http-too-large')} / ${w('http-rate-waits')}`),
    );
    if (w('relay-process-exits') > 0 || w('http-relay-unavailable') > 0)
      out.push(
        row('Relay process: ended / 504s while down', `${w('relay-process-exits')} / ${w('http-relay-unavailable')}`),
      );
    const dropped = WARMUP_DROPS.filter(([k]) => w(k) > 0).map(([k, words]) => `${words} ${w(k)}`);
    if (dropped.length > 0) out.push(row('Dropped (docs/warmup.md)', dropped.join(', ')));
  }
  const errs = Object.entries(s.decodeErrors);
  if (errs.length > 0) out.push('    Decode errors: ' + errs.map(([k, v]) => `${k} ${v}`).join(', '));
  const drops = Object.entries(s.dropped);
  if (drops.length > 0) out.push('    Datagrams dropped (by reason):', ...drops.map(([k, v]) => row(k, v)));
  return out.join('\n');
}

function renderPeer(p: PeerStatusView): string[] {
  const out = [`    Peer router ${p.address} (${p.api}): ${p.agrees ? 'same tables' : 'tables DIFFER or unread'}`];
  for (const svc of p.services) {
    let text: string;
    if (svc.agrees === null) text = `unknown: ${svc.error ?? 'not read'}`;
    else if (svc.agrees)
      text = `agrees (change number ${svc.changeNumber ?? '-'} here, ${svc.peerChangeNumber ?? '-'} there)`;
    else {
      const more = (svc.differingBuckets ?? 0) > svc.differing.length ? ', ...' : '';
      const parts = [];
      if ((svc.differingBuckets ?? 0) > 0)
        parts.push(`${svc.differingBuckets} buckets (${svc.differing.join(', ')}${more})`);
      if ((svc.differingMaskValues ?? 0) > 0) parts.push(`${svc.differingMaskValues} mask values`);
      text = `DIFFERS in ${parts.join(' and ')}`;
    }
    out.push(row(`Service ${svc.id}`, text));
  }
  out.push(row('Checks (failed)', `${p.checks} (${p.failures})`));
  return out;
}

/** A time left as a countdown reads it: whole minutes from 2 min, else whole seconds (rounded up). */
const timeLeft = (ms: number) =>
  formatDuration(ms >= 120_000 ? Math.round(ms / 60_000) * 60_000 : Math.ceil(ms / 1000) * 1000);

/** How a warm-up reads in the flags: "warming: 12/40 peer hits (30%), 8m left" or "warmed (duration)". */
export function warmupText(w: EngineWarmupView): string {
  const ratio = w.ratio === null ? '' : ` (${Math.round(w.ratio * 100)}%)`;
  if (w.warming) return `warming: ${w.peerHits}/${w.queries} peer hits${ratio}, ${timeLeft(w.timeLeftMs)} left`;
  return `warmed: ${w.peerHits}/${w.queries} peer hits${ratio}, ended by ${w.endReason ?? '?'}`;
}

/** Short enough for the engines table (the API has the full times): `maint until 12-06 03:00:00Z` while a window
 * runs, else `next maint 12-06 02:00:00Z 1h`. */
export function maintenanceText(e: EngineView): string {
  const m = e.maintenance;
  const short = (iso: string) => `${iso.slice(5, 10)} ${iso.slice(11, 19)}Z`;
  if (!m) return '';
  if (m.activeUntil !== null) return `maint until ${short(m.activeUntil)}`;
  if (m.next === null) return '';
  return `next maint ${short(m.next)} ${formatDuration(m.nextDurationMs ?? 0)}`;
}

/**
 * Notes into lines of at most `width` characters, "; " between two on a line and a line's end between two on
 * different lines; a note is split (at words, else anywhere) only when it alone is too long.
 */
function pack(notes: string[], width: number): string[] {
  const lines: string[] = [];
  let cur = '';
  for (const note of notes) {
    if (cur !== '' && cur.length + 2 + note.length <= width) cur = `${cur}; ${note}`;
    else {
      if (cur !== '') lines.push(cur);
      const parts = wrap(note, width).flatMap((l) => l.match(new RegExp(`.{1,${width}}`, 'g')) ?? []);
      cur = parts.pop() ?? '';
      lines.push(...parts);
    }
  }
  if (cur !== '') lines.push(cur);
  return lines;
}

/** Words into lines of at most `width` characters (a longer word gets a line of its own). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let cur = '';
  for (const word of text.split(' ')) {
    if (cur !== '' && cur.length + 1 + word.length > width) {
      lines.push(cur);
      cur = word;
    } else cur = cur === '' ? word : `${cur} ${word}`;
  }
  if (cur !== '') lines.push(cur);
  return lines;
}

export function renderEngines(v: EnginesView): string {
  if (v.engines.length === 0) return `service ${v.service}: no engines`;
  const head =
    `${pad('engine', 16)}${pad('state', 10)}${pad('weight', 7)}${pad('buckets', 16)}${pad('last HIA', 10)}` +
    `${pad('packets', 11)}flags / reason`;
  const lines = v.engines.map((e) => {
    const last = e.lastHereIAmAgoMs === null ? '-' : formatDuration(Math.round(e.lastHereIAmAgoMs / 100) * 100);
    // The warm-up gets a line of its own (below): its figures would not fit after the other columns.
    const warm = e.warmup ? warmupText(e.warmup) : null;
    // So is a refusal, whole: it names the fix (the squid.conf lines or the wccpd keys), which a cut would lose.
    const refused = typeof e.flags.refused === 'string' && e.flags.refused !== '' ? e.flags.refused : null;
    const flags = e.flagsText.filter((f) => f !== warm).map((f) => (f.startsWith('refused: ') ? 'refused (below)' : f));
    const notes = [...flags, maintenanceText(e), e.reason].filter((x) => x);
    const columns =
      `${pad(e.address, 16)}${pad(e.state, 10)}${pad(String(e.weight), 7)}` +
      `${pad(`${e.buckets} (${pct(e.share)})`, 16)}${pad(last, 10)}${pad(String(e.packets), 11)}`;
    // Notes that do not fit go on under their own column, whole: a cut would lose a window's time or a reason's end.
    const [first = '', ...more] = pack(notes, 100 - columns.length);
    const rest = more.map((l) => `${' '.repeat(columns.length)}${l}`);
    const below = [warm, ...(refused === null ? [] : wrap(`refused: ${refused}`, 84))].filter((x) => x !== null);
    return [columns + first, ...rest, ...below.map((l) => `${' '.repeat(16)}${l}`)].join('\n');
  });
  return [`service ${v.service}`, head, ...lines].join('\n');
}

/**
 * Engines in letter order: the engines list order (by address), then any address only the table names, then any
 * only a move names (the engine a bucket went to before).
 */
function letterOrder(table: BucketsView, engines: readonly EngineView[]): string[] {
  const order = engines.map((e) => e.address);
  const before = (table.moved ?? []).map((m) => m.engineBefore);
  for (const ip of [...table.buckets, ...before]) if (ip !== null && !order.includes(ip)) order.push(ip);
  return order;
}

/** The 256 buckets as the WCCP Bucket Block bit vector of one engine (bucket n = byte n>>3, bit 1<<(n&7)), in hex. */
export function assignedHashHex(buckets: ReadonlyArray<string | null>, engine: string): string {
  const bytes = Buffer.alloc(32);
  buckets.forEach((ip, n) => {
    if (ip === engine) bytes[n >> 3]! |= 1 << (n & 7);
  });
  return bytes.toString('hex').toUpperCase();
}

/** Where a moved bucket went before, when no engine address says it. */
const BEFORE_TEXT: Readonly<Record<MovedBucketView['before'], string>> = {
  engine: 'an engine',
  unassigned: 'unassigned (forwarded normally)',
  refused: 'no engine (refused, fail closed)',
  gone: 'an engine that has left (reset)',
};
const hexBucket = (b: number) => b.toString(16).padStart(2, '0');

/**
 * The buckets in a move under the grid (marked `*` there), one group per claim before and end, bucket numbers in hex
 * as the grid's rows and columns, wrapped to fit 100 columns.
 */
function movedRows(moved: readonly MovedBucketView[], letter: (ip: string) => string): string[] {
  if (moved.length === 0) return [];
  const groups = new Map<string, number[]>();
  for (const m of moved) {
    const from = m.engineBefore !== null ? `${letter(m.engineBefore)} ${m.engineBefore}` : BEFORE_TEXT[m.before];
    const left = m.endsInMs > 0 ? `${timeLeft(m.endsInMs)} left` : 'ending';
    const head = `from ${from} until ${m.until} (${left}):`;
    groups.set(head, [...(groups.get(head) ?? []), m.bucket]);
  }
  const out = [
    `   *  ${moved.length} bucket${moved.length > 1 ? 's' : ''} in a move: connections older than the move still go ` +
      'where the bucket went',
    '      before, new ones to the engine shown, until the move ends (docs/operations.md)',
  ];
  for (const [head, buckets] of groups) {
    out.push(`      ${head}`);
    for (let i = 0; i < buckets.length; i += 24)
      out.push(
        `        ${buckets
          .slice(i, i + 24)
          .map(hexBucket)
          .join(' ')}`,
      );
  }
  return out;
}

export function renderBuckets(
  table: BucketsView,
  engines: readonly EngineView[],
  opts: { colour: boolean; hex: boolean },
): string {
  const order = letterOrder(table, engines);
  const letter = (ip: string | null) => (ip === null ? '.' : (LETTERS[order.indexOf(ip)] ?? '?'));
  const moved = new Set(table.moved?.map((m) => m.bucket));
  const paint = (ip: string | null, s: string) => {
    if (!opts.colour || ip === null) return s;
    return `\x1b[48;5;${ANSI[order.indexOf(ip) % ANSI.length]}m\x1b[97m${s}\x1b[0m`;
  };
  const out = [
    `service ${table.service}  change number ${table.changeNumber}`,
    `in force: ${inForceText(table.changeNumber, table.inForce)}`,
    '      ' + Array.from({ length: 16 }, (_, i) => i.toString(16).padStart(2, ' ')).join(' '),
  ];
  for (let r = 0; r < 16; r++) {
    const cells = [];
    for (let c = 0; c < 16; c++) {
      const ip = table.buckets[r * 16 + c] ?? null;
      cells.push(paint(ip, `${moved.has(r * 16 + c) ? '*' : ' '}${letter(ip)}`));
    }
    out.push(`  ${hexBucket(r * 16)}  ${cells.join(' ')}`);
  }
  out.push('');
  const unassigned = table.buckets.filter((b) => b === null).length;
  for (const ip of order) {
    const n = table.buckets.filter((b) => b === ip).length;
    const e = engines.find((x) => x.address === ip);
    out.push(
      `  ${paint(ip, ` ${letter(ip)} `)} ${pad(ip, 16)}${pad(`${n} buckets`, 13)}${pad(pct(n / 256), 9)}${e ? e.state : ''}`,
    );
    if (opts.hex) {
      const hex = assignedHashHex(table.buckets, ip);
      out.push(`      Assigned Hash Info: ${hex.slice(0, 32)}`, `                          ${hex.slice(32)}`);
    }
  }
  out.push(`   .  ${pad('unassigned', 16)}${pad(`${unassigned} buckets`, 13)}${pct(unassigned / 256)}`);
  out.push(...movedRows(table.moved ?? [], letter));
  return out.join('\n');
}

export function renderWhich(w: WhichView): string {
  const target = w.engine ?? 'origin (direct)';
  const why = {
    assigned: `bucket ${w.bucket} is assigned to ${w.engine}`,
    bypass: 'no usable engine: fail open, traffic goes direct',
    closed: 'no usable engine: fail closed, new connections are refused',
    unassigned: `bucket ${w.bucket} is unassigned: forwarded normally`,
    family: `this service does not redirect ${w.family === 'ipv6' ? 'IPv6' : 'IPv4'} (its families): forwarded normally`,
  }[w.why];
  return `service ${w.service}  ${w.address} -> bucket ${w.bucket} (0x${hexBucket(w.bucket)}) -> ${w.why === 'closed' ? 'refused' : target}\n  why: ${why}`;
}

export function renderEvent(e: EventView): string {
  const t = new Date(e.time).toISOString().replace('T', ' ').replace('Z', '');
  if (e.type === 'engine-state') {
    return `${t}  service ${String(e.service)}  engine ${String(e.engine)}: ${String(e.from)} -> ${String(e.to)}  (${String(e.reason)})`;
  }
  if (e.type === 'table') {
    return `${t}  service ${String(e.service)}  table ${String(e.changeNumber)}: ${String(e.moved)} buckets moved  (${String(e.reason)})`;
  }
  if (e.type === 'warmup') {
    const verb = e.to === 'warming' ? 'warming' : 'warm-up ended';
    return `${t}  service ${String(e.service)}  engine ${String(e.engine)}: ${verb} after ${String(e.peerHits)}/${String(e.queries)} peer hits  (${String(e.reason)})`;
  }
  const { time: _t, type, ...rest } = e;
  return `${t}  ${type}  ${JSON.stringify(rest)}`;
}

/** The moves of a plan grouped by engine pair, largest first: `from -> to  N  buckets`. */
function moveRows(moves: readonly PlanMoveView[], slot: string): string[] {
  const pairs = new Map<string, number[]>();
  for (const m of moves) {
    const key = `${m.from ?? 'unassigned'} -> ${m.to ?? 'unassigned'}`;
    pairs.set(key, [...(pairs.get(key) ?? []), m.bucket]);
  }
  return [...pairs]
    .sort((a, b) => b[1].length - a[1].length || (a[0] < b[0] ? -1 : 1))
    .flatMap(([pair, slots]) => {
      const prefix = `  ${pad(pair, 36)}${pad(String(slots.length), 5)}${slot} `;
      const list = wrap(bucketRanges(slots).replaceAll(',', ', '), 98 - prefix.length);
      return list.map((l, i) => (i === 0 ? prefix : ' '.repeat(prefix.length)) + l);
    });
}

/** A service's load-aware assignment in one line: each engine's load / share in the last window, moves and holds. */
function loadText(l: LoadStatusView, moves: number): string {
  const last =
    l.lastWindowEnd === null
      ? 'no window decided yet'
      : `window ending ${l.lastWindowEnd.slice(11, 19)}: ` +
        l.engines.map((e) => `${e.address} ${e.ratio.toFixed(2)}x`).join(', ');
  return `${last}; ${moves} bucket(s) moved by load, ${l.movesLastHour} in the last hour, ${l.held} held`;
}

/** `wccpctl plan`: per service, the moves by engine pair and each engine's share after. */
export function renderPlan(v: PlanView): string {
  const what =
    v.change === 'rebalance'
      ? 'rebalance'
      : `${v.change} ${v.engine}${v.weight !== null ? ` (weight ${v.weight})` : ''}`;
  return v.services
    .map((s) => {
      const head =
        `service ${s.service} (${s.mode}, ${s.authority}${s.assignment === 'mask' ? ', mask' : ''}), ` +
        `table ${s.changeNumber}: ${what} moves ${s.moves.length} of 256 buckets` +
        (s.mask !== null ? ` and ${s.mask.moves.length} mask values` : '');
      const mask = s.mask !== null;
      // A rebalance plan's load column: each engine's load / fair share now -> after.
      const load = s.load != null;
      const ratio = (r: number | undefined): string => (r === undefined ? '-' : `${r.toFixed(2)}x`);
      const engines = [
        `  ${pad('engine', 16)}${pad('state', 10)}${pad('weight', 8)}${pad('buckets now -> after', 22)}` +
          `${pad('share after', 12)}${mask ? 'mask values now -> after' : ''}${load ? 'load now -> after' : ''}`,
        ...s.engines.map(
          (e) =>
            `  ${pad(e.address, 16)}${pad(e.state, 10)}${pad(String(e.weight), 8)}` +
            `${pad(`${e.bucketsBefore} -> ${e.bucketsAfter}`, 22)}${pad(pct(e.shareAfter), 12)}` +
            (mask ? `${e.valuesBefore ?? 0} -> ${e.valuesAfter ?? 0}` : '') +
            (load ? `${ratio(e.loadBefore)} -> ${ratio(e.loadAfter)}` : ''),
        ),
      ];
      return [
        head,
        ...moveRows(s.moves, 'buckets'),
        ...(s.mask !== null ? moveRows(s.mask.moves, 'values') : []),
        ...engines,
        ...s.notes.flatMap((n) => wrap(`note: ${n}`, 96).map((l, i) => `  ${i === 0 ? '' : '  '}${l}`)),
      ].join('\n');
    })
    .join('\n\n');
}
