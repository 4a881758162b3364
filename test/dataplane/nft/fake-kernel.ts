// A fake kernel for the nft backend's unit tests: it applies the ip batches' rule and route lines, and keeps every
// command and nft transaction.
import { DataplaneError } from '../../../src/dataplane/index.js';
import type { Exec } from '../../../src/dataplane/kernel/exec.js';
import { fakeRouteGets } from '../service-fixture.js';

/** A fake kernel that applies the ip batches' rule and route lines, and keeps every command and nft transaction. */
export function fakeKernel() {
  const rules = new Set<string>();
  const routes = new Map<string, string>();
  const ip: string[] = [];
  const nft: string[] = [];
  const exec: Exec = (cmd, args, input) => {
    if (cmd === 'nft' && args[0] === 'list') return Promise.reject(new DataplaneError('command-failed', 'no table'));
    if (cmd === 'nft') {
      if (args[0] === '-f') nft.push(input ?? '');
      return Promise.resolve('');
    }
    ip.push(`${args.join(' ')}\n${input ?? ''}`);
    if (args.includes('-batch')) {
      for (const l of (input ?? '').split('\n')) {
        let m;
        if ((m = /^rule add (.*)$/.exec(l))) rules.add(m[1] ?? '');
        else if ((m = /^rule del (.*)$/.exec(l))) rules.delete(m[1] ?? '');
        else if ((m = /^route replace default (.*) table (\d+)$/.exec(l))) routes.set(m[2] ?? '', m[1] ?? '');
        else if ((m = /^route del default table (\d+)$/.exec(l))) routes.delete(m[1] ?? '');
      }
      return Promise.resolve(fakeRouteGets(input));
    }
    if (args.includes('-j')) return Promise.resolve('[]');
    return Promise.resolve('');
  };
  return { exec, rules, routes, ip, nft };
}
