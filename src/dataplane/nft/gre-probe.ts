// Does this kernel have GRE tunnel devices (ip_gre)? Asked in ways the hardened unit allows (no new network namespace,
// read-only /run, no module loading of our own):
//   1. /sys/module/ip_gre exists: the module is loaded, or built in (it has a parameter, so it shows there either way);
//   2. otherwise create the probe device `wccpd-gre0` in the gateway's own namespace and delete it at once. The kernel
//      loads a modular ip_gre on demand for that if it may; the device is recorded before it is created, like every
//      object of ours, so a crash between the two steps leaves nothing the next start or wccpd-cleanup would miss.
import { access } from 'node:fs/promises';
import { greDevice } from '../kernel/names.js';
import type { Exec } from '../kernel/exec.js';
import type { OwnershipRecord } from '../kernel/ownership.js';

export const GRE_PROBE_DEVICE = greDevice(0);

export interface GreProbeOptions {
  /** Replaces the check for /sys/module/ip_gre (tests). */
  readonly moduleLoaded?: () => Promise<boolean>;
}

async function sysModuleHasIpGre(): Promise<boolean> {
  try {
    await access('/sys/module/ip_gre');
    return true;
  } catch {
    return false;
  }
}

export async function kernelHasIpGre(
  exec: Exec,
  record: OwnershipRecord,
  options: GreProbeOptions = {},
): Promise<boolean> {
  if (await (options.moduleLoaded ?? sysModuleHasIpGre)()) return true;
  const probe = { kind: 'link', name: GRE_PROBE_DEVICE } as const;
  await record.add([probe]);
  try {
    await exec('ip', ['link', 'add', GRE_PROBE_DEVICE, 'type', 'gre', 'remote', '192.0.2.1', 'local', '192.0.2.2']);
    await exec('ip', ['link', 'del', GRE_PROBE_DEVICE]);
    return true;
  } catch {
    return false;
  } finally {
    await exec('ip', ['link', 'del', GRE_PROBE_DEVICE]).catch(() => undefined);
    await record.remove([probe]);
  }
}
