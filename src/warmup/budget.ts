// What a sender may cost the broker. ICP has no authentication: a UDP source address is whatever the sender writes,
// so every limit here is about what a claimed address may make the broker do, not about who sent it.
//
// - ReplyBudget: token buckets per source and in all, for the replies the broker sends to addresses it does not
//   serve (ICP_DENIED): a forged flood cannot make the broker a reflector.
// - MemberBudget: a member engine's queries per second. Past the budget, its queries are answered MISS at once, and
//   the outcomes of its queries in that second and in the seconds on either side of it are not counted towards its
//   warm-up: a flood under its address (forged or not) cannot end its warm-up, neither by the part of it that came
//   in the second before it went over the budget nor by its tail in the second after. A second's outcomes are
//   counted only once the second after it has closed within the budget too.

/** Token buckets keyed by source, and one for all sources; a token is taken from both or from neither. */
export class ReplyBudget {
  private readonly sources = new Map<string, { tokens: number; at: number }>();
  private readonly all: { tokens: number; at: number };

  constructor(
    private readonly clock: { now(): number },
    /** Replies per second to one source (also its burst). */
    private readonly perSource: number,
    /** Replies per second in all (also the burst). */
    private readonly total: number,
    /** Sources remembered at most; past that they are forgotten all at once (the total still holds). */
    private readonly maxSources = 4096,
  ) {
    this.all = { tokens: total, at: clock.now() };
  }

  private refill(b: { tokens: number; at: number }, rate: number, now: number): void {
    // A clock that went back (it should not: the clock is monotonic) refills nothing.
    if (now > b.at) b.tokens = Math.min(rate, b.tokens + ((now - b.at) / 1000) * rate);
    b.at = now;
  }

  /** True when a reply to `source` is within both budgets (and takes it). */
  take(source: string): boolean {
    const now = this.clock.now();
    let mine = this.sources.get(source);
    if (mine === undefined) {
      if (this.sources.size >= this.maxSources) this.sources.clear();
      mine = { tokens: this.perSource, at: now };
      this.sources.set(source, mine);
    }
    this.refill(mine, this.perSource, now);
    this.refill(this.all, this.total, now);
    if (mine.tokens < 1 || this.all.tokens < 1) return false;
    mine.tokens--;
    this.all.tokens--;
    return true;
  }
}

/** One second of one member's queries, and the outcomes held until it is known to be within the budget. */
interface Second {
  readonly second: number;
  queries: number;
  /** The member went over its budget in this second: its queries past the budget are answered MISS at once. */
  over: boolean;
  /** This second or one beside it went over: none of its outcomes count. */
  voided: boolean;
  /** Its outcomes were handed on; later ones are handed on at once. */
  committed: boolean;
  readonly held: (() => void)[];
}

/** A ticket for one query: say what its outcome is with `settle`. */
export interface BudgetTicket {
  /** False when the member is over its budget: answer MISS at once, ask no one. */
  readonly within: boolean;
  /** Hands `record` on (now, or once the query's second is known to be within the budget), or drops it. */
  settle(record: () => void): void;
}

export class MemberBudget {
  private readonly members = new Map<string, { current: Second; previous: Second | null }>();

  constructor(
    private readonly clock: { now(): number },
    /** Queries per second from one member (a fixed one-second window). */
    private readonly perSecond: number,
  ) {}

  private fresh(second: number, voided = false): Second {
    return { second, queries: 0, over: false, voided, committed: false, held: [] };
  }

  private void(s: Second): void {
    s.voided = true;
    s.held.length = 0;
  }

  private commit(s: Second): void {
    if (s.committed) return;
    s.committed = true;
    if (s.voided) return;
    for (const record of s.held.splice(0)) record();
  }

  /** Moves `engine`'s window to the clock's second, handing on what is now known to be within the budget. */
  private roll(engine: string): { current: Second; previous: Second | null } {
    const second = Math.floor(this.clock.now() / 1000);
    let m = this.members.get(engine);
    if (m === undefined) {
      m = { current: this.fresh(second), previous: null };
      this.members.set(engine, m);
      return m;
    }
    if (second <= m.current.second) return m;
    // The previous second is cleared by the current one having closed (an over-budget current voided it already).
    if (m.previous !== null) this.commit(m.previous);
    if (second === m.current.second + 1) {
      m.previous = m.current;
      // The second right after an over-budget one holds the flood's tail.
      m.current = this.fresh(second, m.previous.over);
    } else {
      // A quiet second followed the current one: it is cleared too.
      this.commit(m.current);
      m.previous = null;
      m.current = this.fresh(second);
    }
    return m;
  }

  /** Counts one query from `engine`. */
  query(engine: string): BudgetTicket {
    const m = this.roll(engine);
    const s = m.current;
    s.queries++;
    if (s.queries > this.perSecond && !s.over) {
      s.over = true;
      this.void(s);
      if (m.previous !== null && !m.previous.committed) this.void(m.previous);
    }
    return {
      within: !s.over,
      settle: (record) => {
        this.roll(engine);
        if (s.voided) return;
        if (s.committed) record();
        else s.held.push(record);
      },
    };
  }

  /** Hands on what the clock has cleared since (call every few hundred ms); forgets engines `keep` rejects. */
  sweep(keep: (engine: string) => boolean): void {
    for (const engine of [...this.members.keys()]) {
      if (!keep(engine)) this.members.delete(engine);
      else this.roll(engine);
    }
  }
}

/** A relay held by the rate waits at least this long: a pause per socket read would cost more than the bytes. */
const MIN_WAIT_S = 0.025;
/** Reads no smaller than this, however low the rate. */
const MIN_READ = 16 * 1024;

/**
 * The relay's bytes per second over all relays at once (`warmup.maxRelayRate`): a token bucket that may go into debt
 * (a chunk is never split) by up to MIN_WAIT_S of the rate before a taker is told to wait until the debt is paid.
 */
export class ByteRate {
  private tokens: number;
  private at: number;

  constructor(
    private readonly clock: { now(): number },
    /** Bytes per second; 0 or less: no limit. */
    private rate: number,
  ) {
    this.tokens = this.burst();
    this.at = clock.now();
  }

  /** A tenth of a second's worth, at least 256 KiB (a few socket reads). */
  private burst(): number {
    return Math.max(256 * 1024, this.rate / 10);
  }

  setRate(rate: number): void {
    this.rate = rate;
    this.tokens = Math.min(this.tokens, this.burst());
  }

  /**
   * The most to read at once, up to `max`: with no more than MIN_WAIT_S of the rate per read, the debt a read may
   * leave (the last one of a relay is not waited for) stays within what a wait makes up for.
   */
  readSize(max: number): number {
    return this.rate <= 0 ? max : Math.max(MIN_READ, Math.min(max, Math.floor(this.rate * MIN_WAIT_S)));
  }

  /** Takes `bytes`; returns the milliseconds to wait before reading more (0: go on). */
  take(bytes: number): number {
    if (this.rate <= 0) return 0;
    const now = this.clock.now();
    if (now > this.at) this.tokens = Math.min(this.burst(), this.tokens + ((now - this.at) / 1000) * this.rate);
    this.at = now;
    this.tokens -= bytes;
    return this.tokens >= -this.rate * MIN_WAIT_S ? 0 : Math.ceil((-this.tokens / this.rate) * 1000);
  }
}
