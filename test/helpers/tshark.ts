// Runs Debian's tshark over frames we built and reports, per packet, every decoded field and every complaint
// (malformed packet, expert info of severity warning or error). Checksum validation is switched on, so a wrong
// IP/UDP/TCP checksum in our wrapping or inner packets shows up as an expert error too.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { haveCommand } from './require.js';
import { writePcap } from './pcap-file.js';

export const haveTshark = haveCommand('tshark');

// Wireshark's expert severities (epan/proto.h PI_*).
const PI_WARN = 0x00600000;
const PI_ERROR = 0x00800000;

export interface TsharkExpert {
  readonly severity: 'warning' | 'error';
  readonly message: string;
  /** The expert field's own name, e.g. 'wccp.length_bad'. */
  readonly name: string;
  /** The protocol layer it was found under, e.g. 'wccp'. */
  readonly layer: string;
}

export interface TsharkPacket {
  /** 1-based, as tshark numbers frames. */
  readonly number: number;
  /** frame.protocols split on ':', e.g. ['eth','ethertype','ip','udp','wccp']. */
  readonly protocols: readonly string[];
  /** Every leaf field tshark printed, by name, in order of appearance (repeated fields give several values). */
  readonly fields: ReadonlyMap<string, readonly string[]>;
  readonly experts: readonly TsharkExpert[];
  readonly malformed: boolean;
}

type Json = string | number | boolean | null | Json[] | { [k: string]: Json };

function walk(
  node: Json,
  layer: string,
  fields: Map<string, string[]>,
  experts: TsharkExpert[],
  flags: { malformed: boolean },
): void {
  if (Array.isArray(node)) {
    for (const n of node) walk(n, layer, fields, experts, flags);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  for (const [key, value] of Object.entries(node)) {
    if (key === '_ws.malformed') flags.malformed = true;
    if (key === '_ws.expert') {
      for (const e of Array.isArray(value) ? value : [value]) {
        if (e === null || typeof e !== 'object' || Array.isArray(e)) continue;
        const severity = Number(e['_ws.expert.severity']);
        const name = Object.keys(e).find((k) => !k.startsWith('_ws.expert.')) ?? '';
        if (name === '_ws.malformed.expert') flags.malformed = true;
        if (severity >= PI_WARN) {
          experts.push({
            severity: severity >= PI_ERROR ? 'error' : 'warning',
            message: String(e['_ws.expert.message'] ?? ''),
            name,
            layer,
          });
        }
      }
      continue;
    }
    const values = Array.isArray(value) ? value : [value];
    for (const v of values) {
      if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') {
        const list = fields.get(key) ?? [];
        list.push(String(v));
        fields.set(key, list);
      } else {
        walk(v, layer, fields, experts, flags);
      }
    }
  }
}

/** Parses `tshark -T json --no-duplicate-keys` output into packets. */
export function parseTsharkJson(text: string): TsharkPacket[] {
  const packets = JSON.parse(text) as Json;
  if (!Array.isArray(packets)) throw new Error('tshark JSON output is not an array of packets');
  return packets.map((p, i) => {
    const layers = (p as { _source?: { layers?: Record<string, Json> } })._source?.layers ?? {};
    const fields = new Map<string, string[]>();
    const experts: TsharkExpert[] = [];
    const flags = { malformed: false };
    for (const [layer, tree] of Object.entries(layers)) {
      if (layer === '_ws.malformed') flags.malformed = true;
      walk({ [layer]: tree }, layer, fields, experts, flags);
    }
    const protocols = (fields.get('frame.protocols')?.[0] ?? '').split(':').filter((s) => s !== '');
    return { number: i + 1, protocols, fields, experts, malformed: flags.malformed };
  });
}

export interface TsharkOptions {
  /** Extra `-d` decode-as rules, e.g. 'udp.port==3131,icp'. */
  readonly decodeAs?: readonly string[];
}

/** Runs tshark on a pcap file (throws with tshark's stderr if tshark itself fails). */
export function tsharkFile(pcapPath: string, opts: TsharkOptions = {}): TsharkPacket[] {
  const args = [
    '-r',
    pcapPath,
    '-T',
    'json',
    '--no-duplicate-keys',
    '-o',
    'ip.check_checksum:TRUE',
    '-o',
    'udp.check_checksum:TRUE',
    '-o',
    'tcp.check_checksum:TRUE',
  ];
  for (const d of opts.decodeAs ?? []) args.push('-d', d);
  const out = execFileSync('tshark', args, {
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return parseTsharkJson(out);
}

/** Writes frames to a temporary pcap, runs tshark on it, removes it. */
export function tsharkFrames(frames: readonly Uint8Array[], opts: TsharkOptions = {}): TsharkPacket[] {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-tshark-${process.pid}-`));
  try {
    const path = join(dir, 'frames.pcap');
    writePcap(path, frames);
    return tsharkFile(path, opts);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** First value of a field, or undefined. */
export function field(p: TsharkPacket, name: string): string | undefined {
  return p.fields.get(name)?.[0];
}

/** A one-line summary of a packet's complaints, for assertion messages. */
export function complaints(p: TsharkPacket): string {
  const list = p.experts.map((e) => `${e.severity} ${e.layer}/${e.name}: ${e.message}`);
  if (p.malformed) list.unshift('malformed packet');
  return list.length === 0 ? 'none' : list.join('; ');
}
