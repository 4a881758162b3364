// How the nft backend reaches the kernel: nft transactions (one persistent `nft -i`, nft-session.ts, or one `nft -f -`
// each), counter listings (a persistent `nft -j -i`), ip batches (a persistent `ip -batch`), and the ownership record
// every ip object is written to before it is made (ownership.ts). It follows what our own transactions did to our
// table's chains (trackChains), so a check after a firewall reload never takes our own changes for someone else's.
import { createExec } from '../kernel/exec.js';
import type { Exec } from '../kernel/exec.js';
import { createIpSession } from '../kernel/ip-session.js';
import type { IpBatches } from '../kernel/ip-session.js';
import { createNftReader, createNftSession } from '../kernel/nft-session.js';
import type { NftListings, NftTransactions } from '../kernel/nft-session.js';
import { NFT_FAMILY, NFT_TABLE } from '../kernel/names.js';
import { OwnershipRecord } from '../kernel/ownership.js';
import { execBatch } from '../kernel/routes.js';
import type { RunBatch } from '../kernel/routes.js';
import type { NftRedirectorOptions } from './options.js';

const OURS = `${NFT_FAMILY} ${NFT_TABLE}`;

/**
 * Follows what a transaction of ours (it succeeded: transactions are atomic) did to our table's chains: which exist,
 * and how many rules each has (-1 when a statement makes that unknown).
 */
export function trackChains(text: string, chains: Map<string, number>): void {
  for (const raw of text.split('\n')) {
    const line = raw.trimStart();
    if (line === `delete table ${OURS}`) {
      chains.clear();
      continue;
    }
    const m = /^(add|delete|flush|insert|replace) (chain|rule|table) (\S+) (\S+)(?: (\S+))?/.exec(line);
    if (m === null || `${m[3]} ${m[4]}` !== OURS) continue;
    const [, verb, object, , , name] = m;
    if (object === 'table') {
      if (verb === 'flush') for (const c of chains.keys()) chains.set(c, 0);
      if (verb === 'delete') chains.clear();
      continue;
    }
    if (name === undefined) continue;
    if (object === 'chain') {
      if (verb === 'add' && !chains.has(name)) chains.set(name, 0);
      else if (verb === 'delete') chains.delete(name);
      else if (verb === 'flush' && chains.has(name)) chains.set(name, 0);
    } else {
      const n = chains.get(name);
      if (n === undefined) continue;
      chains.set(name, verb === 'add' && n >= 0 ? n + 1 : -1);
    }
  }
}

export class NftCommands {
  readonly exec: Exec;
  /** The persistent `nft -i`, or null: each transaction is one `nft -f -` through exec. */
  private readonly session: NftTransactions | null;
  /** The persistent `ip -batch`, or null: each change's batch is one `ip` process through exec. */
  private readonly ipSession: IpBatches | null;
  /** The persistent `nft -j -i` for counter listings, or null: each listing is one `nft -j` process through exec. */
  private readonly reader: NftListings | null;
  readonly batch: RunBatch;
  readonly record: OwnershipRecord;
  /**
   * Our table's chains as our own transactions left them, each with its rule count (-1: not known): what a check holds
   * the kernel against (trackChains), so our own changes never count as someone else's removals.
   */
  readonly expected = new Map<string, number>();

  constructor(options: NftRedirectorOptions) {
    this.exec = options.exec ?? createExec(options);
    // Transaction files in the state directory when there is one: under the unit's ProtectSystem=strict it is the only
    // writable place.
    this.session =
      options.session ??
      (options.exec !== undefined
        ? null
        : createNftSession(options.stateDir !== undefined ? { ...options, parentDir: options.stateDir } : options));
    this.ipSession = options.ipSession ?? (options.exec !== undefined ? null : createIpSession(options));
    this.reader = options.reader ?? (options.exec !== undefined ? null : createNftReader(options));
    const ip = this.ipSession;
    this.batch = ip !== null ? (lines) => ip.run(lines) : execBatch(this.exec);
    this.record = OwnershipRecord.inStateDir(options.stateDir);
  }

  /** Which way transactions go, for the start's log line. */
  transactions(): { kind: 'session' | 'process'; describe: string } {
    return this.session !== null
      ? { kind: 'session', describe: this.session.describe }
      : { kind: 'process', describe: 'one `nft -f -` process each' };
  }

  /** One atomic nft transaction. */
  async transact(text: string): Promise<void> {
    if (this.session !== null) await this.session.run(text);
    else await this.exec('nft', ['-f', '-'], text);
    trackChains(text, this.expected);
  }

  listJson(args: readonly string[]): Promise<string> {
    return this.reader !== null ? this.reader.list(args) : this.exec('nft', ['-j', ...args]);
  }

  /** Ends the persistent processes. */
  async stop(): Promise<void> {
    await this.session?.stop();
    await this.ipSession?.stop();
    await this.reader?.stop();
  }
}
