// The peer gateways compared with us (admin/peers.ts): the config's, then those of a reload that changed `peers`.
import type { Cluster } from '../cluster/index.js';
import type { WallClock } from '../clock.js';
import type { Config } from '../config/index.js';
import { PeerChecker } from '../admin/peers.js';
import type { PeerStatusView } from '../admin/api-types.js';

export class ConfiguredPeers {
  private checker: PeerChecker;
  private any: boolean;

  constructor(
    private readonly cluster: Cluster,
    private readonly clock: WallClock,
    config: Config,
  ) {
    this.checker = this.build(config);
    this.any = config.peers.length > 0;
  }

  /** A reload's `peers`: a new checker (its counts start again). */
  set(config: Config): void {
    this.checker = this.build(config);
    this.any = config.peers.length > 0;
  }

  /** Undefined without configured peers (the views leave them out). */
  check(): Promise<PeerStatusView[] | undefined> {
    return this.any ? this.checker.check() : Promise.resolve(undefined);
  }

  private build(config: Config): PeerChecker {
    return new PeerChecker({
      peers: config.peers,
      clock: this.clock,
      serviceIds: () => this.cluster.serviceIds(),
      ours: (id) => this.cluster.service(id) ?? null,
    });
  }
}
