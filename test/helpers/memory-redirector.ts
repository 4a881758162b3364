// The memory backend for tests: records what was applied, and counts packets a test feeds through classify().
import { BUCKET_COUNT } from '../../src/buckets/table.js';
import type { EngineAddress } from '../../src/buckets/table.js';
import { DataplaneError } from '../../src/dataplane/errors.js';
import { explain } from '../../src/dataplane/explain.js';
import { byServiceId } from '../../src/dataplane/redirector.js';
import type {
  BucketCounters,
  Explanation,
  RedirectCounters,
  Redirector,
  ServiceRedirect,
} from '../../src/dataplane/redirector.js';

export class MemoryRedirector implements Redirector {
  readonly name = 'memory';
  /** Every service applied, in order, as given. */
  readonly applied: ServiceRedirect[] = [];
  /** Every apply() and applyAll() that changed something: the services that came into force together. */
  readonly batches: ServiceRedirect[][] = [];
  private readonly current = new Map<number, ServiceRedirect>();
  private readonly bucketCounts = new Map<number, { packets: number; bytes: number }[]>();
  private readonly engineCounts = new Map<number, Map<EngineAddress, { packets: number; bytes: number }>>();
  private running = false;

  get started(): boolean {
    return this.running;
  }

  /** The service as last applied and still in force. */
  service(serviceId: number): ServiceRedirect | undefined {
    return this.current.get(serviceId);
  }

  async start(): Promise<void> {
    this.running = true;
  }

  async apply(service: ServiceRedirect): Promise<void> {
    await this.applyAll([service]);
  }

  async applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    this.mustRun();
    const given = byServiceId(services);
    if (given.size === 0) return;
    this.batches.push([...given.values()]);
    for (const s of given.values()) {
      this.applied.push(s);
      this.current.set(s.serviceId, s);
    }
  }

  async removeService(serviceId: number): Promise<void> {
    this.mustRun();
    this.current.delete(serviceId);
  }

  async stop(): Promise<void> {
    this.running = false;
    this.current.clear();
  }

  /** Feeds one new connection's first packet to a service: counts it as the kernel would and says where it went. */
  classify(serviceId: number, destination: string, bytes = 60): Explanation | null {
    const s = this.current.get(serviceId);
    if (s === undefined) return null;
    const x = explain(s, destination);
    let list = this.bucketCounts.get(serviceId);
    if (list === undefined) {
      list = Array.from({ length: BUCKET_COUNT }, () => ({ packets: 0, bytes: 0 }));
      this.bucketCounts.set(serviceId, list);
    }
    const b = list[x.bucket];
    if (b !== undefined) {
      b.packets += 1;
      b.bytes += bytes;
    }
    if (x.engine !== null) {
      let m = this.engineCounts.get(serviceId);
      if (m === undefined) {
        m = new Map();
        this.engineCounts.set(serviceId, m);
      }
      const e = m.get(x.engine) ?? { packets: 0, bytes: 0 };
      e.packets += 1;
      e.bytes += bytes;
      m.set(x.engine, e);
    }
    return x;
  }

  async counters(): Promise<RedirectCounters> {
    const buckets = new Map<number, readonly BucketCounters[]>();
    for (const [id, l] of this.bucketCounts)
      buckets.set(
        id,
        l.map((c) => ({ ...c })),
      );
    const engines = new Map<number, ReadonlyMap<EngineAddress, BucketCounters>>();
    for (const [id, m] of this.engineCounts) engines.set(id, new Map([...m].map(([k, v]) => [k, { ...v }])));
    return { buckets, engines };
  }

  private mustRun(): void {
    if (!this.running) throw new DataplaneError('not-started', 'the memory data plane is not started');
  }
}
