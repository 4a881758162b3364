// What the ingress backend holds in its table, as its last transaction left it: the services applied, their engine
// slots and where each sends its packets, the slots whose flows are reset, each service's flow key, mask maps, claims
// and moved buckets, what was written of it, and the base chain. The apply path (commit.ts) changes it after the
// kernel took a change; the checks (engine-watch.ts, table-repair.ts) hold the kernel against it.
import { randomInt } from 'node:crypto';
import { slotKeyText } from '../kernel/engine-slots.js';
import { claimChain, classifyChain, hashChain, hashChain6, serviceChain, slotChain } from '../kernel/rules.js';
import type { ServiceRedirect } from '../redirector.js';
import type { EngineAddress } from '../../buckets/table.js';
import type { BucketMove } from './moves.js';
import {
  DIRECT_CHAIN,
  GONE_CHAIN,
  familyName,
  hookChain,
  refusedChain,
  tcpChains,
  unassignedChain,
  type FlowKeyKind,
} from './names.js';
import type { IngressSlot, IngressWritten } from './service-objects.js';

export const slotKey = (serviceId: number, engine: EngineAddress): string =>
  slotKeyText({ serviceId, engine, forwarding: 'l2' });

export class IngressBook {
  services = new Map<number, ServiceRedirect>();
  /** slotKeyText -> slot, as in force. */
  slots = new Map<string, number>();
  /** Each live slot's engine and interface. */
  targets = new Map<number, IngressSlot>();
  /** Slots whose @slots entry is `goto gone`: their flows are reset until the number is placed again. */
  gone = new Set<number>();
  /** Per service in the kernel: its flow key and mask maps. */
  flowKinds = new Map<number, FlowKeyKind>();
  maskMaps = new Map<number, number[]>();
  /** The base chain in force (its number and devices), null: none. */
  hook: { chain: number; devices: string } | null = null;
  hookSerial = 0;
  /** The claims in force, per bucket; the buckets that moved (nextMoves), of the recordsMovedOnly services alone. */
  claims = new Map<number, number[]>();
  moves = new Map<number, Map<number, BucketMove>>();
  /** What the last transaction wrote of each service: the next one writes only what differs. */
  written = new Map<number, IngressWritten>();
  /** IPv6 (docs/dataplane/ingress.md, "IPv6"): the services with IPv6 objects (their flow key) and what was written. */
  flowKinds6 = new Map<number, FlowKeyKind>();
  written6 = new Map<number, IngressWritten>();
  /**
   * The slots with IPv6 chains (their services redirect IPv6) -> their slot chain's rule as written (a new MAC address
   * of the engine or its device rewrites it); the slots whose @slots6 entry is `goto gone`.
   */
  slots6 = new Map<number, string>();
  gone6 = new Set<number>();
  /** The static part of IPv6 (ingress6Statics) is in the table. */
  statics6 = false;
  /** The seed of the IPv6 flow keys' hash (names.ts, flowKey): one per run, unknown outside it. */
  readonly keySeed6 = randomInt(1, 2 ** 32 - 1);

  /** Nothing of ours in the table (a new one, or none). */
  reset(): void {
    this.services = new Map();
    this.slots = new Map();
    this.targets = new Map();
    this.gone = new Set();
    this.flowKinds = new Map();
    this.maskMaps = new Map();
    this.claims = new Map();
    this.moves = new Map();
    this.written = new Map();
    this.flowKinds6 = new Map();
    this.written6 = new Map();
    this.slots6 = new Map();
    this.gone6 = new Set();
    this.statics6 = false;
    this.hook = null;
  }

  /** The chains our state says are in the kernel. */
  expectedChains(): string[] {
    const out = [hashChain('daddr'), hashChain('saddr'), GONE_CHAIN, DIRECT_CHAIN];
    if (this.hook !== null) out.push(hookChain(this.hook.chain));
    for (const id of this.services.keys()) {
      out.push(serviceChain(id), classifyChain(id), unassignedChain(id), refusedChain(id));
      if (this.flowKinds.get(id) === 'tcp') out.push(...tcpChains(id));
    }
    for (const slot of this.targets.keys()) out.push(claimChain(slot), slotChain(slot));
    const v6 = (name: string): string => familyName('ipv6', name);
    if (this.statics6) out.push(hashChain6('daddr'), hashChain6('saddr'));
    for (const [id, kind] of this.flowKinds6) {
      out.push(...[serviceChain(id), classifyChain(id), unassignedChain(id), refusedChain(id)].map(v6));
      if (kind === 'tcp') out.push(...tcpChains(id).map(v6));
    }
    for (const slot of this.slots6.keys()) out.push(v6(claimChain(slot)), v6(slotChain(slot)));
    return out;
  }
}
