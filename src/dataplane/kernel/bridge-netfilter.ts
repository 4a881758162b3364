// br_netfilter: where the module is loaded (Docker loads it) and net.bridge.bridge-nf-call-iptables is 1, frames the
// gateway bridges also run the IP hooks, so wccpd's nft chains (and the userland guard) see packets that are not
// routed through the gateway and miss or mis-count what is (seen in the lab: no connection counted in any bucket).
// wccpd cannot unload the module, and the hardened unit makes /proc/sys read-only: it detects the case and says what
// to set (docs/operations.md). Only bridges in the data plane's path count: a client interface that is a bridge, or
// a bridge whose IPv4 network holds an engine.
import { readFile } from 'node:fs/promises';
import { createExec, type Exec } from './exec.js';
import type { Log } from '../../log.js';
import type { BridgeNetfilterState } from '../views.js';

export type { BridgeNetfilterState } from '../views.js';
import { cidrContains, ipv4ToNumber, numberToIpv4, parseCidr } from '../../address.js';

export const BRIDGE_NF_SYSCTL = 'net.bridge.bridge-nf-call-iptables';
const SYSCTL_PATH = `/proc/sys/${BRIDGE_NF_SYSCTL.replaceAll('.', '/')}`;

export interface BridgeNetfilterInputs {
  readonly exec: Exec;
  readonly clientInterfaces: readonly string[];
  readonly engines: readonly string[];
  /** The sysctl's value, or null when it does not exist (br_netfilter not loaded); replaced in tests. */
  readonly readSysctl?: () => Promise<string | null>;
}

async function readSysctlFile(): Promise<string | null> {
  try {
    return (await readFile(SYSCTL_PATH, 'utf8')).trim();
  } catch {
    return null;
  }
}

interface AddrJson {
  ifname?: string;
  addr_info?: { family?: string; local?: string; prefixlen?: number }[];
}

/** Does the network of an interface address (`local`/`prefixlen`) hold `address`? */
function inNetwork(address: string, local: string, prefixlen: number): boolean {
  const n = ipv4ToNumber(local);
  if (n === null || prefixlen < 0 || prefixlen > 32) return false;
  const mask = prefixlen === 0 ? 0 : (0xffffffff << (32 - prefixlen)) >>> 0;
  const cidr = parseCidr(`${numberToIpv4((n & mask) >>> 0)}/${prefixlen}`);
  return typeof cidr !== 'string' && cidrContains(cidr, address);
}

/** Reads the sysctl, and only when it is on, the bridges (`ip -j -4 addr show type bridge`: one process). */
export async function checkBridgeNetfilter(inputs: BridgeNetfilterInputs): Promise<BridgeNetfilterState> {
  const value = await (inputs.readSysctl ?? readSysctlFile)();
  if (value === null || value !== '1') {
    return { loaded: value !== null, callIptables: false, bridges: [], active: false };
  }
  const bridges = JSON.parse(
    (await inputs.exec('ip', ['-j', '-4', 'addr', 'show', 'type', 'bridge'])) || '[]',
  ) as AddrJson[];
  const inPath = new Set<string>();
  for (const b of bridges) {
    if (b.ifname === undefined) continue;
    if (inputs.clientInterfaces.includes(b.ifname)) inPath.add(b.ifname);
    for (const a of b.addr_info ?? []) {
      if (a.local === undefined || a.prefixlen === undefined) continue;
      const { local, prefixlen } = a;
      if (inputs.engines.some((e) => inNetwork(e, local, prefixlen))) inPath.add(b.ifname);
    }
  }
  const sorted = [...inPath].sort();
  return { loaded: true, callIptables: true, bridges: sorted, active: sorted.length > 0 };
}

/** The one warning line: what is wrong and the fix. */
export function bridgeNetfilterWarning(s: BridgeNetfilterState): string {
  return (
    `br_netfilter is loaded and ${BRIDGE_NF_SYSCTL}=1, so frames bridged on ${s.bridges.join(', ')} also run ` +
    "the IP hooks and wccpd's classification misses or mis-counts the traffic it redirects; set " +
    'net.bridge.bridge-nf-call-iptables=0, net.bridge.bridge-nf-call-ip6tables=0 and ' +
    'net.bridge.bridge-nf-call-arptables=0 (in /etc/sysctl.d/, docs/operations.md), or keep the engines off a bridge'
  );
}

/** The check, given what is in the data plane's path (tests replace it). */
export type CheckBridgeNetfilter = (inputs: {
  clientInterfaces: readonly string[];
  engines: readonly string[];
}) => Promise<BridgeNetfilterState>;

/**
 * One warning line when bridged frames start to reach our hooks (or reach them on other bridges), one line when they
 * stop; the last state for status and /metrics.
 */
export class BridgeNetfilterWatch {
  private last: BridgeNetfilterState | null = null;
  private readonly check: CheckBridgeNetfilter;

  constructor(private readonly options: { readonly log: Log; readonly check?: CheckBridgeNetfilter | undefined }) {
    const exec = createExec();
    this.check = options.check ?? ((i) => checkBridgeNetfilter({ ...i, exec }));
  }

  state(): BridgeNetfilterState | null {
    return this.last;
  }

  async look(inputs: { clientInterfaces: readonly string[]; engines: readonly string[] }): Promise<void> {
    const { log } = this.options;
    let now: BridgeNetfilterState;
    try {
      now = await this.check(inputs);
    } catch (err) {
      log.debug({ err: err instanceof Error ? err.message : String(err) }, 'br_netfilter check failed');
      return;
    }
    const before = this.last;
    this.last = now;
    if (now.active && (before?.active !== true || before.bridges.join() !== now.bridges.join())) {
      log.warn(
        { event: 'bridge-netfilter', bridges: now.bridges, sysctl: BRIDGE_NF_SYSCTL },
        bridgeNetfilterWarning(now),
      );
    } else if (!now.active && before?.active === true) {
      log.info(
        { event: 'bridge-netfilter', bridges: [] },
        'br_netfilter no longer sends bridged frames through the IP hooks',
      );
    }
  }
}
