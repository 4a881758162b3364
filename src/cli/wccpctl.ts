// wccpctl: the admin CLI. Global options, then one command; each command is a function from its own arguments to an
// exit code. Add a command by adding an entry to COMMANDS.
import { readFile } from 'node:fs/promises';
import { runDecodeCommand, DECODE_USAGE } from '../admin/decode.js';
import { API_COMMANDS, API_USAGE, runApiCommand, type GlobalOptions } from '../admin/wccpctl.js';

type Command = (args: readonly string[], global: GlobalOptions) => Promise<number>;

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

const apiCommand = (name: string): Command => (args, global) => runApiCommand(name, args, global, {
  out, err, colour: Boolean(process.stdout.isTTY) && !process.env.NO_COLOR, signal: interrupted.signal,
});

export const COMMANDS: Readonly<Record<string, Command>> = {
  ...Object.fromEntries(API_COMMANDS.map((name) => [name, apiCommand(name)])),
  decode: (args, global) => runDecodeCommand(args, { readFile: (p) => readFile(p), readStdin, out, err }, global.json),
};

const USAGE = `usage: wccpctl [--url URL] [--token T | env WCCPD_TOKEN] [--json] COMMAND [ARGS]
${API_USAGE}
${DECODE_USAGE}`;

/** Parses global options up to the command name; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  let url = process.env.WCCPD_URL ?? 'http://127.0.0.1:8080';
  let token = process.env.WCCPD_TOKEN;
  let json = false;
  let i = 0;
  for (; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (a === '--json') json = true;
    else if (a === '--url' || a === '--token') {
      const v = argv[i + 1];
      if (v === undefined) {
        err(`wccpctl: ${a} needs a value\n${USAGE}`);
        return 1;
      }
      if (a === '--url') url = v;
      else token = v;
      i++;
    } else if (a === '-h' || a === '--help') {
      out(USAGE);
      return 0;
    } else break;
  }
  const name = argv[i];
  if (name === undefined) {
    err(USAGE);
    return 1;
  }
  const command = COMMANDS[name];
  if (command === undefined) {
    err(`wccpctl: unknown command '${name}'\n${USAGE}`);
    return 1;
  }
  return command(argv.slice(i + 1), { url, token, json });
}

process.exitCode = await main(process.argv.slice(2));
