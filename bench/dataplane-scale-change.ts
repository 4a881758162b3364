// The cost of a change and of scale for the nft backend, without traffic: in one network namespace of its own, 8
// services share 32 engines; the bench counts the rules, set elements and kernel memory that holds, then times 200
// membership changes from the call to apply() to the moment nft and ip have returned (the kernel has the new rules):
// an engine leaving or rejoining one group (a rejoin finds its parked slot), leaving or rejoining all of them (one
// apply per service in turn against one applyAll of them all, interleaved), and an engine's first join (a new
// address each time, so no parked slot: its rule and route are made, the record written).
// Then a counter read (what the page, the API and a scrape do), side by side: a new nft process per listing against
// the persistent reader. Then the one-group and all-groups changes again through the ingress backend (one nft
// transaction each, no ip objects), the all-groups one also with the tables wccpd's balance assignment makes (only
// the engine's buckets move). Kernel memory is what nf_tables and the routing code charge to a memory cgroup (v1
// `memory.kmem.usage_in_bytes`) that only the bench's `nft` and `ip` processes run in.
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NftRedirector } from '../src/dataplane/nft/nft.js';
import { IngressRedirector } from '../src/dataplane/ingress/ingress.js';
import type { Exec } from '../src/dataplane/kernel/exec.js';
import { createNftReader, createNftSession } from '../src/dataplane/kernel/nft-session.js';
import { createExec } from '../src/dataplane/kernel/exec.js';
import { NFT_FAMILY, NFT_TABLE } from '../src/dataplane/kernel/names.js';
import { bucketCounterSet } from '../src/dataplane/kernel/rules.js';
import { createIpSession } from '../src/dataplane/kernel/ip-session.js';
import { DataplaneError } from '../src/dataplane/errors.js';
import type { ServiceRedirect } from '../src/dataplane/redirector.js';
import { assignBuckets } from '../src/buckets/assign.js';
import { emptyTable } from '../src/buckets/table.js';
import { quantile } from './dataplane-measure.js';

const KMEM_ROOT = '/sys/fs/cgroup/memory';
/** Counter reads timed each way. */
const READS = 40;

export interface ChangeRow {
  readonly label: string;
  readonly count: number;
  /** CPU time per change, mean: the nft and ip processes plus this process (independent of other load). */
  readonly cpuMs: number;
  readonly medianMs: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** The two ways of reading counters, compared side by side. */
  readonly read?: 'processes' | 'reader' | 'status';
  /** The two ways an engine leaving every group reaches the kernel: one apply per service, or one applyAll. */
  readonly batch?: 'turns' | 'once';
}

export interface ChangeResult {
  readonly engines: number;
  readonly services: number;
  readonly rows: readonly ChangeRow[];
  readonly rules: number;
  readonly chains: number;
  readonly setElements: number;
  readonly ipRules: number;
  readonly rulesetBytes: number;
  /** Kernel memory charged by the static part (start) and by the services on top; null without the v1 kmem cgroup. */
  readonly kmemBaseBytes: number | null;
  readonly kmemServicesBytes: number | null;
  readonly kmemNote: string;
}

function sh(cmd: string, args: readonly string[], input?: string, timeoutMs = 20_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const t = setTimeout(() => c.kill('SIGKILL'), timeoutMs);
    c.stdout.on('data', (b: Buffer) => out.push(b));
    c.stderr.on('data', (b: Buffer) => err.push(b));
    c.on('error', reject);
    c.on('close', (code) => {
      clearTimeout(t);
      if (code === 0) resolve(Buffer.concat(out).toString('utf8'));
      else reject(new Error(`${cmd} ${args.join(' ')}: exit ${code}: ${Buffer.concat(err).toString('utf8').trim()}`));
    });
    c.stdin.on('error', () => {
      /* the close handler reports the failure */
    });
    c.stdin.end(input ?? '');
  });
}

/**
 * Runs nft/ip in the namespace (`ns` null: this process's own, as the daemon runs in the gateway's), inside the
 * cgroup while one is given (so their kernel allocations are charged there).
 */
