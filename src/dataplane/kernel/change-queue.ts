// The order of a kernel backend's operations (nft, ingress): changes run one after another through one queue, so two
// transactions never interleave; counter reads skip it, so a table change after an engine failed never waits behind
// the page's or a scrape's read, and a read that overlapped a change is done again in the queue, of one state.
export class ChangeQueue {
  private queue: Promise<unknown> = Promise.resolve();
  /** Odd while a change is being written. */
  private generation = 0;

  /** Runs `job` after every operation queued before it, whether they failed or not. */
  serial<T>(job: () => Promise<T>): Promise<T> {
    const run = this.queue.then(job, job);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Runs `write` (in the queue already) as a change of the kernel's state: a read that overlaps it is done again. */
  async changing<T>(write: () => Promise<T>): Promise<T> {
    this.generation += 1;
    try {
      return await write();
    } finally {
      this.generation += 1;
    }
  }

  /** Runs `read` at once; again in the queue when it overlapped a change or failed (a change may cut a listing). */
  read<T>(read: () => Promise<T>): Promise<T> {
    const seen = this.generation;
    const again = (): Promise<T> => this.serial(read);
    if (seen % 2 === 1) return again();
    return read().then((c) => (this.generation === seen ? c : again()), again);
  }

  /** Resolves once every operation queued so far is done. */
  settled(): Promise<void> {
    return this.queue.then(() => undefined);
  }
}
