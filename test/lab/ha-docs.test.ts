// docs/ha.md shows the files test/lab/ha.test.ts runs with: keepalived.conf, conntrackd.conf and wccpd.yaml of gateway
// a (rendered with Debian's paths) and the notify script, byte for byte. No root needed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { NOTIFY_SCRIPT, renderConntrackdConf, renderKeepalivedConf, renderWccpdConf, type HaPaths } from './ha-lab.js';

const DOC = readFileSync(fileURLToPath(new URL('../../docs/ha.md', import.meta.url)), 'utf8');
const blocks = [...DOC.matchAll(/^```[a-z]*\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? '');
const DEBIAN: HaPaths = {
  notify: '/usr/local/sbin/wccpd-ha-notify',
  conntrackdConf: '/etc/conntrackd/conntrackd.conf',
  conntrackdLog: '/var/log/conntrackd.log',
  conntrackdLock: '/var/lock/conntrack.lock',
  conntrackdSocket: '/var/run/conntrackd.ctl',
};

for (const [what, text] of [
  ['keepalived.conf', renderKeepalivedConf('a', DEBIAN)],
  ['conntrackd.conf', renderConntrackdConf('a', DEBIAN)],
  ['wccpd.yaml', renderWccpdConf('a', '/var/lib/wccpd', 'change-me')],
  ['wccpd-ha-notify', readFileSync(NOTIFY_SCRIPT, 'utf8')],
] as const) {
  test(`docs/ha.md shows the tested ${what}`, () => {
    assert.ok(blocks.includes(text), `no code block of docs/ha.md equals the tested ${what}:\n${text}`);
  });
}

test("the two gateways' files differ only where docs/ha.md says", () => {
  const diff = (x: string, y: string): string[] => {
    const a = x.split('\n');
    const b = y.split('\n');
    return a.flatMap((l, i) => (l === b[i] ? [] : [`${l.trim()} | ${b[i]?.trim() ?? ''}`]));
  };
  assert.deepEqual(diff(renderKeepalivedConf('a', DEBIAN), renderKeepalivedConf('b', DEBIAN)), [
    'router_id wccpd-a | router_id wccpd-b',
    'priority 150 | priority 100',
  ]);
  assert.deepEqual(diff(renderConntrackdConf('a', DEBIAN), renderConntrackdConf('b', DEBIAN)), [
    'IPv4_address 192.0.2.253 | IPv4_address 192.0.2.254',
    'IPv4_Destination_Address 192.0.2.254 | IPv4_Destination_Address 192.0.2.253',
    'IPv4_address 203.0.113.2 | IPv4_address 203.0.113.3',
    'IPv4_address 192.0.2.2 | IPv4_address 192.0.2.3',
    'IPv4_address 203.0.113.130 | IPv4_address 203.0.113.131',
    'IPv4_address 192.0.2.253 | IPv4_address 192.0.2.254',
  ]);
});
