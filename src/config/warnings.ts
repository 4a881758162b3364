// Settings that are valid but risky, and keys still read in a deprecated form: `wccpd check-config` prints them and the
// daemon logs each at warn when it starts.
import type { ConfigProblem } from './config-error.js';
import type { Config } from './types.js';

export function configWarnings(config: Config): ConfigProblem[] {
  const out: ConfigProblem[] = [];
  config.services.forEach((s, i) => {
    const all = s.engines.allow.find((c) => c.prefixLength === 0);
    if (all !== undefined) {
      out.push({
        key: `services[${i}].engines.allow`,
        message:
          `${all.text} allows every address: any host that can reach UDP ${config.router.port} may register as an engine` +
          ` of service ${s.id}${s.password === null ? ' (and the service has no password)' : ''}`,
      });
    }
  });
  out.push(...config.deprecated);
  return out;
}
