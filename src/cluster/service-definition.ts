// Service definition negotiation (draft 4.2, 5.6.2): a standard service is known by its id alone; a dynamic one
// (51-255) is defined by the config, or else by the first engine's Service Info, and every later HERE_I_AM must
// describe it the same way. An engine that describes another service is refused with both descriptions.
import { IP_PROTOCOL, isDynamicService, ServiceFlag, WEB_CACHE_PRIORITY } from '../vocabulary.js';
import type { ServiceDefinition, ServiceGroupConfig } from './types.js';

/** The definition a standard service means (the wire carries only its id): web-cache, TCP port 80. */
function standardDefinition(id: number): ServiceDefinition {
  return {
    type: 'standard',
    id,
    priority: WEB_CACHE_PRIORITY,
    protocol: IP_PROTOCOL.tcp,
    flags: ServiceFlag.DST_IP_HASH | ServiceFlag.PORTS_DEFINED,
    ports: [80],
  };
}

function sameDefinition(a: ServiceDefinition, b: ServiceDefinition): boolean {
  return (
    a.type === b.type &&
    a.id === b.id &&
    a.priority === b.priority &&
    a.protocol === b.protocol &&
    a.flags === b.flags &&
    a.ports.length === b.ports.length &&
    a.ports.every((p, i) => p === b.ports[i])
  );
}

function describeDefinition(d: ServiceDefinition): string {
  const source = (d.flags & ServiceFlag.PORTS_SOURCE) !== 0 ? 'source ' : '';
  return `${d.type} ${d.id} protocol ${d.protocol} ${source}ports [${d.ports.join(',')}] flags 0x${d.flags.toString(16)} priority ${d.priority}`;
}

/** One service group's definition: what the config fixes, and what the engines have agreed on so far. */
export class ServiceDefinitionBook {
  private agreed: ServiceDefinition | null;

  constructor(private readonly config: Pick<ServiceGroupConfig, 'id' | 'definition' | 'expect'>) {
    this.agreed = this.configured();
  }

  /** The definition in force; null while a dynamic service waits for its first engine. */
  get current(): ServiceDefinition | null {
    return this.agreed;
  }

  private configured(): ServiceDefinition | null {
    const { id, definition } = this.config;
    if (!isDynamicService(id)) return standardDefinition(id);
    return definition ? { type: 'dynamic', id, ...definition } : null;
  }

  /**
   * null when a HERE_I_AM's Service Info fits this group (defining a dynamic service if it is the first: `defined`
   * says so), else why it does not.
   */
  check(seen: ServiceDefinition): { refused: string } | { refused: null; defined: boolean } {
    const id = this.config.id;
    if (!isDynamicService(id)) {
      return seen.type === 'standard'
        ? { refused: null, defined: false }
        : { refused: `service ${id} is a standard service here; engine described it as ${describeDefinition(seen)}` };
    }
    if (seen.type !== 'dynamic') return { refused: `service ${id} is dynamic here; engine described it as standard` };
    const expect = this.config.expect;
    const samePorts = (a: readonly number[], b: readonly number[]) =>
      [...a].sort().join(',') === [...b].sort().join(',');
    const seenSource = (seen.flags & ServiceFlag.PORTS_SOURCE) !== 0;
    if (
      expect &&
      (seen.protocol !== expect.protocol ||
        !samePorts(seen.ports, expect.ports) ||
        seenSource !== expect.portsSource ||
        (expect.priority !== undefined && seen.priority !== expect.priority))
    ) {
      return {
        refused:
          `service ${id} is configured as protocol ${expect.protocol} ` +
          `${expect.portsSource ? 'source ' : ''}ports [${expect.ports.join(',')}]` +
          `${expect.priority !== undefined ? ` priority ${expect.priority}` : ''}; ` +
          `engine described it as ${describeDefinition(seen)}`,
      };
    }
    if (this.agreed === null) {
      this.agreed = { ...seen, ports: [...seen.ports] };
      return { refused: null, defined: true };
    }
    return sameDefinition(this.agreed, seen)
      ? { refused: null, defined: false }
      : {
          refused: `conflicting definition of service ${id}: have ${describeDefinition(this.agreed)}, engine sent ${describeDefinition(seen)}`,
        };
  }

  /** The group has no engine left: a dynamic service the config does not define waits for a new first engine. */
  forgetEngines(): void {
    if (isDynamicService(this.config.id) && !this.config.definition) this.agreed = null;
  }

  /** The wire Service Info for our messages: a standard service carries only its id (draft 5.6.2). */
  wire(): ServiceDefinition {
    const id = this.config.id;
    if (!isDynamicService(id)) return { type: 'standard', id, priority: 0, protocol: 0, flags: 0, ports: [] };
    return this.agreed ?? { type: 'dynamic', id, priority: 0, protocol: 0, flags: 0, ports: [] };
  }
}
