// A readable multi-line rendering of a decoded message, for `wccpctl decode` and for comparing with tshark.
import { Writer } from './bytes.js';
import { MessageType } from './constants.js';
import { componentName, componentTypeOf, describeBody, encodeBody } from './components.js';
import type { Component, Wccp2Message } from './types.js';

export { bucketRanges } from './text.js';

function encodedLength(c: Component): number | undefined {
  try {
    const w = new Writer();
    encodeBody(c, w);
    return w.length;
  } catch {
    return undefined; // a hand-built value the wire cannot carry: describe it without offsets
  }
}

/** Multi-line text: the header, then one line per component with its offset and length as encoded. */
export function describeMessage(msg: Wccp2Message): string {
  const lengths = msg.components.map(encodedLength);
  const known = lengths.every((l) => l !== undefined);
  const total = lengths.reduce<number>((s, l) => s + 4 + (l ?? 0), 8);
  const lines = [
    `type=${MessageType[msg.type]} ${msg.type} version=0x${msg.version.toString(16).padStart(4, '0')}` +
      (known ? ` length=${total - 8} (${total} bytes with the 8-byte header)` : ''),
  ];
  let offset = 8;
  msg.components.forEach((c, i) => {
    const t = componentTypeOf(c);
    const len = lengths[i];
    const [first = '', ...rest] = describeBody(c);
    lines.push(
      `${known ? `@${offset} ` : ''}${t} ${componentName(t)}${len !== undefined ? ` len=${len}` : ''}: ${first}`,
    );
    for (const l of rest) lines.push(`    ${l}`);
    offset += 4 + (len ?? 0);
  });
  return lines.join('\n');
}
