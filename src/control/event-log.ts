// The cluster's events as log lines: a table change one line each, engine-state transitions at most 3 per engine and
// service per second (an engine whose HERE_I_AMs flap, weight or capabilities, would otherwise write a line per
// datagram). Past the burst, transitions are counted and the last one is written with that count when the second is
// over. The events themselves (API, stream) keep every one.
import type { ClusterEvent, EngineStateEvent } from '../cluster/index.js';
import type { Log } from '../log.js';
import { BurstLog } from '../rate-limited-log.js';

export class ClusterEventLog {
  private readonly stateLines: BurstLog<EngineStateEvent>;

  constructor(private readonly log: Log) {
    this.stateLines = new BurstLog({ burst: 3, windowMs: 1000, write: (e, n) => this.writeEngineState(e, n) });
  }

  write(e: ClusterEvent): void {
    if (e.type === 'engine-state') this.stateLines.offer(`${e.service} ${e.engine}`, e);
    else
      this.log.info(
        { event: e.type, service: e.service, changeNumber: e.changeNumber, moved: e.moved, reason: e.reason },
        `table of service ${e.service} is now change ${e.changeNumber} (${e.moved} buckets moved)`,
      );
  }

  /** Writes no more lines (a burst's count pending is dropped with its timer). */
  stop(): void {
    this.stateLines.stop();
  }

  private writeEngineState(e: EngineStateEvent, coalesced: number): void {
    const { type, service, engine, from, to, reason } = e;
    this.log.info(
      { event: type, service, engine, from, to, reason, ...(coalesced > 0 ? { coalesced } : {}) },
      `engine ${engine} ${from} -> ${to}: ${reason}${coalesced > 0 ? ` (${coalesced} more transitions in the last second not logged one by one)` : ''}`,
    );
  }
}
