// `dataplane.conntrack`: the config key, the untrack chain's rules, and the check for other tables that need
// conntrack on every packet. The kernel's side is in untrack.kernel.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, parseConfig } from '../../../src/config/index.js';
import { tablesUsingConntrack } from '../../../src/dataplane/kernel/conntrack-users.js';
import { baseRuleset, untrackRules } from '../../../src/dataplane/nft/ruleset.js';

const config = (dataplane: string): string => `
router: { address: 192.0.2.1 }
dataplane: ${dataplane}
services:
  - id: 0
    engines: { allow: [192.0.2.0/24] }
    clientInterfaces: [c0]
`;

describe('dataplane.conntrack', () => {
  it('is all by default, services when asked, and refused with a backend other than nft', () => {
    assert.equal(parseConfig(config('{ backend: nft }'), 't.yaml').dataplane.conntrack, 'all');
    assert.equal(parseConfig(config('{ conntrack: services }'), 't.yaml').dataplane.conntrack, 'services');
    for (const [text, want] of [
      ['{ backend: userland, conntrack: services }', /applies to the nft backend only \(backend is userland\)/],
      ['{ conntrack: some }', /all|services/],
    ] as const) {
      assert.throws(
        () => parseConfig(config(text), 't.yaml'),
        (e: unknown) =>
          e instanceof ConfigError && e.problems.some((p) => p.key === 'dataplane.conntrack' && want.test(p.message)),
        text,
      );
    }
  });

  it("keeps a service's protocol and ports tracked both ways, and the gateway's own traffic; the rest is notrack", () => {
    const rules = untrackRules([
      { protocol: 6, ports: [80, 3128] },
      { protocol: 17, ports: [53] },
      { protocol: 6, ports: [80] },
      { protocol: 47, ports: [] },
    ]);
    assert.deepEqual(rules, [
      'flush chain inet wccpd untrack',
      'add rule inet wccpd untrack meta l4proto . th dport { tcp . 3128, tcp . 80, udp . 53 } return',
      'add rule inet wccpd untrack meta l4proto . th sport { tcp . 3128, tcp . 80, udp . 53 } return',
      'add rule inet wccpd untrack meta l4proto { 47 } return',
      'add rule inet wccpd untrack fib daddr type { local, broadcast, multicast } return',
      'add rule inet wccpd untrack notrack',
    ]);
    // A TCP service with no ports keeps all of TCP tracked.
    assert.ok(
      untrackRules([{ protocol: 6, ports: [] }]).includes('add rule inet wccpd untrack meta l4proto { tcp } return'),
    );
    // The chain sits before conntrack, and only when asked for.
    assert.match(
      baseRuleset({ untrack: true }),
      /add chain inet wccpd untrack \{ type filter hook prerouting priority raw;/,
    );
    assert.doesNotMatch(baseRuleset(), /untrack/);
  });

  it('names the tables that NAT or match on state, and not ours or stateless ones', () => {
    const ruleset = [
      'table inet wccpd {',
      '\tchain svc_0 {',
      '\t\tct state new jump classify_0',
      '\t}',
      '}',
      'table ip nat {',
      '\tchain POSTROUTING {',
      '\t\ttype nat hook postrouting priority srcnat; policy accept;',
      '\t\toifname "eth0" masquerade',
      '\t}',
      '}',
      'table inet filter {',
      '\tchain forward {',
      '\t\ttype filter hook forward priority filter; policy drop;',
      '\t\tct state established,related accept',
      '\t}',
      '}',
      'table ip stateless {',
      '\tchain input {',
      '\t\ttype filter hook input priority filter; policy accept;',
      '\t\ttcp dport 22 accept',
      '\t}',
      '}',
      'table ip filter {',
      '\tchain FORWARD {',
      '\t\ttype filter hook forward priority filter; policy accept;',
      '\t\tmeta l4proto tcp xt match "conntrack" counter accept',
      '\t}',
      '}',
      'table inet wccpd_closed {',
      '\tchain refuse {',
      '\t\tct state new reject',
      '\t}',
      '}',
    ].join('\n');
    assert.deepEqual(tablesUsingConntrack(ruleset), ['ip nat', 'inet filter', 'ip filter']);
    assert.deepEqual(tablesUsingConntrack(''), []);
  });
});
