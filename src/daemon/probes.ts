// The active probes by `config.health` (docs/operations.md): started with wccpd, and again after a reload that
// changed `health`; stopped with it.
import type { Cluster } from '../cluster/index.js';
import { createProbers, ProbeScheduler } from '../control/probes/index.js';
import type { Probers } from '../control/probes/index.js';
import type { Config } from '../config/index.js';
import type { Log } from '../log.js';

export class ActiveProbes {
  private running: { scheduler: ProbeScheduler; probers: Probers } | null = null;

  constructor(
    private readonly cluster: Cluster,
    private readonly log: Log,
  ) {}

  async start(config: Config): Promise<void> {
    const probers = await createProbers(config.health, this.log, {
      routerAddress: config.router.address,
      httpPort: config.health.http.port ?? undefined,
      tcpPort: config.health.tcp.port ?? undefined,
      icpPort: config.health.icp.port ?? undefined,
    });
    const scheduler = new ProbeScheduler({
      cluster: this.cluster,
      settings: config.health,
      probers: probers.probers,
      log: this.log,
    });
    scheduler.start();
    this.running = { scheduler, probers };
  }

  stop(): void {
    this.running?.scheduler.stop();
    this.running?.probers.close();
    this.running = null;
  }

  /** After a reload that changed `health`: the old probes stopped, new ones started. */
  async restart(config: Config): Promise<void> {
    this.stop();
    await this.start(config);
  }
}
