// Whole WCCPv2 messages: the 8-byte header, the component sequence, and which components each message requires.
import type { Decoded } from '../decode-error.js';
import { fail, Reader, Stop, Wccp2EncodeError, Writer } from './bytes.js';
import { componentDef, componentName, componentTypeOf, encodeBody } from './components.js';
import { ComponentType, HEADER_LENGTH, MessageType, type MessageName, VERSION_2_0, VERSION_2_01 } from './constants.js';
import { signMessage } from './security.js';
import type { Component, Wccp2Message } from './types.js';

export { componentName };

const MESSAGE_NAMES: Readonly<Record<number, MessageName>> = {
  [MessageType.HERE_I_AM]: 'HERE_I_AM',
  [MessageType.I_SEE_YOU]: 'I_SEE_YOU',
  [MessageType.REDIRECT_ASSIGN]: 'REDIRECT_ASSIGN',
  [MessageType.REMOVAL_QUERY]: 'REMOVAL_QUERY',
};

/** Required components per message (draft §5.1-5.4): each inner list is "one of". */
export const REQUIRED_COMPONENTS: Readonly<Record<MessageName, readonly (readonly number[])[]>> = {
  HERE_I_AM: [
    [ComponentType.SECURITY_INFO],
    [ComponentType.SERVICE_INFO],
    [ComponentType.WC_ID_INFO],
    [ComponentType.WC_VIEW_INFO],
  ],
  I_SEE_YOU: [
    [ComponentType.SECURITY_INFO],
    [ComponentType.SERVICE_INFO],
    [ComponentType.ROUTER_ID_INFO],
    // Alternate Assignment carries a hash assignment as well (draft 5.6.10); Wireshark accepts it in an I_SEE_YOU
    // where it flags an Assignment Info, so wccpd sends that form.
    [ComponentType.RTR_VIEW_INFO],
    [ComponentType.REDIRECT_ASSIGNMENT, ComponentType.ASSIGN_MAP, ComponentType.ALT_ASSIGNMENT],
  ],
  REDIRECT_ASSIGN: [
    [ComponentType.SECURITY_INFO],
    [ComponentType.SERVICE_INFO],
    [ComponentType.REDIRECT_ASSIGNMENT, ComponentType.ALT_ASSIGNMENT],
  ],
  REMOVAL_QUERY: [[ComponentType.SECURITY_INFO], [ComponentType.SERVICE_INFO], [ComponentType.QUERY_INFO]],
};

/** Decodes one datagram (the UDP payload). Total: any bytes give a message or a DecodeError, never an exception. */
export function decodeMessage(buf: Uint8Array): Decoded<Wccp2Message> {
  try {
    return { ok: true, value: decodeOrStop(buf) };
  } catch (e) {
    if (e instanceof Stop) return { ok: false, error: e.error };
    throw e;
  }
}

