// The Mask/Value Sets of mask assignment (draft 5.7.6-5.7.8) as plain values, free of Node's types: the API's types
// (admin/api-types.ts) and the page's checked script use them as declared here.

/** Mask Element (draft 5.7.7): zero bits are "don't care". */
export interface MaskElement {
  readonly sourceAddressMask: number;
  readonly destinationAddressMask: number;
  readonly sourcePortMask: number;
  readonly destinationPortMask: number;
}

/** Value Element (draft 5.7.8): the masked fields that select `engine`. */
export interface ValueElement {
  readonly sourceAddress: number;
  readonly destinationAddress: number;
  readonly sourcePort: number;
  readonly destinationPort: number;
  readonly engine: string;
}

/** Mask/Value Set Element (draft 5.7.6). */
export interface MaskValueSet {
  readonly mask: MaskElement;
  readonly values: readonly ValueElement[];
}
