// A firewall reload against the nft backend (docs/dataplane.md, "A firewall reload"): our tables, or a chain or rule
// of ours, deleted by someone else. The table guard (kernel/table-guard.ts) hints; the check here holds the kernel
// against what our own transactions left (NftCommands.expected), and a restore writes everything applied again in ONE
// transaction, the slots' ip objects first.
import type { Log } from '../../log.js';
import { CLOSED_TABLE, NFT_FAMILY, NFT_TABLE } from '../kernel/names.js';
import type { CommitServices } from '../kernel/service-changes.js';
import { TableGuard } from '../kernel/table-guard.js';
import type { SlotBook } from './book.js';
import type { NftCommands } from './commands.js';
import type { IpRepair } from './ip-repair.js';
import type { SetTimer } from './options.js';
import type { RestoreBackoff, TableWatch, TableWatchOptions } from '../kernel/table-watch.js';

/** What the table watch saw and did (status and metrics). */
export interface TableRestores {
  /** Times our tables were put back after someone else deleted them. */
  readonly restored: number;
  /** The last one: when, and what was gone. */
  readonly last: { readonly at: string; readonly tables: readonly string[] } | null;
  /** The watch's monitor process runs (false: not watching, or restarting after it ended). */
  readonly watching: boolean;
}

const PREROUTING = 'prerouting';

export interface TableRepairOptions {
  readonly book: SlotBook;
  readonly io: NftCommands;
  readonly ip: IpRepair;
  readonly log: Log | undefined;
  readonly netns: string | undefined;
  /** The table watch: true runs `nft -j monitor destroy`, false none, a function makes it (tests). */
  readonly watch: boolean | ((o: TableWatchOptions) => TableWatch);
  readonly restoreBackoff: RestoreBackoff | undefined;
  readonly now: () => number;
  readonly setTimer: SetTimer;
  /** Runs a job in the backend's queue. */
  readonly serial: (job: () => Promise<void>) => Promise<void>;
  readonly started: () => boolean;
  /** The next transaction writes our table from scratch. */
  readonly rebuildTable: () => void;
  /** A change of the services in force (in the queue already). */
  readonly commit: CommitServices;
}

export class TableRepair {
  /** The table watch, its checks, their backoff and counts (table-guard.ts). */
  readonly guard: TableGuard;
  private lastRestore: TableRestores['last'] = null;

  constructor(private readonly o: TableRepairOptions) {
    this.guard = new TableGuard({
      subject: 'nft data plane',
      checking: 'our tables',
      log: o.log,
      netns: o.netns,
      family: NFT_FAMILY,
      tables: [NFT_TABLE, CLOSED_TABLE],
      watch: o.watch,
      backoff: o.restoreBackoff,
      now: o.now,
      setTimer: o.setTimer,
      // Our changes flush and refill every other chain's rules; only the prerouting chain's are written once. A table
      // deleted, or a rule of prerouting: the check counts that chain's rules too.
      onDeleted: (d) =>
        d.kind === 'chain'
          ? 'chains'
          : d.kind === 'rule' && (d.table !== NFT_TABLE || d.chain !== PREROUTING)
            ? null
            : 'rules',
      serial: o.serial,
      check: (rules) => this.check(rules),
    });
  }

  /** How often our tables were put back, and whether the watch runs. */
  restores(): TableRestores {
    return { restored: this.guard.restores(), last: this.lastRestore, watching: this.guard.pid() !== undefined };
  }

  /** The watch's monitor process id while one runs; for tests. */
  pid(): number | undefined {
    return this.guard.pid();
  }

  /**
   * In the queue: which of our tables are gone, or which chain of ours, or a rule of the prerouting chain (only after
   * such a hint: that listing costs nft a fetch of the whole table); if any, restore().
   */
  private async check(rules: boolean): Promise<void> {
    const b = this.o.book;
    if (!this.o.started()) return;
    // Chain names alone (a table of ours has chains while it exists): `list tables` fetches each whole table (the cost
    // of both: docs/dataplane.md, "A firewall reload").
    const chains = await this.chainsInKernel();
    const mine = chains.get(NFT_TABLE);
    const main = mine === undefined;
    const closed = b.closedInTable.size > 0 && !chains.has(CLOSED_TABLE);
    let damage: string | null = null;
    if (mine !== undefined) {
      const lost = [...this.o.io.expected.keys()].filter((c) => !mine.has(c));
      if (lost.length > 0) damage = `lost its chain${lost.length > 1 ? 's' : ''} ${lost.join(', ')}`;
      else if (rules) {
        const want = this.o.io.expected.get(PREROUTING) ?? -1;
        const have = await this.rulesInKernel(PREROUTING);
        if (have < want) damage = `emptied (its prerouting chain has ${have} of its ${want} rules)`;
      }
    }
    if (!main && !closed && damage === null) return;
    await this.restore(main || damage !== null, closed, damage);
  }