function decodeOrStop(buf: Uint8Array): Wccp2Message {
  const where = { message: 'unknown', component: 'header' };
  if (buf.length < HEADER_LENGTH) {
    fail(where, 0, 'truncated', `a WCCPv2 header needs 8 bytes, the datagram has ${buf.length}`);
  }
  const h = new Reader(buf, 0, HEADER_LENGTH, where);
  const typeCode = h.u32('Type');
  const type = MESSAGE_NAMES[typeCode];
  if (type === undefined) fail(where, 0, 'bad-message-type', `message type ${typeCode} is not one of 10, 11, 12, 13`);
  where.message = type;
  const version = h.u16('Version');
  if (version !== VERSION_2_0 && version !== VERSION_2_01) {
    fail(where, 4, 'bad-version', `version 0x${version.toString(16).padStart(4, '0')}; expected 0x0200 or 0x0201`);
  }
  const length = h.u16('Length');
  if (length !== buf.length - HEADER_LENGTH) {
    fail(
      where,
      6,
      'length-mismatch',
      `header says ${length} bytes follow it but the datagram has ${buf.length - HEADER_LENGTH}`,
    );
  }

  const components: Component[] = [];
  const seen = new Set<number>();
  let pos = HEADER_LENGTH;
  while (pos < buf.length) {
    if (buf.length - pos < 4) {
      fail(
        { message: type, component: 'component header' },
        pos,
        'truncated',
        `${buf.length - pos} bytes left, too few for a 4-byte component header`,
      );
    }
    const head = new Reader(buf, pos, pos + 4, { message: type, component: 'component header' });
    const ctype = head.u16('Component Type');
    const clen = head.u16('Component Length');
    const cwhere = { message: type, component: componentName(ctype) };
    const bodyEnd = pos + 4 + clen;
    if (bodyEnd > buf.length) {
      fail(
        cwhere,
        pos,
        'component-past-end',
        `component length ${clen} runs ${bodyEnd - buf.length} bytes past the end of the datagram`,
      );
    }
    const def = componentDef(ctype);
    if (def === undefined) {
      components.push({
        kind: 'unknown',
        type: ctype,
        data: Buffer.from(buf.subarray(pos + 4, bodyEnd)).toString('hex'),
      });
    } else {
      if (seen.has(ctype)) fail(cwhere, pos, 'duplicate-component', `a second ${cwhere.component} in one message`);
      seen.add(ctype);
      const r = new Reader(buf, pos + 4, bodyEnd, cwhere);
      components.push(def.decode(r));
      if (r.remaining !== 0) {
        fail(cwhere, r.pos, 'trailing-bytes', `${r.remaining} bytes left over inside the component's stated length`);
      }
    }
    pos = bodyEnd;
  }

  for (const oneOf of REQUIRED_COMPONENTS[type]) {
    if (!oneOf.some((t) => seen.has(t))) {
      fail(
        { message: type, component: oneOf.map(componentName).join(' or ') },
        buf.length,
        'missing-component',
        `${type} requires ${oneOf.map(componentName).join(' or ')}`,
      );
    }
  }
  return { type, version, components };
}

export interface EncodeOptions {
  /**
   * MD5 password (at most 8 bytes): the message's SECURITY_INFO becomes MD5 and is signed. Without it, a SECURITY_INFO
   * that says md5 is written with the digest it holds.
   */
  readonly password?: string;
}

/** Encodes a message in its component order. Throws Wccp2EncodeError for values the wire cannot carry. */
export function encodeMessage(msg: Wccp2Message, options: EncodeOptions = {}): Buffer {
  const password = options.password;
  let components = msg.components;
  if (password !== undefined) {
    if (!components.some((c) => c.kind === 'security')) {
      throw new Wccp2EncodeError('SECURITY_INFO', 'a password was given but the message has no security component');
    }
    components = components.map((c): Component =>
      c.kind === 'security' ? { kind: 'security', option: 'md5', digest: '00'.repeat(16) } : c,
    );
  }
  const typeCode = MessageType[msg.type];
  if (typeCode === undefined) throw new Wccp2EncodeError('Type', `unknown message '${String(msg.type)}'`);
  const w = new Writer();
  w.u32(typeCode, 'Type');
  w.u16(msg.version, 'Version');
  const body = new Writer();
  for (const c of components) {
    const cw = new Writer();
    encodeBody(c, cw);
    body.u16(componentTypeOf(c), 'Component Type');
    body.u16(cw.length, `${componentName(componentTypeOf(c))} length`);
    body.raw(cw.toBuffer());
  }
  w.u16(body.length, 'message Length');
  w.raw(body.toBuffer());
  const bytes = w.toBuffer();
  return password !== undefined ? signMessage(bytes, password) : bytes;
}

/** The first component of a kind, typed (components of a valid message are unique per kind, except 'unknown'). */
export function findComponent<K extends Component['kind']>(
  msg: Wccp2Message,
  kind: K,
): Extract<Component, { kind: K }> | undefined {
  return msg.components.find((c): c is Extract<Component, { kind: K }> => c.kind === kind);
}

/** Components of types this codec does not know (kept raw). */
export function unknownComponents(msg: Wccp2Message): Extract<Component, { kind: 'unknown' }>[] {
  return msg.components.filter((c): c is Extract<Component, { kind: 'unknown' }> => c.kind === 'unknown');
}
