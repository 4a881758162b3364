// A fake kernel for the nft backend's unit tests: it applies the ip batches' rule and route lines, and keeps every
// command and nft transaction.
import { DataplaneError } from '../../../src/dataplane/index.js';
import type { Exec } from '../../../src/dataplane/kernel/exec.js';
import { fakeRouteGets } from '../service-fixture.js';

/**
 * A fake kernel that applies the ip batches' rule and route lines (`ip -6`'s apart), and keeps every command and nft
 * transaction. Its neighbour table holds each of `engines` in both families: the i-th with MAC 02:00:00:00:00:<11+i>
 * and IPv6 address 2001:db8:e::<11+i>.
 */
export function fakeKernel(engines: readonly string[] = []) {
  const rules = new Set<string>();
  const routes = new Map<string, string>();
  const rules6 = new Set<string>();
  const routes6 = new Map<string, string>();
  const ip: string[] = [];
  const nft: string[] = [];
  const exec: Exec = (cmd, args, input) => {
    if (cmd === 'nft' && args[0] === 'list') return Promise.reject(new DataplaneError('command-failed', 'no table'));
    if (cmd === 'nft') {
      if (args[0] === '-f') nft.push(input ?? '');
      return Promise.resolve('');
    }
    ip.push(`${args.join(' ')}\n${input ?? ''}`);
    if (args.includes('-batch') && args.includes('-6')) {
      applyLines(input, rules6, routes6);
      return Promise.resolve('');
    }
    if (args.includes('-batch') && /^neigh show$/m.test(input ?? '')) {
      const mac = (i: number): string => `02:00:00:00:00:${(0x11 + i).toString(16)}`;
      const neighbours = engines.flatMap((e, i) => [
        { dst: e, dev: 'br0', lladdr: mac(i), state: ['REACHABLE'] },
        { dst: `2001:db8:e::${11 + i}`, dev: 'br0', lladdr: mac(i), state: ['STALE'] },
      ]);
      return Promise.resolve(`${JSON.stringify(neighbours)}\n${fakeRouteGets(input)}`);
    }
    if (args.includes('-batch')) {
      applyLines(input, rules, routes);
      return Promise.resolve(fakeRouteGets(input));
    }
    if (args.includes('-j')) return Promise.resolve('[]');
    return Promise.resolve('');
  };
  return { exec, rules, routes, rules6, routes6, ip, nft };
}

/** An ip batch's rule and route lines, applied to one family's rules and routes. */
function applyLines(input: string | undefined, rules: Set<string>, routes: Map<string, string>): void {
  for (const l of (input ?? '').split('\n')) {
    let m;
    if ((m = /^rule add (.*)$/.exec(l))) rules.add(m[1] ?? '');
    else if ((m = /^rule del (.*)$/.exec(l))) rules.delete(m[1] ?? '');
    else if ((m = /^route replace default (.*) table (\d+)$/.exec(l))) routes.set(m[2] ?? '', m[1] ?? '');
    else if ((m = /^route del default table (\d+)$/.exec(l))) routes.delete(m[1] ?? '');
  }
}
