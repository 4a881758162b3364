// What check-config and the daemon look up on this host to warn about a config that would silently do nothing.
import { readdir } from 'node:fs/promises';

/** The network interfaces of this host's network namespace, or null when /sys/class/net cannot be read. */
export async function hostInterfaces(dir = '/sys/class/net'): Promise<ReadonlySet<string> | null> {
  try {
    return new Set(await readdir(dir));
  } catch {
    return null;
  }
}
