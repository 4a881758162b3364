// ICP v2 (RFC 2186): the cache-to-cache query protocol wccpd uses to probe engines (a query that answers proves
// the cache is alive; ICP_MISS_NOFETCH asks to be drained). Pure functions over bytes; decoders never throw.
import { ipv4Bytes } from '../address.js';
import { decodeError, type Decoded } from './decode-error.js';

export const ICP_VERSION = 2;
export const ICP_HEADER_LENGTH = 20;
/** Flag in the options word: the sender wants a HIT_OBJ reply carrying the object (RFC 2186 §3). */
export const ICP_FLAG_HIT_OBJ = 0x80000000;
/** Flag in the options word: option data carries the source round-trip time (RFC 2186 §3). */
export const ICP_FLAG_SRC_RTT = 0x40000000;

export const ICP_OPCODES = {
  QUERY: 1,
  HIT: 2,
  MISS: 3,
  ERR: 4,
  SECHO: 10,
  DECHO: 11,
  MISS_NOFETCH: 21,
  DENIED: 22,
  HIT_OBJ: 23,
} as const;
export type IcpOpcode = keyof typeof ICP_OPCODES;

const OPCODE_BY_CODE = new Map<number, IcpOpcode>(
  (Object.entries(ICP_OPCODES) as [IcpOpcode, number][]).map(([name, code]) => [code, name]),
);

interface IcpCommon {
  /** Chosen by the querier, echoed in the reply so replies can be matched to queries. */
  readonly requestNumber: number;
  readonly options: number;
  readonly optionData: number;
  /** Sender Host Address: dotted quad; RFC 2186 says it is unused in practice and usually 0.0.0.0. */
  readonly senderAddress: string;
}

export interface IcpQuery extends IcpCommon {
  readonly opcode: 'QUERY';
  readonly requesterAddress: string;
  readonly url: string;
}
export interface IcpUrlReply extends IcpCommon {
  readonly opcode: 'HIT' | 'MISS' | 'ERR' | 'SECHO' | 'DECHO' | 'MISS_NOFETCH' | 'DENIED';
  readonly url: string;
}
export interface IcpHitObj extends IcpCommon {
  readonly opcode: 'HIT_OBJ';
  readonly url: string;
  /** At most 65535 bytes: the object size field is 16 bits. */
  readonly object: Uint8Array;
}
export type IcpMessage = IcpQuery | IcpUrlReply | IcpHitObj;

/** Thrown by encodeIcp when the message cannot be put on the wire as given (a caller bug, not bad input). */
export class IcpEncodeError extends Error {
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(`ICP encode: ${field}: ${detail}`);
    this.name = 'IcpEncodeError';
  }
}

function ipv4ToBytes(field: string, ip: string): [number, number, number, number] {
  const bytes = ipv4Bytes(ip);
  if (bytes === null) throw new IcpEncodeError(field, `"${ip}" is not a dotted-quad IPv4 address`);
  return bytes;
}

function ipv4At(view: DataView, offset: number): string {
  return `${view.getUint8(offset)}.${view.getUint8(offset + 1)}.${view.getUint8(offset + 2)}.${view.getUint8(offset + 3)}`;
}

function checkU32(field: string, n: number): void {
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff)
    throw new IcpEncodeError(field, `${n} is not a 32-bit unsigned integer`);
}

