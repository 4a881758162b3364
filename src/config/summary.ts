// One line per configuration, as `wccpd check-config` prints it: what each service group will do.
import type { Config, ServiceConfig } from './types.js';

export function describeService(s: ServiceConfig): string {
  const what =
    s.type === 'standard'
      ? s.name
      : `${s.protocol} ${s.portsSource ? 'source ' : ''}${s.ports.join(',')}${s.priority === null ? '' : `, priority ${s.priority}`}`;
  return (
    `${s.id}: ${what}, ${s.forwarding}/${s.return}, ${s.assignment}, ${s.authority}, ${s.mode}, fail ${s.failMode}` +
    (s.password === null ? '' : ', md5')
  );
}

export function summarizeConfig(c: Config): string {
  const n = c.services.length;
  return `${n} service${n === 1 ? '' : 's'} (${c.services.map(describeService).join('; ')})`;
}
