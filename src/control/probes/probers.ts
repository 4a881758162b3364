// Builds the probers the config enables. ICMP needs a raw socket: without one it is logged once and left out.
import type { HealthSettings, ProbeKind } from '../../cluster/index.js';
import type { Log } from '../../log.js';
import { icpProber } from './icp.js';
import { openIcmpProber } from './icmp.js';
import { tcpProber } from './tcp.js';
import { httpProber } from './http.js';
import type { Prober } from './types.js';

export interface Probers {
  readonly probers: Partial<Record<ProbeKind, Prober>>;
  close(): void;
}

export async function createProbers(
  settings: HealthSettings,
  log: Log,
  options: { routerAddress?: string; httpPort?: number; tcpPort?: number; icpPort?: number } = {},
): Promise<Probers> {
  const probers: Partial<Record<ProbeKind, Prober>> = {};
  let close = (): void => {};
  if (settings.icp.enabled) {
    probers.icp = icpProber({
      ...(options.routerAddress !== undefined ? { requesterAddress: options.routerAddress } : {}),
      ...(options.icpPort !== undefined ? { port: options.icpPort } : {}),
    });
  }
  if (settings.http.enabled) probers.http = httpProber(options.httpPort);
  if (settings.tcp.enabled) probers.tcp = tcpProber(options.tcpPort);
  if (settings.icmp.enabled) {
    const icmp = await openIcmpProber();
    if (icmp.ok) {
      probers.icmp = icmp.prober.probe;
      close = () => icmp.prober.close();
    } else {
      log.warn({ probe: 'icmp', reason: icmp.reason }, `ICMP health probes disabled: ${icmp.reason}`);
    }
  }
  return { probers, close };
}
