// docs/squid.md shows what the lab's Squid engines run: each `squid`, `nft` and `sh` block equals the squid.conf lines,
// the engine's nft ruleset or the engine's TPROXY routing that test/lab renders for a test, byte for byte, and every
// one of those is shown. No root needed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  intercept6Ruleset,
  interceptRuleset,
  ROUTER_ADDRESS,
  TPROXY_ROUTING,
  TPROXY_SYSCTLS,
  tproxyRuleset,
} from './lab.js';
import { renderSquidConf, siblingLines, TPROXY_SERVICES, type SquidOptions } from './squid.js';

const DOC = readFileSync(fileURLToPath(new URL('../../docs/squid.md', import.meta.url)), 'utf8');
const shown = [...DOC.matchAll(/^```(squid|nft|sh)\n([\s\S]*?)^```$/gm)].map((m) => m[2] ?? '');

/** The port and WCCP lines of the squid.conf the lab renders (the rest is the lab's own: logs, cache, pid). */
function wccpLines(opts: SquidOptions): string {
  const conf = renderSquidConf('engine1', '/var/spool/squid', opts, ROUTER_ADDRESS);
  return `${conf
    .split('\n')
    .filter((l) => /^(http_port|wccp2_)/.test(l))
    .join('\n')}\n`;
}

const TESTED: readonly (readonly [string, string])[] = [
  ['L2 + hash squid.conf (test/e2e, test/lab)', wccpLines({})],
  ['the intercept nft ruleset', interceptRuleset()],
  ['the IPv6 intercept nft ruleset (test/lab/dual-stack.test.ts)', intercept6Ruleset()],
  ['mask squid.conf (test/lab/mask.test.ts)', wccpLines({ assignment: 'mask' })],
  ['TPROXY squid.conf (test/e2e/tproxy.test.ts)', wccpLines({ interception: 'tproxy', wccpServices: TPROXY_SERVICES })],
  ['the TPROXY nft ruleset', tproxyRuleset()],
  [
    'the TPROXY sysctls and routing',
    `sysctl -q -w ${TPROXY_SYSCTLS.join(' ')}\n${TPROXY_ROUTING.map((l) => `ip ${l}`).join('\n')}\n`,
  ],
  ['the warm-up sibling lines (test/lab/warmup.test.ts)', `${siblingLines(ROUTER_ADDRESS)}\n`],
];

for (const [what, text] of TESTED) {
  test(`docs/squid.md shows the tested ${what}`, () => {
    assert.ok(shown.includes(text), `no squid/nft/sh block of docs/squid.md equals the tested ${what}:\n${text}`);
  });
}

test('docs/squid.md shows no squid, nft or sh block that no lab test runs', () => {
  const tested = TESTED.map(([, t]) => t);
  assert.deepEqual(
    shown.filter((b) => !tested.includes(b)),
    [],
  );
  assert.equal(shown.length, TESTED.length);
});

test('docs/squid.md states the GRE-default trap first', () => {
  const first = /^## (.*)$/m.exec(DOC)?.[1] ?? '';
  assert.match(first, /Squid defaults to GRE, wccpd to L2/);
  assert.match(DOC, /wccp2_forwarding_method l2", "wccp2_return_method l2"/);
});
