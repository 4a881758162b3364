// Shared builders for the config tests: the smallest config that parses, service 0 with more keys, and the problems
// parseConfig reports for a text.
import assert from 'node:assert/strict';
import { ConfigError, parseConfig, type ConfigProblem } from '../../src/config/index.js';

/** The smallest config that parses: a router address, no data plane, service 0 with an engine allowlist. */
export const MINIMAL = `
router:
  address: 192.0.2.1
dataplane:
  backend: none
services:
  - id: 0
    engines:
      allow: [192.0.2.0/24]
`;

/** MINIMAL with more keys under the service (given unindented; indented 4 spaces under `- id: 0`), its id `id`. */
export function withService(extra: string, id = '0'): string {
  return MINIMAL.replace(
    '  - id: 0\n',
    `  - id: ${id}\n${extra
      .split('\n')
      .map((l) => `    ${l}`)
      .join('\n')}\n`,
  );
}

/** The problems parseConfig reports for this text, read as `file` (fails the test if it parses). */
export function problems(text: string, file = 'test.yaml'): ConfigProblem[] {
  try {
    parseConfig(text, file);
  } catch (e) {
    assert.ok(e instanceof ConfigError, `expected ConfigError, got ${String(e)}`);
    assert.equal(e.file, file);
    return [...e.problems];
  }
  assert.fail('expected a ConfigError');
}

/** The problem reported at `key` (fails the test if there is none). */
export function problemAt(text: string, key: string, file?: string): ConfigProblem {
  const all = problems(text, file);
  const p = all.find((x) => x.key === key);
  assert.ok(p, `no problem at ${key}; got ${JSON.stringify(all)}`);
  return p;
}
