// docs/config.md's key tables and the parser's keys (src/config/keys.ts) are the same list: a key added to the parser
// without a row, or a row for a key the parser refuses, fails here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { configKeyPaths } from '../../src/config/keys.js';

const PROBE_KINDS = ['http', 'tcp', 'icp', 'icmp'];

/** Every key the tables of docs/config.md name, as `services[].engines.allow`; `a` / `b` cells give both. */
function documentedKeys(markdown: string): string[] {
  const keys: string[] = [];
  let prefix = '';
  let inKeys = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('## ')) inKeys = line === '## Keys';
    if (!inKeys) continue;
    if (line.startsWith('### Per service')) prefix = 'services[].';
    const first = /^\| (`[^|]*`) \|/.exec(line)?.[1];
    if (first === undefined) continue;
    for (const m of first.matchAll(/`([^`]+)`/g)) {
      const key = `${prefix}${m[1]!}`;
      keys.push(...(key.includes('.*.') ? PROBE_KINDS.map((k) => key.replace('.*.', `.${k}.`)) : [key]));
    }
  }
  return keys;
}

test('docs/config.md has a row for every key the parser reads, and none for a key it refuses', () => {
  const schema = configKeyPaths();
  const docs = documentedKeys(readFileSync(new URL('../../docs/config.md', import.meta.url), 'utf8'));
  // health.icmp.port is no key (ICMP probes no port); a row naming `health.*.x` expands to every kind.
  const isSection = (k: string) => schema.some((p) => p.startsWith(`${k}.`) || p.startsWith(`${k}[].`));
  const unknown = docs.filter((k) => !schema.includes(k) && !isSection(k) && k !== 'health.icmp.port');
  assert.deepEqual(unknown, [], 'rows for keys the parser does not know');
  const missing = schema.filter((k) => !docs.includes(k));
  assert.deepEqual(missing, [], 'keys the parser reads with no row in docs/config.md');
  assert.ok(schema.length > 60, `${schema.length} keys read`);
});
