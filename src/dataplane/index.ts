// The data plane's entry point: pick a backend by its config name.
import { IngressRedirector } from './ingress.js';
import type { IngressRedirectorOptions } from './ingress.js';
import { MemoryRedirector } from './memory.js';
import { NftRedirector } from './nft.js';
import type { NftRedirectorOptions } from './nft.js';
import { NoneRedirector } from './none.js';
import type { Redirector } from './redirector.js';
import { createUserlandBackend, type UserlandBackendOptions } from './userland.js';

export type DataplaneBackend = 'nft' | 'ingress' | 'userland' | 'memory' | 'none';

export interface RedirectorOptions {
  readonly nft?: NftRedirectorOptions;
  /** The ingress backend (netdev ingress hook, L2 forwarding, a flow map per service; docs/dataplane.md). */
  readonly ingress?: IngressRedirectorOptions;
  /** The userland backend (pcap + raw sockets, docs/userland.md); its packet I/O is loaded by start(). */
  readonly userland?: UserlandBackendOptions;
}

export function createRedirector(backend: DataplaneBackend, options: RedirectorOptions = {}): Redirector {
  switch (backend) {
    case 'nft':
      return new NftRedirector(options.nft);
    case 'ingress':
      return new IngressRedirector(options.ingress);
    case 'memory':
      return new MemoryRedirector();
    case 'none':
      return new NoneRedirector();
    case 'userland':
      return createUserlandBackend(options.userland);
  }
}

export { explain } from './explain.js';
export { DataplaneError } from './errors.js';
export type { DataplaneErrorReason } from './errors.js';
export { IngressRedirector } from './ingress.js';
export type { IngressCounters, IngressRedirectorOptions } from './ingress.js';
export { MemoryRedirector } from './memory.js';
export { NftRedirector } from './nft.js';
export type { NftRedirectorOptions } from './nft.js';
export { NoneRedirector } from './none.js';
export { UserlandRedirector } from './userland.js';
export type { UserlandBackendOptions, UserlandStats } from './userland.js';
export * from './names.js';
export type * from './redirector.js';
export type { FastPathStatus } from './flowtable-probe.js';
