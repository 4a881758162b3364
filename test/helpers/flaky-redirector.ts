// A data plane whose applies fail until `healthy` is set, as one whose nft calls fail would (a busy or broken nft):
// the daemon then keeps the older table in force and retries.
import { MemoryRedirector } from './memory-redirector.js';
import type { ServiceRedirect } from '../../src/dataplane/index.js';

export class FlakyRedirector extends MemoryRedirector {
  healthy = false;
  failures = 0;
  override async applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    if (!this.healthy) {
      this.failures++;
      throw new Error('nft: Could not process rule: Device or resource busy');
    }
    await super.applyAll(services);
  }
}
