// Component bodies (the bytes after a component's 4-byte type/length header): one entry per kind in COMPONENTS holds
// its type code, decoder, encoder and description. The entries live with their family in components/ (the draft's
// 5.6 components, over the 5.7 elements they share in elements.ts). Each decoder reads only inside its Reader's
// bounds and must consume the body exactly.
import type { Writer } from './bytes.js';
import { ComponentType } from './constants.js';
import type { Component } from './types.js';
import { ADDRESS_TABLE_COMPONENTS } from './components/address-table.js';
import { ASSIGNMENT_COMPONENTS } from './components/assignment.js';
import { CAPABILITY_COMPONENTS } from './components/capabilities.js';
import { COMMAND_COMPONENTS } from './components/command.js';
import type { ComponentDef, ComponentDefs, KnownKind } from './components/definition.js';
import { IDENTITY_COMPONENTS } from './components/identity.js';
import { SERVICE_COMPONENTS } from './components/service.js';
import { VIEW_COMPONENTS } from './components/view.js';

export type { ComponentDef, KnownKind } from './components/definition.js';

/** Every kind's definition, family by family. */
export const COMPONENTS: ComponentDefs<KnownKind> = {
  ...SERVICE_COMPONENTS,
  ...IDENTITY_COMPONENTS,
  ...VIEW_COMPONENTS,
  ...ASSIGNMENT_COMPONENTS,
  ...CAPABILITY_COMPONENTS,
  ...COMMAND_COMPONENTS,
  ...ADDRESS_TABLE_COMPONENTS,
};

const BY_TYPE: ReadonlyMap<number, ComponentDef<KnownKind>> = new Map(
  (Object.values(COMPONENTS) as ComponentDef<KnownKind>[]).map((d) => [d.type, d]),
);
const NAMES: ReadonlyMap<number, string> = new Map(Object.entries(ComponentType).map(([name, type]) => [type, name]));

/** The definition of a component type code, or undefined for a type kept raw as 'unknown'. */
export function componentDef(type: number): ComponentDef<KnownKind> | undefined {
  return BY_TYPE.get(type);
}

/** Wire name of a component type, as Squid and the draft use it (also DecodeError.component). */
export function componentName(type: number): string {
  return NAMES.get(type) ?? `component type ${type}`;
}

export function componentTypeOf(c: Component): number {
  return c.kind === 'unknown' ? c.type : COMPONENTS[c.kind].type;
}

export function encodeBody(c: Component, w: Writer): void {
  if (c.kind === 'unknown') w.hex(c.data, 'component data');
  else (COMPONENTS[c.kind] as ComponentDef<KnownKind>).encode(c, w);
}

export function describeBody(c: Component): string[] {
  if (c.kind === 'unknown') return [`unknown component, ${c.data.length / 2} bytes kept: 0x${c.data}`];
  return (COMPONENTS[c.kind] as ComponentDef<KnownKind>).describe(c);
}
