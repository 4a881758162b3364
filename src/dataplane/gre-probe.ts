// Does this kernel have GRE tunnel devices (ip_gre)? Tried for real: create a GRE device in a scratch namespace
// (nothing in the caller's namespace changes), then delete the namespace.
import type { Exec } from './nft-exec.js';

export async function kernelHasIpGre(exec: Exec): Promise<boolean> {
  const ns = `wccpd-greprobe-${process.pid}`;
  try {
    await exec('ip', ['netns', 'add', ns]);
  } catch {
    return false;
  }
  try {
    await exec('ip', ['-n', ns, 'link', 'add', 'probe0', 'type', 'gre', 'remote', '192.0.2.1', 'local', '192.0.2.2']);
    return true;
  } catch {
    return false;
  } finally {
    await exec('ip', ['netns', 'del', ns]).catch(() => undefined);
  }
}
