// Engines of the ingress backend that move to another interface (an `ip route` change, a renumbering): each engine
// with a live slot is looked up again after links, addresses or IPv4 routes change, and its slots' rules rewritten to
// hand its packets out of the new one (docs/dataplane/ingress.md, "The ingress backend").
import type { EngineAddress } from '../../buckets/table.js';
import type { Log } from '../../log.js';
import type { RateLimitedLog } from '../../rate-limited-log.js';
import { DataplaneError } from '../errors.js';
import type { Exec } from '../kernel/exec.js';
import { watchLinks, type LinkWatch } from '../kernel/link-watch.js';
import type { MonitorChild } from '../kernel/monitor.js';
import { INGRESS_FAMILY, INGRESS_TABLE } from '../kernel/names.js';
import type { NftTransactions } from '../kernel/nft-session.js';
import { engineSegments, execBatch, offLinkError } from '../kernel/routes.js';
import { slotChain } from '../kernel/rules.js';
import type { IngressBook } from './book.js';
import { slotRule } from './service-objects.js';
import type { IngressSlot } from './service-objects.js';

const TABLE = `${INGRESS_FAMILY} ${INGRESS_TABLE}`;

export interface EngineWatchOptions {
  readonly book: IngressBook;
  readonly exec: Exec;
  readonly session: NftTransactions;
  readonly log: Log | undefined;
  readonly limitedLog: RateLimitedLog | null;
  readonly netns: string | undefined;
  /** true: `ip -4 monitor link address route`; false: no watch; a function starts the monitor (tests). */
  readonly watch: boolean | (() => MonitorChild);
  readonly linkDebounceMs: number | undefined;
  readonly linkMinGapMs: number | undefined;
  /** Runs a job in the backend's queue. */
  readonly serial: <T>(job: () => Promise<T>) => Promise<T>;
  readonly started: () => boolean;
  /** In the queue: the IPv6 slots' MAC addresses looked up again, their chains written again where one changed. */
  readonly refreshMacs?: () => Promise<void>;
}

export class EngineWatch {
  /** Engines moved to another interface, and checks that failed, since start. */
  enginesMoved = 0;
  failedEngineChecks = 0;
  private linkWatch: LinkWatch | null = null;

  constructor(private readonly o: EngineWatchOptions) {}

  /**
   * Checks where the engines are now (checkEngines) after links, addresses or IPv4 routes change, debounced (at most
   * one check a second), until stop(). A route change is what moves an engine with no link or address event.
   */
  start(): void {
    if (this.o.watch === false || this.linkWatch !== null) return;
    this.linkWatch = watchLinks({
      ...(this.o.netns !== undefined ? { netns: this.o.netns } : {}),
      ...(typeof this.o.watch === 'function' ? { spawnChild: this.o.watch } : {}),
      ...(this.o.linkDebounceMs !== undefined ? { debounceMs: this.o.linkDebounceMs } : {}),
      ...(this.o.linkMinGapMs !== undefined ? { minGapMs: this.o.linkMinGapMs } : {}),
      routes: true,
      neighbours: (line) => this.isEngineNeighbour(line),
      onChange: () => {
        this.check().catch((e: Error) => {
          this.failedEngineChecks += 1;
          this.o.limitedLog?.warn(
            'ingress',
            e instanceof DataplaneError && e.reason === 'engine-not-attached' ? 'engine-off-link' : 'engine-check',
            { error: e.message, failedChecks: this.failedEngineChecks },
            `ingress data plane: ${e.message}`,
          );
        });
      },
      onExit: (why, ms) => this.o.log?.warn({ why }, `ip monitor ended (${why}); started again in ${ms} ms`),
    });
  }

  /**
   * In the queue: each engine with a live slot looked up again (ONE `ip -batch` of `route get`s). An engine now on
   * another interface gets its slots' rules rewritten to hand its packets out of that one (one transaction; its flows
   * and counters stay), with a log line; one no longer on-link is reported with the error its join would get (its
   * slots stay as they were) and looked up again at every later check.
   */
  check(): Promise<void> {
    return this.o.serial(async () => {
      if (!this.o.started() || this.o.book.targets.size === 0) return;
      const targets = [...this.o.book.targets.values()];
      const engines = [...new Set(targets.map((t) => t.engine))];
      const segments = await engineSegments(execBatch(this.o.exec), engines);
      const offLink = new Map<EngineAddress, DataplaneError>();
      const moves: { engine: EngineAddress; from: string; to: string; slots: number[] }[] = [];
      const moved: IngressSlot[] = [];
      for (const [engine, segment] of segments) {
        if ('error' in segment) {
          offLink.set(engine, segment.error);
          continue;
        }
        const mine = targets.filter((t) => t.engine === engine);
        const from = mine.find((t) => t.device !== segment.dev)?.device;
        if (from === undefined) continue;
        moves.push({ engine, from, to: segment.dev, slots: mine.map((t) => t.slot) });
        moved.push(...mine.map((t) => ({ ...t, device: segment.dev })));
      }
      if (moved.length > 0) {
        await this.o.session.run(movedSlotsRuleset(moved));
        for (const t of moved) this.o.book.targets.set(t.slot, t);
        for (const m of moves) this.engineMoved(m);
      }
      await this.o.refreshMacs?.();
      if (offLink.size > 0) throw offLinkError(offLink, new Map(targets.map((t) => [t.engine, t.device] as const)));
    });
  }

  private engineMoved(m: { engine: EngineAddress; from: string; to: string; slots: readonly number[] }): void {
    this.enginesMoved += 1;
    this.o.log?.warn(
      { engine: m.engine, from: m.from, to: m.to, slots: m.slots, enginesMoved: this.enginesMoved },
      `engine ${m.engine} moved from ${m.from} to ${m.to}: its redirected traffic follows it ` +
        `(slot${m.slots.length > 1 ? 's' : ''} ${m.slots.join(' ')} now hand${m.slots.length > 1 ? '' : 's'} its packets to ${m.to})`,
    );
  }

  /**
   * A neighbour line of `ip monitor` about an engine of an IPv6 slot (its MAC address is in our IPv6 chains): the only
   * neighbour events that ask for a check (a busy client segment's ARP entries change all the time).
   */
  private isEngineNeighbour(line: string): boolean {
    if (this.o.book.slots6.size === 0) return false;
    const address = /^(?:Deleted |Miss )?(\S+) dev /.exec(line)?.[1];
    if (address === undefined) return false;
    return [...this.o.book.slots6.keys()].some((s) => this.o.book.targets.get(s)?.engine === address);
  }

  /** The link monitor's process id while one runs (tests: stop() ends it). */
  pid(): number | undefined {
    return this.linkWatch?.pid();
  }

  async stop(): Promise<void> {
    await this.linkWatch?.stop();
    this.linkWatch = null;
  }
}

/** The slot chains of engines that moved to another interface: each one's rule, handing packets out of the new one. */
function movedSlotsRuleset(moved: readonly IngressSlot[]): string {
  return moved.map((t) => `flush chain ${TABLE} ${slotChain(t.slot)}\n${slotRule(t)}\n`).join('');
}
