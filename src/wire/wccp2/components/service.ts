// Security Info (draft 5.6.1) and Service Info (5.6.2): what every message opens with, who may speak (MD5 or none)
// and the service group it is about.
import { fail, Wccp2EncodeError, type Reader } from '../bytes.js';
import { ComponentType, MD5_DIGEST_LENGTH, SecurityOption, ServiceType } from '../constants.js';
import { serviceFlagsText } from '../text.js';
import type { SecurityInfo, ServiceInfo } from '../types.js';
import type { ComponentDefs } from './definition.js';

function security(r: Reader): SecurityInfo {
  const at = r.pos;
  const option = r.u32('Security Option');
  if (option === SecurityOption.NONE && r.remaining === 0) return { kind: 'security', option: 'none' };
  if (option === SecurityOption.MD5 && r.remaining === MD5_DIGEST_LENGTH) {
    return { kind: 'security', option: 'md5', digest: r.hex(MD5_DIGEST_LENGTH, 'MD5 digest') };
  }
  return fail(
    r.where,
    at,
    'bad-security',
    `security option ${option} with a ${r.remaining + 4}-byte body; expected option 0 (4 bytes) or 1 (MD5, 20 bytes)`,
  );
}

function service(r: Reader): ServiceInfo {
  const at = r.pos;
  const t = r.u8('Service Type');
  if (t !== ServiceType.STANDARD && t !== ServiceType.DYNAMIC) {
    fail(r.where, at, 'bad-service-type', `service type ${t}; expected 0 (standard) or 1 (dynamic)`);
  }
  const serviceId = r.u8('Service ID');
  const priority = r.u8('Priority');
  const protocol = r.u8('Protocol');
  const flags = r.u32('Service Flags');
  const ports: number[] = [];
  for (let i = 0; i < 8; i++) ports.push(r.u16(`Port ${i}`));
  return {
    kind: 'service',
    serviceType: t === ServiceType.STANDARD ? 'standard' : 'dynamic',
    serviceId,
    priority,
    protocol,
    flags,
    ports,
  };
}

export const SERVICE_COMPONENTS: ComponentDefs<'security' | 'service'> = {
  security: {
    type: ComponentType.SECURITY_INFO,
    decode: security,
    encode(c, w) {
      if (c.option === 'none') {
        w.u32(SecurityOption.NONE, 'Security Option');
      } else {
        w.u32(SecurityOption.MD5, 'Security Option');
        w.hex(c.digest, 'MD5 digest', MD5_DIGEST_LENGTH);
      }
    },
    describe: (c) => [c.option === 'none' ? 'option=0 (none)' : `option=1 (MD5) digest=${c.digest}`],
  },
  service: {
    type: ComponentType.SERVICE_INFO,
    decode: service,
    encode(c, w) {
      w.u8(c.serviceType === 'standard' ? ServiceType.STANDARD : ServiceType.DYNAMIC, 'Service Type');
      w.u8(c.serviceId, 'Service ID');
      w.u8(c.priority, 'Priority');
      w.u8(c.protocol, 'Protocol');
      w.u32(c.flags, 'Service Flags');
      if (c.ports.length !== 8) throw new Wccp2EncodeError('Ports', `${c.ports.length} ports, need exactly 8`);
      for (const p of c.ports) w.u16(p, 'Port');
    },
    describe: (c) => [
      `type=${c.serviceType === 'standard' ? 0 : 1} ${c.serviceType}, id=${c.serviceId},` +
        ` priority=${c.priority}, protocol=${c.protocol}, flags=${serviceFlagsText(c.flags)}, ports ${c.ports.join(',')}`,
    ],
  },
};
