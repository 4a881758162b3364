// What wccpd knows of one component kind (ComponentDef), the shape every family file's entries take and the table in
// components.ts holds, one per kind.
import type { Reader, Writer } from '../bytes.js';
import type { ComponentType } from '../constants.js';
import type { Component, UnknownComponent } from '../types.js';

type KnownComponent = Exclude<Component, UnknownComponent>;
export type KnownKind = KnownComponent['kind'];
export type Of<K extends KnownKind> = Extract<KnownComponent, { kind: K }>;

/**
 * Everything wccpd knows of one component kind, in one place: its type code (whose ComponentType key is its wire
 * name), and how to decode, encode and describe its body. The table's type demands an entry for every kind.
 */
export interface ComponentDef<K extends KnownKind> {
  readonly type: (typeof ComponentType)[keyof typeof ComponentType];
  /** Reads the whole body from r (the message decoder checks that nothing is left). */
  decode(r: Reader): Of<K>;
  /** Writes the body; throws Wccp2EncodeError for values the wire cannot carry. */
  encode(c: Of<K>, w: Writer): void;
  /** Text for `wccpctl decode`: the first line follows the component's header, the others are indented. */
  describe(c: Of<K>): string[];
}

/** The definitions of the kinds K, one entry per kind: a family file's share of the table. */
export type ComponentDefs<K extends KnownKind> = { readonly [P in K]: ComponentDef<P> };
