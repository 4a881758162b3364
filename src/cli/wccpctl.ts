// wccpctl: the admin CLI. One parse of the whole command line (src/admin/cli-args.ts), then one command: the API
// commands of src/admin/wccpctl.ts, or decode.
import { readFile } from 'node:fs/promises';
import { runDecodeCommand, DECODE_USAGE } from '../admin/decode.js';
import { API_COMMANDS, API_USAGE, runApiCommand } from '../admin/wccpctl.js';
import { parseCommandLine } from '../admin/cli-args.js';
import { versionLine } from '../build-info.js';

function out(text: string): void {
  process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
}
function err(text: string): void {
  process.stderr.write(text.endsWith('\n') ? text : `${text}\n`);
}

async function readStdin(): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

// `events --follow` runs until Ctrl-C; the abort ends the stream cleanly.
const interrupted = new AbortController();
process.once('SIGINT', () => interrupted.abort());

const USAGE = `usage: wccpctl [--url URL] [--token T | env WCCPD_TOKEN] [--json] COMMAND [ARGS] | wccpctl --version
(the global options may also follow the command)
${API_USAGE}
${DECODE_USAGE}`;

/** Parses the whole command line and runs the command; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const parsed = parseCommandLine(argv, process.env, API_COMMANDS);
  if (parsed.kind === 'help') {
    out(parsed.command === 'decode' ? DECODE_USAGE : USAGE);
    return 0;
  }
  if (parsed.kind === 'version') {
    out(versionLine('wccpctl'));
    return 0;
  }
  if (parsed.kind === 'error') {
    err(`wccpctl: ${parsed.message}\n${USAGE}`);
    return 1;
  }
  const line = parsed.line;
  if (line.command === 'decode') {
    return runDecodeCommand(line.args, line.protocol, line.global.json, {
      readFile: (p) => readFile(p),
      readStdin,
      out,
      err,
    });
  }
  return runApiCommand(line, {
    out,
    err,
    colour: Boolean(process.stdout.isTTY) && !process.env.NO_COLOR,
    signal: interrupted.signal,
  });
}

process.exitCode = await main(process.argv.slice(2));
