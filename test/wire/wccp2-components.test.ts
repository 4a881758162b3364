// The component table: one definition per kind, found by its type code, named by its ComponentType key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { COMPONENTS, componentDef, componentName, type ComponentDef } from '../../src/wire/wccp2/components.js';
import { ComponentType } from '../../src/wire/wccp2/constants.js';
import { Reader } from '../../src/wire/wccp2/bytes.js';

test('every component type code but ALT_ASSIGNMENT_MAP (kept raw) has exactly one definition', () => {
  const defined = Object.values(COMPONENTS)
    .map((d) => d.type)
    .sort((a, b) => a - b);
  assert.equal(new Set(defined).size, defined.length, 'two kinds claim one type code');
  const expected = Object.values(ComponentType)
    .filter((t) => t !== ComponentType.ALT_ASSIGNMENT_MAP)
    .sort((a, b) => a - b);
  assert.deepEqual(defined, expected);
  for (const t of expected) assert.equal(componentDef(t)?.type, t);
  assert.equal(componentDef(ComponentType.ALT_ASSIGNMENT_MAP), undefined);
  assert.equal(componentDef(99), undefined);
});

test('component names are the wire names, and unknown types say their number', () => {
  assert.equal(componentName(ComponentType.REDIRECT_ASSIGNMENT), 'REDIRECT_ASSIGNMENT');
  assert.equal(componentName(ComponentType.ALT_ASSIGNMENT_MAP), 'ALT_ASSIGNMENT_MAP');
  assert.equal(componentName(99), 'component type 99');
});

test('a definition without a describe does not compile (checked by tsc, which npm test runs)', () => {
  const decode = (r: Reader) => ({ kind: 'security' as const, option: 'none' as const, at: r.pos });
  // @ts-expect-error describe is missing: the table's type demands decode, encode and describe for every kind
  const half: ComponentDef<'security'> = { type: ComponentType.SECURITY_INFO, decode, encode: () => undefined };
  assert.equal(half.type, 0);
});
