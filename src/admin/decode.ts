// `wccpctl decode`: one datagram (hex text or raw bytes) decoded as WCCPv2, ICP or GRE redirection, printed for a
// person or as JSON. Everything here is pure except runDecodeCommand, which takes its I/O as arguments.
import { formatDecodeError, type DecodeError } from '../wire/decode-error.js';
import { decodeMessage, describeMessage } from '../wire/wccp2/index.js';
import { decodeIcp, type IcpMessage } from '../wire/icp.js';
import { decodeGreRedirect, decodeIpv4Header, type GreRedirect } from '../wire/gre.js';

export type DecodeProtocol = 'wccp2' | 'icp' | 'gre';

/** The input was neither hex text nor a usable datagram (empty, odd number of hex digits). */
export class DatagramInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DatagramInputError';
  }
}

const HEX_TEXT = /^[0-9a-fA-F\s]*$/;

/**
 * Hex text (whitespace anywhere, e.g. a `.hex` fixture or `xxd -p` output) becomes its bytes; anything else is taken
 * as the raw datagram. A raw WCCP/ICP/GRE datagram always holds a byte outside [0-9a-fA-F\s] (its header has zeros).
 */
export function datagramFromInput(data: Uint8Array): Buffer {
  if (data.length === 0) throw new DatagramInputError('the input is empty: give one datagram as hex text or raw bytes');
  const text = Buffer.from(data).toString('latin1');
  if (!HEX_TEXT.test(text)) return Buffer.from(data);
  const digits = text.replace(/\s+/g, '');
  if (digits.length === 0)
    throw new DatagramInputError('the input holds only whitespace: give one datagram as hex text or raw bytes');
  if (digits.length % 2 !== 0) {
    throw new DatagramInputError(`the hex text has ${digits.length} digits, an odd number: a byte is cut in half`);
  }
  return Buffer.from(digits, 'hex');
}

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

function icpJson(m: IcpMessage): unknown {
  return m.opcode === 'HIT_OBJ' ? { ...m, object: hex(m.object) } : m;
}

export function describeIcp(m: IcpMessage, length: number): string {
  const lines = [
    `ICP ${m.opcode} version=2 length=${length} request=${m.requestNumber} options=0x${m.options.toString(16).padStart(8, '0')}` +
      ` option_data=0x${m.optionData.toString(16).padStart(8, '0')} sender=${m.senderAddress}`,
  ];
  if (m.opcode === 'QUERY') lines.push(`  requester=${m.requesterAddress}`);
  lines.push(`  url=${m.url}`);
  if (m.opcode === 'HIT_OBJ') lines.push(`  object: ${m.object.length} bytes`);
  return lines.join('\n');
}

function greJson(g: GreRedirect): unknown {
  const ip = decodeIpv4Header(g.inner);
  return { ...g, inner: hex(g.inner), innerIpv4: ip.ok ? ip.value : null };
}

export function describeGre(g: GreRedirect): string {
  const lines = [
    `GRE 0x883e WCCP redirect: service=${g.serviceId} (${g.dynamic ? 'dynamic' : 'well-known'})` +
      ` primary bucket=${g.priBucket} alternate bucket=${g.altBucket}${g.alternate ? ' (alternate used)' : ''}`,
  ];
  const ip = decodeIpv4Header(g.inner);
  if (ip.ok) {
    const v = ip.value;
    lines.push(
      `  inner IPv4 ${v.src} -> ${v.dst} protocol=${v.protocol} ttl=${v.ttl} length=${v.totalLength}` +
        ` checksum ${v.checksumOk ? 'ok' : 'BAD'}`,
    );
  }
  return lines.join('\n');
}

export type DecodeOutcome =
  | { readonly ok: true; readonly text: string; readonly json: unknown }
  | { readonly ok: false; readonly error: DecodeError };

/** Decodes one datagram and renders it both ways; never throws. */
export function decodeDatagram(bytes: Uint8Array, protocol: DecodeProtocol): DecodeOutcome {
  if (protocol === 'icp') {
    const r = decodeIcp(bytes);
    return r.ok ? { ok: true, text: describeIcp(r.value, bytes.length), json: icpJson(r.value) } : r;
  }
  if (protocol === 'gre') {
    const r = decodeGreRedirect(bytes);
    return r.ok ? { ok: true, text: describeGre(r.value), json: greJson(r.value) } : r;
  }
  const r = decodeMessage(bytes);
  return r.ok ? { ok: true, text: describeMessage(r.value), json: r.value } : r;
}

export interface DecodeIo {
  readonly readFile: (path: string) => Promise<Uint8Array>;
  readonly readStdin: () => Promise<Uint8Array>;
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
}

export const DECODE_USAGE =
  'usage: wccpctl decode [--json] [--icp | --gre] [FILE|-]\n' +
  '  one datagram as hex text (whitespace allowed) or raw bytes, from FILE or stdin; WCCPv2 unless --icp or --gre';

/**
 * `wccpctl decode` once its options are parsed (`args`: at most one FILE or `-`); returns the exit code (0 decoded,
 * 1 bad input or usage).
 */
export async function runDecodeCommand(
  args: readonly string[],
  protocol: DecodeProtocol,
  json: boolean,
  io: DecodeIo,
): Promise<number> {
  if (args.length > 1) {
    io.err(`wccpctl decode: one datagram at a time (got ${args.join(' and ')})\n${DECODE_USAGE}`);
    return 1;
  }
  const source = args[0];
  let data: Uint8Array;
  try {
    data = source === undefined || source === '-' ? await io.readStdin() : await io.readFile(source);
  } catch (e) {
    io.err(`wccpctl decode: cannot read ${source ?? 'stdin'}: ${(e as Error).message}`);
    return 1;
  }
  let bytes: Buffer;
  try {
    bytes = datagramFromInput(data);
  } catch (e) {
    if (!(e instanceof DatagramInputError)) throw e;
    io.err(`wccpctl decode: ${source ?? 'stdin'}: ${e.message}`);
    return 1;
  }
  const r = decodeDatagram(bytes, protocol);
  if (!r.ok) {
    io.err(`wccpctl decode: ${formatDecodeError(r.error)}`);
    return 1;
  }
  io.out(json ? JSON.stringify(r.json, null, 2) : r.text);
  return 0;
}
