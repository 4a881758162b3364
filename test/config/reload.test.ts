// The reload table (src/config/reload.ts): every field of the parsed config is either applied live or needs a
// restart, and configDiff names what differs as the file does.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { NOT_COMPARED, RELOAD_KEYS, SERVICE_RELOAD_KEYS, configDiff, parseConfig } from '../../src/config/index.js';
import type { Config } from '../../src/config/index.js';

const BASE = `
router:
  address: 192.0.2.1
admin:
  listen: 127.0.0.1:8080
  token: one
dataplane:
  backend: none
peers:
  - address: 192.0.2.2
    api: http://192.0.2.2:8080
services:
  - id: 0
    weights: { 192.0.2.11: 10 }
    engines:
      allow: [192.0.2.0/24]
    maintenance:
      - cron: "0 3 * * *"
        duration: 10m
  - id: 51
    protocol: tcp
    ports: [443]
    engines:
      allow: [192.0.2.0/24]
`;

const parse = (text: string): Config => parseConfig(text, 'wccpd.yaml');

/** Every leaf of a parsed value as a dotted path (arrays and records are leaves: they are compared whole). */
function leaves(value: object, prefix = ''): string[] {
  return Object.entries(value).flatMap(([k, v]) =>
    v !== null && typeof v === 'object' && !Array.isArray(v) && !k.startsWith('weights') && k !== 'health'
      ? leaves(v as object, `${prefix}${k}.`)
      : [`${prefix}${k}`],
  );
}

function covered(path: string, keys: readonly { key: string; field?: string }[], skipped: readonly string[]) {
  const top = path.split('.')[0] ?? path;
  return (
    skipped.includes(top) || keys.some((k) => path === (k.field ?? k.key) || path.startsWith(`${k.field ?? k.key}.`))
  );
}

describe('the reload table', () => {
  it('classifies every field of the parsed config, and of a service', () => {
    const c = parse(BASE);
    for (const path of leaves(c).filter((p) => !p.startsWith('services')))
      assert.ok(covered(path, RELOAD_KEYS, NOT_COMPARED.config), `${path} is in neither RELOAD_KEYS nor NOT_COMPARED`);
    for (const s of c.services)
      for (const path of leaves(s))
        assert.ok(
          covered(path, SERVICE_RELOAD_KEYS, NOT_COMPARED.service),
          `services[].${path} is in neither SERVICE_RELOAD_KEYS nor NOT_COMPARED`,
        );
  });

  it('the same config: nothing differs', () => {
    const d = configDiff(parse(BASE), parse(BASE));
    assert.deepEqual(d, { changed: [], restart: [], added: [], removed: [], reconfigured: [] });
  });

  it('a service added, one removed, a weight and the token changed: all live, named as the file names them', () => {
    const next = BASE.replace('token: one', 'token: two')
      .replace('192.0.2.11: 10', '192.0.2.11: 20')
      .replace('  - id: 51\n    protocol: tcp\n    ports: [443]', '  - id: 60\n    protocol: tcp\n    ports: [8080]');
    const d = configDiff(parse(BASE), parse(next));
    assert.deepEqual(d.restart, []);
    assert.deepEqual(d.added, [60]);
    assert.deepEqual(d.removed, [51]);
    assert.deepEqual(d.reconfigured, [0]);
    assert.deepEqual(d.changed, [
      'admin.token',
      'services[0].weights (service 0)',
      'services[1] (service 60 added)',
      'service 51 removed',
    ]);
  });

  it('families is live: the service is applied again with the new families', () => {
    const d = configDiff(parse(BASE), parse(BASE.replace('  - id: 51\n', '  - id: 51\n    families: [ipv4, ipv6]\n')));
    assert.deepEqual(d.restart, []);
    assert.deepEqual(d.reconfigured, [51]);
    assert.deepEqual(d.changed, ['services[1].families (service 51)']);
  });

  it('a restart key (router.address, a service forwarding): one problem each, saying to restart', () => {
    const next = BASE.replace('address: 192.0.2.1\n', 'address: 192.0.2.9\n').replace(
      '  - id: 51\n',
      '  - id: 51\n    forwarding: gre\n',
    );
    const d = configDiff(parse(BASE), parse(next));
    assert.deepEqual(
      d.restart.map((p) => p.key),
      ['router.address', 'services[1].forwarding'],
    );
    for (const p of d.restart) assert.match(p.message, /restart wccpd to change it/);
  });

  it('docs/operations.md ("Reload") lists the same table', () => {
    const docs = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
    const section = docs.slice(docs.indexOf('## Reload\n'), docs.indexOf('\n## ', docs.indexOf('## Reload\n') + 1));
    const rows = section.split('\n').filter((l) => /^\| `/.test(l));
    assert.deepEqual(rows, [
      ...RELOAD_KEYS.map((k) => `| \`${k.key}\` | ${k.class} | ${k.why} |`),
      ...SERVICE_RELOAD_KEYS.map((k) => `| \`services[].${k.key}\` | ${k.class} | ${k.why} |`),
    ]);
  });
});
