// What the ingress backend holds in its table, as its last transaction left it: the services applied, their engine
// slots and where each sends its packets, the slots whose flows are reset, each service's flow key, mask maps, claims
// and moved buckets, what was written of it, and the base chain. The apply path (commit.ts) changes it after the
// kernel took a change; the checks (engine-watch.ts, table-repair.ts) hold the kernel against it.
import { slotKeyText } from '../kernel/engine-slots.js';
import { claimChain, classifyChain, hashChain, serviceChain, slotChain } from '../kernel/rules.js';
import type { ServiceRedirect } from '../redirector.js';
import type { EngineAddress } from '../../buckets/table.js';
import type { BucketMove } from './moves.js';
import {
  DIRECT_CHAIN,
  GONE_CHAIN,
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
    return out;
  }
}
