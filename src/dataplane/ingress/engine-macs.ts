// The MAC addresses an IPv6 frame is handed over with (docs/dataplane/ingress.md, "IPv6"): the engine's, from its IPv4
// neighbour entry (ARP: the engine registers over IPv4, so the gateway has answered it), and its device's own, the
// frame's new source. `fwd ip to` resolves the engine itself but takes only IPv4 frames; an engine's MAC is the same
// for both families, so the IPv6 side reads it from the kernel's ARP table (no IPv6 address of the engine is needed).
import type { EngineAddress } from '../../buckets/table.js';
import type { RunBatch } from '../kernel/routes.js';

export interface EngineMacs {
  /** The engine's MAC address; null: no usable neighbour entry (none, incomplete or failed). */
  readonly mac: string | null;
  /** The device's own MAC address; null: it has none (not an Ethernet device). */
  readonly deviceMac: string | null;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
/** A neighbour entry with no usable link-layer address. */
const UNRESOLVED = new Set(['INCOMPLETE', 'FAILED']);

/** The key engineMacs answers by. */
export const macKey = (engine: EngineAddress, device: string): string => `${engine} ${device}`;

/**
 * One `ip -j -batch` of `neigh show to <engine> dev <device>` per engine and `link show dev <device>` per device (ip
 * answers each command with one JSON line, in order): each engine's MAC and its device's, by macKey.
 */
export async function engineMacs(
  batch: RunBatch,
  engines: readonly { readonly engine: EngineAddress; readonly device: string }[],
): Promise<Map<string, EngineMacs>> {
  const out = new Map<string, EngineMacs>();
  if (engines.length === 0) return out;
  const devices = [...new Set(engines.map((e) => e.device))];
  const lines = [
    ...engines.map((e) => `neigh show to ${e.engine} dev ${e.device}`),
    ...devices.map((d) => `link show dev ${d}`),
  ];
  const { out: text, failed } = await batch(lines);
  const answers = text.split('\n').filter((l) => l.startsWith('['));
  // A failed line (a device gone) prints nothing: the answers after it would shift, so nothing is trusted then.
  const trusted = failed.size === 0 && answers.length === lines.length;
  const parse = (i: number): Record<string, unknown>[] => {
    try {
      return trusted ? (JSON.parse(answers[i] ?? '[]') as Record<string, unknown>[]) : [];
    } catch {
      return [];
    }
  };
  const deviceMacs = new Map(
    devices.map((d, i) => {
      const a = parse(engines.length + i)[0]?.address;
      return [d, typeof a === 'string' && MAC.test(a) ? a : null] as const;
    }),
  );
  engines.forEach((e, i) => {
    const entry = parse(i)[0];
    const state = Array.isArray(entry?.state) ? (entry.state as unknown[]) : [];
    const mac = entry?.lladdr;
    out.set(macKey(e.engine, e.device), {
      mac: typeof mac === 'string' && MAC.test(mac) && !state.some((s) => UNRESOLVED.has(String(s))) ? mac : null,
      deviceMac: deviceMacs.get(e.device) ?? null,
    });
  });
  return out;
}
