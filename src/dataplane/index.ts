// The data plane's entry point: each backend plugged in through its descriptor, picked by its config name.
import { ingressBackend } from './ingress/ingress.js';
import type { IngressRedirectorOptions } from './ingress/ingress.js';
import { nftBackend } from './nft/nft.js';
import type { NftRedirectorOptions } from './nft/nft.js';
import { noneBackend } from './none.js';
import type { BackendDescriptor, Redirector } from './redirector.js';
import type { DataplaneBackend } from './settings.js';
import { userlandBackend, type UserlandBackendOptions } from './userland/userland.js';

export interface RedirectorOptions {
  readonly nft?: NftRedirectorOptions;
  /** The ingress backend (netdev ingress hook, L2 forwarding, a flow map per service; docs/dataplane.md). */
  readonly ingress?: IngressRedirectorOptions;
  /** The userland backend (pcap + raw sockets, docs/userland.md); its packet I/O is loaded by start(). */
  readonly userland?: UserlandBackendOptions;
}

/** Each backend's options under its own name ('none' takes none). */
type OptionsOf<B extends DataplaneBackend> = B extends keyof RedirectorOptions ? RedirectorOptions[B] : never;

const BACKENDS: { readonly [B in DataplaneBackend]: BackendDescriptor<OptionsOf<B>> } = {
  nft: nftBackend,
  ingress: ingressBackend,
  userland: userlandBackend,
  none: noneBackend,
};

export function createRedirector(backend: DataplaneBackend, options: RedirectorOptions = {}): Redirector {
  const descriptor: BackendDescriptor<unknown> = BACKENDS[backend];
  return descriptor.create(backend === 'none' ? undefined : options[backend]);
}

export { explain } from './explain.js';
export { DataplaneError } from './errors.js';
export type { DataplaneErrorReason } from './errors.js';
export { IngressRedirector } from './ingress/ingress.js';
export type { IngressCounters, IngressRedirectorOptions } from './ingress/ingress.js';
export { NftRedirector } from './nft/nft.js';
export type { NftRedirectorOptions } from './nft/nft.js';
export { NoneRedirector } from './none.js';
export { UserlandRedirector } from './userland/userland.js';
export type { UserlandBackendOptions } from './userland/userland.js';
export type { UserlandStats } from './userland/counters.js';
export type { DataplaneBackend } from './settings.js';
export * from './kernel/names.js';
export type * from './redirector.js';
