// A firewall reload against the ingress backend (docs/dataplane/ingress.md, "The ingress backend"): our table, or a
// chain or a base chain's rule of ours, deleted by someone else. The table guard (kernel/table-guard.ts) hints; the
// check here holds the kernel against the book, and a restore writes the whole table again.
import type { Log } from '../../log.js';
import { INGRESS_FAMILY, INGRESS_TABLE } from '../kernel/names.js';
import type { NftListings, NftTransactions } from '../kernel/nft-session.js';
import type { CommitServices } from '../kernel/service-changes.js';
import { TableGuard } from '../kernel/table-guard.js';
import type { RestoreBackoff, TableWatch, TableWatchOptions } from '../kernel/table-watch.js';
import type { IngressBook } from './book.js';
import { hookChain } from './names.js';
import { ingressBaseRuleset } from './ruleset.js';

const TABLE = `${INGRESS_FAMILY} ${INGRESS_TABLE}`;

export interface IngressTableRepairOptions {
  readonly book: IngressBook;
  readonly session: NftTransactions;
  readonly reader: NftListings;
  readonly log: Log | undefined;
  readonly netns: string | undefined;
  /** The table watch: true runs `nft -j monitor destroy`, false none, a function makes it (tests). */
  readonly watch: boolean | ((o: TableWatchOptions) => TableWatch);
  readonly restoreBackoff: RestoreBackoff | undefined;
  /** Runs a job in the backend's queue. */
  readonly serial: (job: () => Promise<void>) => Promise<void>;
  readonly started: () => boolean;
  /** Runs a job as a change of the kernel's state (ChangeQueue.changing). */
  readonly changing: (job: () => Promise<void>) => Promise<void>;
  /** Forgets everything of ours (a new table). */
  readonly reset: () => void;
  /** Writes the services (in a change already). */
  readonly write: CommitServices;
}

export class IngressTableRepair {
  /** The table watch, its checks, their backoff and counts (table-guard.ts). */
  readonly guard: TableGuard;

  constructor(private readonly o: IngressTableRepairOptions) {
    this.guard = new TableGuard({
      subject: 'ingress data plane',
      checking: 'our table',
      log: o.log,
      netns: o.netns,
      family: INGRESS_FAMILY,
      tables: [INGRESS_TABLE],
      watch: o.watch,
      backoff: o.restoreBackoff,
      // Our own changes delete chains and flush the base chain too: the check then finds nothing missing.
      onDeleted: (d) =>
        d.kind !== 'rule'
          ? 'chains'
          : o.book.hook !== null && d.chain === hookChain(o.book.hook.chain)
            ? 'rules'
            : null,
      serial: o.serial,
      check: (rules) => this.check(rules),
    });
  }

  /** In the queue: is our table there with every chain (and, after a hint, the base chain's rules)? If not, restore. */
  private async check(rules: boolean): Promise<void> {
    if (!this.o.started()) return;
    const listed = JSON.parse(await this.o.reader.list(['list', 'chains', INGRESS_FAMILY])) as {
      nftables?: { chain?: { table?: string; name?: string } }[];
    };
    const names = (listed.nftables ?? []).flatMap((o) => (o.chain?.table === INGRESS_TABLE ? [o.chain.name] : []));
    let damage: string | null = null;
    if (names.length === 0) damage = 'was deleted';
    else {
      const have = new Set(names);
      const lost = this.o.book.expectedChains().filter((c) => !have.has(c));
      if (lost.length > 0) damage = `lost its chain${lost.length > 1 ? 's' : ''} ${lost.join(', ')}`;
      else if (rules && this.o.book.hook !== null) {
        const chain = hookChain(this.o.book.hook.chain);
        const out = JSON.parse(await this.o.reader.list(['list', 'chain', INGRESS_FAMILY, INGRESS_TABLE, chain])) as {
          nftables?: { rule?: unknown }[];
        };
        const count = (out.nftables ?? []).filter((o) => o.rule !== undefined).length;
        const want = [...this.o.book.services.values()].filter((s) => s.clientInterfaces.length > 0).length;
        if (count < want) damage = `emptied (its base chain has ${count} of its ${want} rules)`;
      }
    }
    if (damage !== null) await this.restore(damage);
  }

  /**
   * The whole table again from scratch, with every applied service's current state, in two transactions (the static
   * part, then the services). The flow maps went with the table: live flows are classified again by the current
   * tables at their next packet (the same engine unless a table changed meanwhile).
   */
  private async restore(damage: string): Promise<void> {
    const services = new Map(this.o.book.services);
    await this.o.changing(async () => {
      await this.o.session.run(ingressBaseRuleset());
      this.o.reset();
      await this.o.write(services, [], new Set(services.keys()));
    });
    const restored = this.guard.restored();
    const applied = [...services.values()]
      .sort((a, b) => a.serviceId - b.serviceId)
      .map((s) => `service ${s.serviceId} change ${s.table.changeNumber}`);
    this.o.log?.warn(
      { table: TABLE, restored, services: applied },
      `ingress data plane: nftables table ${TABLE} ${damage} by someone else (a firewall reload's flush ruleset?); ` +
        `restored with ${applied.length > 0 ? applied.join(', ') : 'no service'}; its flow maps went with it, so ` +
        'live flows are classified again by the current tables',
    );
  }
}