function cgroupExec(ns: string | null, cgroup: string | null): Exec {
  return async (cmd, args, input) => {
    const argv = ns === null ? [cmd, ...args] : ['ip', 'netns', 'exec', ns, cmd, ...args];
    try {
      if (cgroup === null) return await sh(argv[0] as string, argv.slice(1), input);
      return await sh('sh', ['-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup, ...argv], input);
    } catch (e) {
      throw new DataplaneError('command-failed', (e as Error).message, `${cmd} ${args.join(' ')}`);
    }
  };
}

const kmem = (cg: string | null): number | null =>
  cg === null ? null : Number(readFileSync(`${cg}/memory.kmem.usage_in_bytes`, 'utf8').trim());

function service(id: number, engines: readonly string[]): ServiceRedirect {
  return {
    serviceId: id,
    protocol: 6,
    ports: [8000 + id],
    portsAreSource: false,
    serviceFlags: 0x2,
    priority: 0,
    forwarding: 'l2',
    failMode: 'open',
    clientInterfaces: ['c0'],
    engines: [...engines],
    table: { changeNumber: 1, buckets: Array.from({ length: 256 }, (_, b) => engines[b % engines.length] ?? null) },
  };
}

interface RulesetCounts {
  rules: number;
  chains: number;
  setElements: number;
  bytes: number;
}

function countRuleset(text: string): RulesetCounts {
  let rules = 0;
  let chains = 0;
  let setElements = 0;
  let inElements = false;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('chain ')) {
      chains++;
      continue;
    }
    if (line.startsWith('elements = {')) inElements = true;
    if (inElements) {
      setElements += (line.match(/,/g)?.length ?? 0) + (line.endsWith('}') ? 1 : 0);
      if (line.endsWith('}')) inElements = false;
      continue;
    }
    if (
      line === '' ||
      line === '}' ||
      /^(table|set|map|type|typeof|flags|counter|packets|policy|hook|counter [a-z_0-9]+ \{|size)\b/.test(line)
    )
      continue;
    if (/^(type filter|packets \d)/.test(line)) continue;
    rules++;
  }
  return { rules, chains, setElements, bytes: text.length };
}

/**
 * Creates a namespace, runs this module in it (`--child`), and returns what it printed. Each change: one engine leaves
 * (or comes back to) one service group, or all of them.
 */
export async function measureChanges(opts: {
  engines: number;
  services: number;
  changes: number;
  tag: string;
}): Promise<ChangeResult> {
  const ns = `wl-${process.pid}-${opts.tag}-gw`;
  await sh('ip', ['netns', 'add', ns]);
  // If the bench exits before the finally below (its output closed, an uncaught error): what runs in the namespace,
  // then the namespace.
  const onExit = (): void => {
    const pids = spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8', timeout: 2000 }).stdout ?? '';
    for (const pid of pids.split(/\s+/).filter(Boolean)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    spawnSync('ip', ['netns', 'del', ns], { timeout: 2000 });
  };
  process.on('exit', onExit);
  try {
    await sh(
      'ip',
      ['-n', ns, '-batch', '-'],
      [
        // veth pairs (this kernel has no dummy driver): c0 is the client interface, eng0 the engines' segment.
        'link set lo up',
        'link add c0 type veth peer name c0p',
        'link set c0 up',
        'link set c0p up',
        'link add eng0 type veth peer name eng0p',
        'addr add 192.0.2.1/24 dev eng0',
        // Room for the first joins' new addresses.
        'addr add 198.51.100.1/24 dev eng0',
        'link set eng0 up',
        'link set eng0p up',
        '',
      ].join('\n'),
    );
    const size = await measureSize(ns, opts);
    // The timed changes run in a process inside the namespace, so no `ip netns exec` is timed.
    const out = await sh(
      'ip',
      [
        'netns',
        'exec',
        ns,
        process.execPath,
        '--import',
        'tsx',
        fileURLToPath(import.meta.url),
        '--child',
        JSON.stringify(opts),
      ],
      undefined,
      600_000,
    );
    return { ...size, rows: JSON.parse(out.trim().split('\n').pop() ?? '') as ChangeRow[] };
  } finally {
    process.off('exit', onExit);
    await sh('ip', ['netns', 'del', ns]).catch(() => undefined);
  }
}

const engineList = (n: number): string[] => Array.from({ length: n }, (_, i) => `192.0.2.${11 + i}`);
const serviceIds = (n: number): number[] => Array.from({ length: n }, (_, i) => 51 + i);

/** Rules, elements and kernel memory of the services with every engine, built from an empty namespace. */
async function measureSize(
  ns: string,
  opts: { engines: number; services: number },
): Promise<Omit<ChangeResult, 'rows'>> {
  let cg: string | null = `${KMEM_ROOT}/wccpd-bench-${process.pid}`;
  let kmemNote = "memory cgroup v1 kmem of the bench's nft and ip processes";
  if (!existsSync(`${KMEM_ROOT}/memory.kmem.usage_in_bytes`)) {
    cg = null;
    kmemNote = 'no memory cgroup v1 kmem accounting on this machine: not measured';
  }
  try {
    if (cg !== null) mkdirSync(cg, { recursive: true });
    const engines = engineList(opts.engines);
    const r = new NftRedirector({ exec: cgroupExec(ns, cg), probeGre: () => Promise.resolve(false) });
    const k0 = kmem(cg);
    await r.start();
    const k1 = kmem(cg);
    for (const id of serviceIds(opts.services)) await r.apply(service(id, engines));
    const k2 = kmem(cg);
    const counts = countRuleset(await sh('ip', ['netns', 'exec', ns, 'nft', 'list', 'table', 'inet', 'wccpd']));
    const ipRules = (await sh('ip', ['-n', ns, 'rule', 'list']))
      .split('\n')
      .filter((l) => l.startsWith('2048:')).length;
    await r.stop();
    return {
      engines: opts.engines,
      services: opts.services,
      rules: counts.rules,
      chains: counts.chains,
      setElements: counts.setElements,
      rulesetBytes: counts.bytes,
      ipRules,
      kmemBaseBytes: k0 !== null && k1 !== null ? k1 - k0 : null,
      kmemServicesBytes: k1 !== null && k2 !== null ? k2 - k1 : null,
      kmemNote,
    };
  } finally {
    // The cgroup can go once its processes have exited (they all have: every exec was awaited).
    if (cg !== null)
      try {
        rmdirSync(cg);
      } catch {
        /* a late child still in it: the kernel frees it */
      }
  }
}

/**
 * CPU time (ms) of this process and of its waited-for children: /proc/self/stat utime..cstime; plus the persistent
 * nft's and ip's (not waited for: their own utime and stime).
 */
function cpuOf(pids: readonly (number | undefined)[]): number {
  const ticks = (file: string, fields: number[]): number => {
    let f: string[] = [];
    try {
      f = readFileSync(file, 'utf8').split(') ')[1]?.split(' ') ?? [];
    } catch {
      /* it has exited: counted in cutime */
    }
    return fields.reduce((t, i) => t + Number(f[i] ?? 0), 0);
  };
  // Fields 14-17 of stat (utime, stime, cutime, cstime) are 11-14 after the command name, in clock ticks (100/s).
  const kept = pids.reduce<number>((t, pid) => t + (pid !== undefined ? ticks(`/proc/${pid}/stat`, [11, 12]) : 0), 0);
  return (ticks('/proc/self/stat', [11, 12, 13, 14]) + kept) * 10;
}

/** The timed changes, in this process's namespace: returns one row per kind of change. */
async function child(opts: { engines: number; services: number; changes: number }): Promise<ChangeRow[]> {
  const engines = engineList(opts.engines);
  const ids = serviceIds(opts.services);
  // As the daemon runs it: the default ip runner and one persistent nft (its pid read for its CPU time).
  // The ownership record on disk, fsync'ed, as the daemon keeps it in its state directory.
  const stateDir = mkdtempSync(join(tmpdir(), 'wccpd-bench-state-'));
  const session = createNftSession();
  const ipSession = createIpSession();
  const r = new NftRedirector({ session, ipSession, stateDir, probeGre: () => Promise.resolve(false) });
  await r.start();
  for (const id of ids) await r.apply(service(id, engines));
  const cpuMs = (): number => cpuOf([session.pid(), ipSession.pid()]);
  // One group's change: engine k leaves service s (its buckets spread over the others) and, the next time, comes
  // back; slots are per service, so that service's slot, ip rule and route for it go, and come back.
  const out = new Set<string>();
  const one: number[] = [];
  const cpu0 = cpuMs();
  for (let i = 0; i < opts.changes; i++) {
    const id = ids[i % ids.length] as number;
    const engine = engines[Math.floor(i / 2) % engines.length] as string;
    const key = `${id} ${engine}`;
    if (out.has(key)) out.delete(key);
    else out.add(key);
    const members = engines.filter((e) => !out.has(`${id} ${e}`));
    const t = performance.now();
    await r.apply(service(id, members));
    one.push(performance.now() - t);
  }
  // An engine leaves every group (or comes back to every group), two ways side by side: one apply per service in
  // turn (what the daemon did before) and one applyAll of all of them (one nft transaction and one ip batch: what it
  // does now); each releases (or takes) the engine's slot, ip rule and routing table of every service. The way
  // alternates every leave-and-rejoin pair, so both see the same machine and as many leaves as rejoins.
  const cpu1 = cpuMs();
  const all = { turns: [] as number[], once: [] as number[] };
  const allCpu = { turns: 0, once: 0 };
  for (let i = 0; i < opts.changes / 2; i++) {
    const engine = engines[Math.floor(i / 2) % engines.length] as string;
    const members = i % 2 === 0 ? engines.filter((e) => e !== engine) : engines;
    const way = Math.floor(i / 2) % 2 === 0 ? 'turns' : 'once';
    const c0 = cpuMs();
    const t = performance.now();
    if (way === 'once') await r.applyAll(ids.map((id) => service(id, members)));
    else for (const id of ids) await r.apply(service(id, members));
    all[way].push(performance.now() - t);
    allCpu[way] += cpuMs() - c0;
  }
  // An engine's first join: a new address each time (no parked slot), into one group; it leaves again (not timed)
  // so the groups stay at 32 engines. Parked slots pile up to their bound, and the oldest then go in the join's
  // own ip batch, which this row includes.
  const fresh = [
    ...Array.from({ length: 212 }, (_, i) => `192.0.2.${43 + i}`),
    ...Array.from({ length: 253 }, (_, i) => `198.51.100.${2 + i}`),
  ];
  const first: number[] = [];
  let cpuFirst = 0;
  for (let i = 0; i < Math.min(opts.changes, fresh.length); i++) {
    const id = ids[i % ids.length] as number;
    const engine = fresh[i] as string;
    const c0 = cpuMs();
    const t = performance.now();
    await r.apply(service(id, [...engines, engine]));
    first.push(performance.now() - t);
    cpuFirst += cpuMs() - c0;
    await r.apply(service(id, engines));
  }
  // A counter read: the named counters and each service's bucket set (counters() in nft.ts), through a new
  // `nft -j` process per listing (before) and through the persistent `nft -j -i` (now), interleaved.
  const listings = [
    ['list', 'counters', 'table', NFT_FAMILY, NFT_TABLE],
    ...ids.map((id) => ['list', 'set', NFT_FAMILY, NFT_TABLE, bucketCounterSet(id)]),
  ];
  const reader = createNftReader();
  const processes = createExec();
  const reads = { processes: [] as number[], reader: [] as number[], status: [] as number[] };
  const readCpu = { processes: 0, reader: 0, status: 0 };
  for (let i = 0; i < READS; i++) {
    const ways = ['processes', 'reader', 'status'] as const;
    for (const way of i % 2 === 0 ? ways : [...ways].reverse()) {
      const c0 = cpuOf([reader.pid()]);
      const t = performance.now();
      // The status, the engines view, the page and a scrape read the named counters alone (CounterScope).
      for (const l of way === 'status' ? listings.slice(0, 1) : listings) {
        const json = way === 'processes' ? await processes('nft', ['-j', ...l]) : await reader.list(l);
        if (!json.includes('"nftables"')) throw new DataplaneError('command-failed', `no listing: ${json}`);
      }
      reads[way].push(performance.now() - t);
      readCpu[way] += cpuOf([reader.pid()]) - c0;
    }
  }
  await reader.stop();
  await r.stop();
  rmSync(stateDir, { recursive: true, force: true });
  // The same kinds of change through the ingress backend (no ip objects: one nft transaction each), in turn after
  // the nft backend's, on the same 8 services of 32 engines.
  const ingSession = createNftSession();
  const ing = new IngressRedirector({ session: ingSession });
  await ing.start();
  for (const id of ids) await ing.apply(service(id, engines));
  const ingCpu = (): number => cpuOf([ingSession.pid()]);
  const ingOut = new Set<string>();
  const ingOne: number[] = [];
  const ingOneCpu0 = ingCpu();
  for (let i = 0; i < opts.changes; i++) {
    const id = ids[i % ids.length] as number;
    const engine = engines[Math.floor(i / 2) % engines.length] as string;
    const key = `${id} ${engine}`;
    if (ingOut.has(key)) ingOut.delete(key);
    else ingOut.add(key);
    const t = performance.now();
    await ing.apply(
      service(
        id,
        engines.filter((e) => !ingOut.has(`${id} ${e}`)),
      ),
    );
    ingOne.push(performance.now() - t);
  }
  const ingOneCpu = ingCpu() - ingOneCpu0;
  // An engine leaving (even i) or coming back to (odd i) every group, one applyAll each: the times, and nft's CPU.
  const timeAllGroups = async (
    r: IngressRedirector,
    of: (id: number, members: readonly string[]) => ServiceRedirect,
  ): Promise<{ times: number[]; cpu: number }> => {
    const times: number[] = [];
    const cpu0 = ingCpu();
    for (let i = 0; i < opts.changes / 2; i++) {
      const engine = engines[Math.floor(i / 2) % engines.length] as string;
      const members = i % 2 === 0 ? engines.filter((e) => e !== engine) : engines;
      const t = performance.now();
      await r.applyAll(ids.map((id) => of(id, members)));
      times.push(performance.now() - t);
    }
    return { times, cpu: ingCpu() - cpu0 };
  };
  const ingAll = await timeAllGroups(ing, service);
  await ing.stop();
  // The same all-groups change with the tables wccpd's own assignment makes (balance, its default): an engine that
  // leaves gives up only its 8 buckets of each group, one that comes back takes 8 back. The tables above, every
  // bucket to engine b % n, move nearly every bucket at each change, as an engine-made round-robin table does.
  const tables = new Map(ids.map((id) => [id, emptyTable()]));
  const balanced = (id: number, members: readonly string[]): ServiceRedirect => {
    const table = assignBuckets(
      tables.get(id) ?? emptyTable(),
      members.map((address) => ({ address, weight: 1, priority: 0 })),
      { mode: 'balance' },
    );
    tables.set(id, table);
    return { ...service(id, members), table };
  };
  const bal = new IngressRedirector({ session: ingSession });
  await bal.start();
  await bal.applyAll(ids.map((id) => balanced(id, engines)));
  const balAll = await timeAllGroups(bal, balanced);
  await bal.stop();
  const row = (
    label: string,
    times: number[],
    cpu: number,
    kind?: ChangeRow['read'] | ChangeRow['batch'],
  ): ChangeRow => {
    const count = times.length;
    times.sort((a, b) => a - b);
    return {
      ...(kind === 'turns' || kind === 'once' ? { batch: kind } : kind !== undefined ? { read: kind } : {}),
      label,
      count,
      cpuMs: count > 0 ? cpu / count : Number.NaN,
      medianMs: quantile(times, 0.5),
      p99Ms: quantile(times, 0.99),
      maxMs: times[times.length - 1] ?? Number.NaN,
    };
  };
  const rows = [
    row(
      'an engine leaves or rejoins one service group (one apply; its slot parked, or taken back from parking)',
      one,
      cpu1 - cpu0,
    ),
    row(
      `an engine leaves or rejoins all ${opts.services} groups, ${opts.services} applies in turn (before)`,
      all.turns,
      allCpu.turns,
      'turns',
    ),
    row(
      `an engine leaves or rejoins all ${opts.services} groups, one applyAll: one transaction, one ip batch (now)`,
      all.once,
      allCpu.once,
      'once',
    ),
    row(
      "an engine's first join to one group (a new address: its slot's rule and route made, the record written)",
      first,
      cpuFirst,
    ),
    row(
      `a counter read, a new \`nft -j list\` process per listing (${listings.length} listings; before)`,
      reads.processes,
      readCpu.processes,
      'processes',
    ),
    row(
      `a counter read through the persistent \`nft -j -i\` (the same ${listings.length} listings; now)`,
      reads.reader,
      readCpu.reader,
      'reader',
    ),
    row(
      'a status read now: the named counters alone (1 listing; the page, the status, a scrape)',
      reads.status,
      readCpu.status,
      'status',
    ),
    row(
      'ingress backend: an engine leaves or rejoins one service group (one apply, one transaction)',
      ingOne,
      ingOneCpu,
    ),
    row(
      `ingress backend: an engine leaves or rejoins all ${opts.services} groups, one applyAll (one transaction)`,
      ingAll.times,
      ingAll.cpu,
    ),
    row(
      `ingress backend, wccpd's own tables (balance: only the engine's buckets move): an engine leaves or rejoins ` +
        `all ${opts.services} groups, one applyAll`,
      balAll.times,
      balAll.cpu,
    ),
  ];
  return rows;
}

if (process.argv[2] === '--child') {
  child(JSON.parse(process.argv[3] ?? '{}') as { engines: number; services: number; changes: number }).then(
    (r) => {
      console.log(JSON.stringify(r));
      process.exit(0);
    },
    (e: unknown) => {
      console.error(e);
      process.exit(1);
    },
  );
}
