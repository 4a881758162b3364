// Asks warm sources by ICP whether they hold a URL. One connected UDP socket per source, bound to the broker's
// address (the source's icp_access allows the router): the kernel reports an ICMP port unreachable (the source's
// Squid is gone) as ECONNREFUSED on that socket at once, so a dead source fails hard instead of timing out. A
// source's socket is closed once it is no longer a member (`retain`): sources come and go for weeks.
import { randomInt } from 'node:crypto';
import { createSocket } from 'node:dgram';
import type { Socket } from 'node:dgram';
import { decodeIcp, encodeIcp } from '../wire/icp.js';

/** What one source said: HIT; anything else that is not a HIT (MISS, MISS_NOFETCH, DENIED, ERR); silence; a hard
 * failure. */
export type AskOutcome = 'hit' | 'miss' | 'timeout' | 'failed';

interface Pending {
  readonly url: string;
  readonly resolve: (o: AskOutcome) => void;
  readonly timer: ReturnType<typeof setTimeout>;
}

interface SourceSocket {
  readonly socket: Socket;
  readonly ready: Promise<boolean>;
  readonly pending: Map<number, Pending>;
}

export class IcpAsker {
  private readonly sockets = new Map<string, SourceSocket>();
  // A random start: an off-path sender cannot guess which request numbers are outstanding (and the reply must also
  // name the queried URL and come from the source's address and port, the socket being connected).
  private requestNumber = randomInt(1, 0xfffffffe);
  private closed = false;

  constructor(private readonly options: { readonly bindAddress: string; readonly port: number }) {}

  private nextRequestNumber(): number {
    const n = this.requestNumber;
    this.requestNumber = n >= 0xfffffffe ? 1 : n + 1;
    return n;
  }

  private socketFor(source: string): SourceSocket {
    const have = this.sockets.get(source);
    if (have !== undefined) return have;
    const socket = createSocket('udp4');
    const pending = new Map<number, Pending>();
    const entry: SourceSocket = {
      socket,
      pending,
      ready: new Promise<boolean>((resolve) => {
        socket.once('error', () => resolve(false));
        socket.bind({ address: this.options.bindAddress, port: 0 }, () => {
          // Throws at once on a socket closed meanwhile (the source left): that is a failed source, not a crash.
          try {
            socket.connect(this.options.port, source, () => resolve(true));
          } catch {
            resolve(false);
          }
        });
      }),
    };
    socket.on('message', (buf) => {
      const d = decodeIcp(buf);
      if (!d.ok || d.value.opcode === 'QUERY') return;
      const p = pending.get(d.value.requestNumber);
      if (p === undefined || p.url !== d.value.url) return;
      pending.delete(d.value.requestNumber);
      clearTimeout(p.timer);
      p.resolve(d.value.opcode === 'HIT' || d.value.opcode === 'HIT_OBJ' ? 'hit' : 'miss');
    });
    // ECONNREFUSED (ICMP port unreachable) and the like: every query waiting on this source fails now; the next
    // query opens a fresh socket.
    socket.on('error', () => this.fail(source, entry));
    this.sockets.set(source, entry);
    return entry;
  }

  private fail(source: string, entry: SourceSocket, outcome: AskOutcome = 'failed'): void {
    if (this.sockets.get(source) === entry) this.sockets.delete(source);
    for (const p of entry.pending.values()) {
      clearTimeout(p.timer);
      p.resolve(outcome);
    }
    entry.pending.clear();
    try {
      entry.socket.close();
    } catch {
      /* already closed */
    }
  }

  /** Asks one source about `url`; resolves within timeoutMs, never rejects. */
  async ask(source: string, url: string, requester: string, timeoutMs: number): Promise<AskOutcome> {
    if (this.closed) return 'failed';
    const entry = this.socketFor(source);
    if (!(await entry.ready)) {
      this.fail(source, entry);
      return 'failed';
    }
    // The source may have left (its socket closed) while this query waited for the socket to be ready.
    if (this.sockets.get(source) !== entry) return 'timeout';
    const requestNumber = this.nextRequestNumber();
    let query: Buffer;
    try {
      query = encodeIcp({
        opcode: 'QUERY',
        requestNumber,
        options: 0,
        optionData: 0,
        senderAddress: this.options.bindAddress,
        requesterAddress: requester,
        url,
      });
    } catch {
      return 'miss';
    }
    return new Promise<AskOutcome>((resolve) => {
      const timer = setTimeout(() => {
        entry.pending.delete(requestNumber);
        resolve('timeout');
      }, timeoutMs);
      entry.pending.set(requestNumber, { url, resolve, timer });
      try {
        entry.socket.send(query, (err) => {
          if (err) this.fail(source, entry);
        });
      } catch {
        // A socket closed under it throws at once: this source fails now, like an ICMP error.
        this.fail(source, entry);
      }
    });
  }

  /**
   * Asks every source at once; resolves with the first that says HIT, or null once all have answered otherwise (or
   * timed out). `onOutcome` hears each source's outcome, also those that come after the winner.
   */
  askAll(
    sources: readonly string[],
    url: string,
    requester: string,
    timeoutMs: number,
    onOutcome: (source: string, outcome: AskOutcome) => void,
  ): Promise<string | null> {
    return new Promise((resolve) => {
      let left = sources.length;
      let done = false;
      if (left === 0) resolve(null);
      for (const s of sources) {
        // ask() never rejects; should it all the same, this source counts as failed. An error in the caller's
        // onOutcome (its bookkeeping) must not leave the query unanswered.
        void this.ask(s, url, requester, timeoutMs)
          .catch((): AskOutcome => 'failed')
          .then((o) => {
            try {
              onOutcome(s, o);
            } catch {
              /* see above */
            }
            left--;
            if (done) return;
            if (o === 'hit' || left === 0) {
              done = true;
              resolve(o === 'hit' ? s : null);
            }
          });
      }
    });
  }

  /** Closes the sockets of sources `keep` rejects (departed engines); their waiting queries end as unanswered. */
  retain(keep: (source: string) => boolean): void {
    for (const [source, entry] of [...this.sockets]) if (!keep(source)) this.fail(source, entry, 'timeout');
  }

  /** Open source sockets (one per source asked since it last failed or left). */
  socketCount(): number {
    return this.sockets.size;
  }

  /** Queries waiting for a source's answer, over all sources. */
  pendingCount(): number {
    let n = 0;
    for (const e of this.sockets.values()) n += e.pending.size;
    return n;
  }

  close(): void {
    this.closed = true;
    for (const [source, entry] of [...this.sockets]) this.fail(source, entry);
  }
}
