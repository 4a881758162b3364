// The WCCP socket as the kernel sees it. Its receive buffer: a flood of datagrams (bench/soak/hostile.ts) overflowed
// the 212 KB default and the kernel dropped ~9% of them, legitimate HERE_I_AMs among them, where wccpd never sees
// them. Its drops: /proc/net/udp counts them per socket (this network namespace), the one place they show.
import { readFileSync } from 'node:fs';
import { endianness } from 'node:os';

/**
 * The receive buffer the router asks for (SO_RCVBUF), twenty times the usual default. Capped by the sysctl
 * net.core.rmem_max (212,992 on many distributions): wccpd warns at start then.
 */
export const WCCP_RECEIVE_BUFFER_BYTES = 4 * 1024 * 1024;

export const RMEM_MAX_FILE = '/proc/sys/net/core/rmem_max';

/** net.core.rmem_max, or null where it cannot be read. */
export function rmemMax(): number | null {
  try {
    const n = Number(readFileSync(RMEM_MAX_FILE, 'utf8').trim());
    return Number.isSafeInteger(n) ? n : null;
  } catch {
    return null;
  }
}

/** An IPv4 address and port as /proc/net/udp's local_address shows them: the raw 32 bits in host order, in hex. */
function procLocalAddress(address: string, port: number): string {
  const o = address.split('.').map(Number);
  if (endianness() === 'LE') o.reverse();
  const hex = (n: number, width: number) => n.toString(16).toUpperCase().padStart(width, '0');
  return `${o.map((b) => hex(b, 2)).join('')}:${hex(port, 4)}`;
}

/** The `drops` column of the socket bound to address:port in a /proc/net/udp text, or null when none is listed. */
export function udpDropsIn(procNetUdp: string, address: string, port: number): number | null {
  const local = procLocalAddress(address, port);
  for (const line of procNetUdp.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
    if (f[1] === local && f.length >= 13) {
      const n = Number(f[12]);
      return Number.isSafeInteger(n) ? n : null;
    }
  }
  return null;
}

export const PROC_NET_UDP = '/proc/net/udp';

/**
 * The kernel's drops for the UDP socket bound to address:port: a number, or why there is none (the file cannot be
 * read, or does not list the socket).
 */
export function udpDrops(address: string, port: number, file = PROC_NET_UDP): number | { readonly unknown: string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    return { unknown: `${file}: ${(e as Error).message}` };
  }
  return udpDropsIn(text, address, port) ?? { unknown: `${file} does not list a socket bound to ${address}:${port}` };
}