/** Encodes one ICP v2 message; throws IcpEncodeError on values that do not fit the wire format. */
export function encodeIcp(msg: IcpMessage): Buffer {
  checkU32('requestNumber', msg.requestNumber);
  checkU32('options', msg.options);
  checkU32('optionData', msg.optionData);
  if (msg.url.includes('\0')) throw new IcpEncodeError('url', 'a URL cannot contain NUL: it terminates the URL');
  const url = Buffer.from(msg.url, 'utf8');
  const prefix = msg.opcode === 'QUERY' ? 4 : 0;
  const suffix = msg.opcode === 'HIT_OBJ' ? 2 + msg.object.length : 0;
  if (msg.opcode === 'HIT_OBJ' && msg.object.length > 0xffff) {
    throw new IcpEncodeError('object', `${msg.object.length} bytes do not fit the 16-bit object size`);
  }
  const length = ICP_HEADER_LENGTH + prefix + url.length + 1 + suffix;
  if (length > 0xffff)
    throw new IcpEncodeError('url', `the message would be ${length} bytes; the length field is 16 bits`);
  const out = Buffer.alloc(length);
  out.writeUInt8(ICP_OPCODES[msg.opcode], 0);
  out.writeUInt8(ICP_VERSION, 1);
  out.writeUInt16BE(length, 2);
  out.writeUInt32BE(msg.requestNumber, 4);
  out.writeUInt32BE(msg.options, 8);
  out.writeUInt32BE(msg.optionData, 12);
  out.set(ipv4ToBytes('senderAddress', msg.senderAddress), 16);
  let at = ICP_HEADER_LENGTH;
  if (msg.opcode === 'QUERY') {
    out.set(ipv4ToBytes('requesterAddress', msg.requesterAddress), at);
    at += 4;
  }
  out.set(url, at);
  at += url.length + 1; // the NUL is already there (alloc zero-fills)
  if (msg.opcode === 'HIT_OBJ') {
    out.writeUInt16BE(msg.object.length, at);
    out.set(msg.object, at + 2);
  }
  return out;
}

/** Decodes one ICP v2 datagram; never throws, never reads past the end of buf. */
export function decodeIcp(buf: Uint8Array): Decoded<IcpMessage> {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  if (buf.length < ICP_HEADER_LENGTH) {
    return decodeError(
      'ICP',
      'unknown',
      'header',
      0,
      'truncated',
      `an ICP header is ${ICP_HEADER_LENGTH} bytes; the datagram has only ${buf.length}`,
    );
  }
  const code = view.getUint8(0);
  const opcode = OPCODE_BY_CODE.get(code);
  if (opcode === undefined) {
    return decodeError('ICP', 'unknown', 'header', 0, 'unknown-opcode', `opcode ${code} is not an ICP v2 opcode`);
  }
  const version = view.getUint8(1);
  if (version !== ICP_VERSION) {
    return decodeError(
      'ICP',
      opcode,
      'header',
      1,
      'bad-version',
      `version is ${version}; only ICP version 2 is understood`,
    );
  }
  const length = view.getUint16(2);
  if (length !== buf.length) {
    return decodeError(
      'ICP',
      opcode,
      'header',
      2,
      length > buf.length ? 'truncated' : 'bad-length',
      `message length field says ${length} bytes but the datagram has ${buf.length}`,
    );
  }
  const common: IcpCommon = {
    requestNumber: view.getUint32(4),
    options: view.getUint32(8),
    optionData: view.getUint32(12),
    senderAddress: ipv4At(view, 16),
  };
  let at = ICP_HEADER_LENGTH;
  let requesterAddress = '';
  if (opcode === 'QUERY') {
    if (length < at + 4) {
      return decodeError(
        'ICP',
        opcode,
        'requester host address',
        at,
        'truncated',
        'a QUERY carries a 4-byte requester host address before the URL',
      );
    }
    requesterAddress = ipv4At(view, at);
    at += 4;
  }
  const nul = buf.indexOf(0, at);
  if (nul < 0) {
    return decodeError('ICP', opcode, 'URL', at, 'unterminated-url', 'the URL has no terminating NUL byte');
  }
  const url = Buffer.from(buf.buffer, buf.byteOffset + at, nul - at).toString('utf8');
  at = nul + 1;
  if (opcode === 'HIT_OBJ') {
    if (length < at + 2) {
      return decodeError(
        'ICP',
        opcode,
        'object size',
        at,
        'truncated',
        'a HIT_OBJ carries a 2-byte object size after the URL',
      );
    }
    const size = view.getUint16(at);
    if (at + 2 + size !== length) {
      return decodeError(
        'ICP',
        opcode,
        'object size',
        at,
        'bad-length',
        `object size says ${size} bytes but ${length - at - 2} follow it`,
      );
    }
    const object = Uint8Array.prototype.slice.call(buf, at + 2, at + 2 + size);
    return { ok: true, value: { ...common, opcode, url, object } };
  }
  if (at !== length) {
    return decodeError('ICP', opcode, 'URL', at, 'trailing-bytes', `${length - at} bytes follow the URL's NUL`);
  }
  if (opcode === 'QUERY') return { ok: true, value: { ...common, opcode, requesterAddress, url } };
  return { ok: true, value: { ...common, opcode, url } };
}
