// Capabilities Info (draft 5.6.9): Capability Elements (5.7.5) of type, length and value; the methods (forwarding,
// assignment, return) and v2r1's timers as numbers, any other element kept as its bytes.
import type { Reader } from '../bytes.js';
import { CapabilityType, ComponentType } from '../constants.js';
import { capabilityText } from '../text.js';
import type { CapabilitiesInfo, CapabilityElement } from '../types.js';
import type { ComponentDefs } from './definition.js';

function capabilities(r: Reader): CapabilitiesInfo {
  const elements: CapabilityElement[] = [];
  while (r.remaining > 0) {
    const type = r.u16('Capability Type');
    const length = r.u16('Capability Length');
    if (type >= CapabilityType.FORWARDING_METHOD && type <= CapabilityType.TIMER_SCALE && length === 4) {
      elements.push({ form: 'value', type, value: r.u32('Capability Value') });
    } else {
      elements.push({ form: 'raw', type, data: r.hex(length, 'Capability Value') });
    }
  }
  return { kind: 'capabilities', elements };
}

export const CAPABILITY_COMPONENTS: ComponentDefs<'capabilities'> = {
  capabilities: {
    type: ComponentType.CAPABILITY_INFO,
    decode: capabilities,
    encode(c, w) {
      for (const e of c.elements) {
        w.u16(e.type, 'Capability Type');
        if (e.form === 'value') {
          w.u16(4, 'Capability Length');
          w.u32(e.value, 'Capability Value');
        } else {
          const data = Buffer.from(e.data, 'hex');
          w.u16(data.length, 'Capability Length');
          w.hex(e.data, 'Capability Value');
        }
      }
    },
    describe: (c) => [c.elements.map(capabilityText).join(' ')],
  },
};
