// `dataplane.backend: none`: redirects nothing (the daemon still speaks WCCP and publishes tables).
import type { BackendDescriptor, RedirectCounters, Redirector, ServiceRedirect } from './redirector.js';

export class NoneRedirector implements Redirector {
  readonly name = 'none';
  readonly redirectsNothing = true;
  async start(): Promise<void> {
    /* nothing to prepare */
  }
  async apply(_service: ServiceRedirect): Promise<void> {
    /* nothing redirects */
  }
  async applyAll(_services: readonly ServiceRedirect[]): Promise<void> {
    /* nothing redirects */
  }
  async removeService(_serviceId: number): Promise<void> {
    /* nothing installed */
  }
  async stop(): Promise<void> {
    /* nothing installed */
  }
  async counters(): Promise<RedirectCounters> {
    return { buckets: new Map(), engines: new Map() };
  }
}

export const noneBackend: BackendDescriptor<never> = { name: 'none', create: () => new NoneRedirector() };