  /** Per table of our family, its chains' names (`list chains`: no rules, no sets). */
  private async chainsInKernel(): Promise<Map<string, Set<string>>> {
    const out = JSON.parse(await this.o.io.listJson(['list', 'chains', NFT_FAMILY])) as {
      nftables?: { chain?: { family?: string; table?: string; name?: string } }[];
    };
    const tables = new Map<string, Set<string>>();
    for (const o of out.nftables ?? []) {
      const c = o.chain;
      if (c?.family !== NFT_FAMILY || c.table === undefined || c.name === undefined) continue;
      const names = tables.get(c.table) ?? new Set<string>();
      names.add(c.name);
      tables.set(c.table, names);
    }
    return tables;
  }

  /** How many rules one chain of our table has now. */
  private async rulesInKernel(chain: string): Promise<number> {
    const out = JSON.parse(await this.o.io.listJson(['list', 'chain', NFT_FAMILY, NFT_TABLE, chain])) as {
      nftables?: { rule?: unknown }[];
    };
    return (out.nftables ?? []).filter((o) => o.rule !== undefined).length;
  }

  /**
   * Puts back what someone else deleted, in ONE transaction with the current state of every applied service: our
   * table from scratch when it went (every slot's chains and counters went with it), the closed table's refusals when
   * that went. Slots' ip rules and routes normally survive an nft reload; any that did not are put back first
   * (IpRepair.repair); one that cannot be yet (a link still down) does not hold up the table: the periodic ip check
   * tries it again.
   */
  private async restore(main: boolean, closed: boolean, damage: string | null = null): Promise<void> {
    const b = this.o.book;
    const gone = [...(main ? [NFT_TABLE] : []), ...(closed ? [CLOSED_TABLE] : [])].map((t) => `${NFT_FAMILY} ${t}`);
    if (main) {
      this.o.rebuildTable();
      b.tableGone();
    }
    if (closed) {
      if (b.closedLeftover.size > 0)
        this.o.log?.warn(
          { services: [...b.closedLeftover] },
          `nft data plane: the earlier run's fail-closed refusals of service ${[...b.closedLeftover].join(', ')} ` +
            'went with the closed table; they come back when the service is applied',
        );
      b.closedLeftover = new Set();
      b.closedInTable = new Set();
    }
    // The slots' ip rules and routes normally outlive an nft reload; any that went are put back first.
    let ipRedone: boolean | string = false;
    try {
      const missing = await this.o.ip.repair();
      ipRedone = missing !== null && (missing.rules.length > 0 || missing.routes.length > 0 || missing.guard);
    } catch (e) {
      this.o.ip.counts.failures += 1;
      ipRedone = `not yet: ${(e as Error).message}`;
    }
    await this.o.commit(new Map(b.services), [], new Set());
    const restored = this.guard.restored();
    this.lastRestore = { at: new Date().toISOString(), tables: gone };
    const applied = [...b.services.values()]
      .sort((a, b) => a.serviceId - b.serviceId)
      .map((s) => `service ${s.serviceId} change ${s.table.changeNumber}`);
    const what =
      damage !== null
        ? `nftables table ${NFT_FAMILY} ${NFT_TABLE} ${damage} by someone else (nft flush table, delete chain or ` +
          `delete rule?)${closed ? ` and table ${NFT_FAMILY} ${CLOSED_TABLE} was deleted` : ''}`
        : `nftables table${gone.length > 1 ? 's' : ''} ${gone.join(' and ')} ${gone.length > 1 ? 'were' : 'was'} deleted ` +
          `by someone else (a firewall reload's flush ruleset?)`;
    this.o.log?.warn(
      {
        deleted: gone,
        ...(damage !== null ? { damage } : {}),
        restored,
        services: Object.fromEntries([...b.services.values()].map((s) => [s.serviceId, s.table.changeNumber])),
        ipRedone,
      },
      `${what}; restored with ` +
        `${applied.length > 0 ? applied.join(', ') : 'no service applied yet'}` +
        (main ? '; per-bucket and per-engine counters start again from zero' : '') +
        (ipRedone === true ? '; ip rules or routes of ours were gone too, and were made again' : '') +
        (typeof ipRedone === 'string'
          ? `; ip rules or routes of ours are gone too and cannot be put back yet (${ipRedone})`
          : ''),
    );
  }
}
