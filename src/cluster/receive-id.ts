// The Receive ID handshake (docs/router.md): every I_SEE_YOU carries the group's Receive ID, advanced each time and
// never zero; an engine proves it hears us by echoing one in its next HERE_I_AM. Once an engine has echoed, a HERE_I_AM
// counts only with a fresh echo (a replay is stale); an engine that never echoes (Debian's Squid 5.7) is taken after
// lenientReceiveId HERE_I_AMs when that is allowed (docs/architecture.md, decision 3).

/**
 * I_SEE_YOUs answering counted HERE_I_AMs that an echo may name. An echo must also be newer than the last one that
 * counted, so in steady state only the newest answer is valid; three tolerate the draft's three rapid HERE_I_AMs
 * after a REMOVAL_QUERY crossing our answers, and a REDIRECT_ASSIGN naming a slightly older one (docs/health.md).
 */
export const RECEIVE_ID_WINDOW = 3;

/** The Receive ID after `id`: 32 bits on the wire, never zero, so it wraps from 4,294,967,295 to 1. */
export function nextReceiveId(id: number): number {
  return id >= 0xffffffff ? 1 : id + 1;
}

interface SentReceiveId {
  readonly id: number;
  /** Send order (the service group's count of I_SEE_YOUs): Receive IDs wrap at 2^32, this does not. */
  readonly seq: number;
}

/** One engine's side of the handshake: the I_SEE_YOUs it may echo and whether it has proved itself. */
export class ReceiveIdHandshake {
  /** Satisfied: echoed, or leniently. */
  done = false;
  /** Satisfied without an echo (lenient mode; the admin views flag it). */
  noEcho = false;
  /** It echoed one of our Receive IDs: from then on a HERE_I_AM counts only with a fresh echo (replays are stale). */
  echoed = false;
  private consecutiveNoEcho = 0;
  /** I_SEE_YOUs answering HERE_I_AMs that counted, newest last (at most RECEIVE_ID_WINDOW). */
  private readonly answers: SentReceiveId[] = [];
  /**
   * The I_SEE_YOU answering the last stale HERE_I_AM, kept apart from `answers` so that answering a flood of
   * replays never pushes out the Receive ID the live engine will echo.
   */
  private staleAnswer: SentReceiveId | null = null;
  /** `seq` of the I_SEE_YOU whose echo last counted: each I_SEE_YOU vouches for liveness once. */
  private countedSeq = -1;
  private lastStaleAnswerAt = -Infinity;

  /**
   * An I_SEE_YOU carrying `id` went to the engine, answering a HERE_I_AM that counted or was stale; `seq` is its place
   * in the service group's send order (increasing, never wrapping).
   */
  sent(id: number, answering: 'counted' | 'stale', seq: number): void {
    const sent = { id, seq };
    if (answering === 'stale') {
      this.staleAnswer = sent;
      return;
    }
    this.answers.push(sent);
    if (this.answers.length > RECEIVE_ID_WINDOW) this.answers.shift();
  }

  /**
   * The send order of the I_SEE_YOU that carried `id`, if the engine may still name it (e.g. in a REDIRECT_ASSIGN);
   * null for a Receive ID we did not send it or that is out of the window.
   */
  sentOrder(id: number): number | null {
    const sent = this.answers.find((a) => a.id === id) ?? (this.staleAnswer?.id === id ? this.staleAnswer : null);
    return sent?.seq ?? null;
  }

  /**
   * Whether `receivedId` names an I_SEE_YOU sent to this engine after the one whose echo last counted; if so it is
   * used up. Order is the per-engine send order, so the Receive ID's wrap from 2^32-1 to 1 changes nothing.
   */
  takeEcho(receivedId: number): boolean {
    if (receivedId === 0) return false;
    const sent = this.staleAnswer?.id === receivedId ? this.staleAnswer : this.answers.find((a) => a.id === receivedId);
    if (!sent || sent.seq <= this.countedSeq) return false;
    this.countedSeq = sent.seq;
    return true;
  }

  /**
   * Applies the rule to a HERE_I_AM that counts; returns the reason to give if the engine becomes usable. `receivedId`
   * is the Receive ID it carried: only an engine that never echoes sends 0, so only those count towards lenience.
   */
  step(echo: boolean, lenientReceiveId: number, receivedId = 0): string {
    if (echo) {
      this.echoed = true;
      this.done = true;
      this.noEcho = false;
      this.consecutiveNoEcho = 0;
      return 'echoed our Receive ID';
    }
    // A Receive ID we did not send it (or no longer accept) comes from an engine that echoes: a capture of a strict
    // engine replayed once it was gone (or after our restart) must not make it usable leniently. A live one echoes
    // our answer to this HERE_I_AM next time.
    if (receivedId !== 0 && !this.done) {
      this.consecutiveNoEcho = 0;
      return `waiting for our Receive ID (it echoes ${receivedId}, which is not one we sent it)`;
    }
    this.consecutiveNoEcho += 1;
    if (lenientReceiveId > 0 && this.consecutiveNoEcho >= lenientReceiveId) {
      this.done = true;
      this.noEcho = true;
      return `lenient: ${this.consecutiveNoEcho} HERE_I_AMs without our Receive ID`;
    }
    return 'waiting for our Receive ID';
  }

  /**
   * Whether to answer a stale HERE_I_AM at `now`: at most once per `gapMs` (the draft's rapid HERE_I_AMs come
   * HERE_I_AM_T/10 apart; answering more often only serves a replay flood).
   */
  answerStale(now: number, gapMs: number): boolean {
    // A last answer "in the future" (the clock was set back) does not silence the engine for as long as the step.
    if (now >= this.lastStaleAnswerAt && now - this.lastStaleAnswerAt < gapMs) return false;
    this.lastStaleAnswerAt = now;
    return true;
  }
}
