// Settings that are valid but risky or that make the gateway silently do nothing, and keys still read in a deprecated
// form: `wccpd check-config` prints them (`--strict` fails on them) and the daemon logs each at warn when it starts.
import { isAbsolute } from 'node:path';
import type { ConfigProblem } from './config-error.js';
import type { Config } from './types.js';

/** The token examples/wccpd.yaml ships with. */
export const EXAMPLE_TOKEN = 'change-me';

export interface HostFacts {
  /** This host's interface names (hostInterfaces()); null = unknown, no interface is checked. */
  readonly interfaces: ReadonlySet<string> | null;
}

function listNames(names: ReadonlySet<string>): string {
  const sorted = [...names].sort();
  return sorted.length > 8 ? `${sorted.slice(0, 8).join(', ')}, ...` : sorted.join(', ');
}

export function configWarnings(config: Config, host: HostFacts = { interfaces: null }): ConfigProblem[] {
  const out: ConfigProblem[] = [];
  if (config.dataplane.backend === 'none') {
    out.push({
      key: 'dataplane.backend',
      message:
        'none: engines register and buckets are assigned, but no packet is redirected; ' +
        'set nft, ingress or userland on a gateway (docs/performance.md, "Choosing a backend")',
    });
  }
  if (!isAbsolute(config.stateDir)) {
    out.push({
      key: 'stateDir',
      message:
        `${JSON.stringify(config.stateDir)} is relative to the directory wccpd starts in, so a start from ` +
        'elsewhere begins with no bucket table or membership; give an absolute path such as /var/lib/wccpd',
    });
  }
  if (config.admin.token === EXAMPLE_TOKEN) {
    out.push({
      key: config.admin.tokenFile !== null ? 'admin.tokenFile' : 'admin.token',
      message:
        `is the example token ${EXAMPLE_TOKEN}: anyone who has read the example can drain your engines; ` +
        'put a secret of your own in admin.tokenFile',
    });
  }
  const { host: listenHost, port } = config.admin.listen;
  if (!listenHost.startsWith('127.')) {
    out.push({
      key: 'admin.listen',
      message:
        `${listenHost}:${port} is not a loopback address: any host that reaches it reads the cluster's state ` +
        '(reads need no token) and the token crosses the network in clear HTTP; bind 127.0.0.1, or let only ' +
        'trusted hosts reach the port',
    });
  }
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
    const known = host.interfaces;
    if (known === null) return;
    for (const name of s.clientInterfaces.filter((n) => !known.has(n))) {
      out.push({
        key: `services[${i}].clientInterfaces`,
        message:
          `${JSON.stringify(name)} is not an interface on this host (${listNames(known)}): no packet arrives ` +
          `on it, so service ${s.id} redirects nothing from it; check the name with ip link`,
      });
    }
  });
  out.push(...config.deprecated);
  return out;
}
