// wccpctl's command line, parsed once by node:util's parseArgs: the global options (--url, --token, --json) stand
// before or after the command, each command takes its own options, and an option it does not know is refused. Pure:
// arguments and environment in, a result out.
import { parseArgs } from 'node:util';
import { ADMIN_DEFAULT_HOST, ADMIN_DEFAULT_PORT } from '../vocabulary.js';

const OPTIONS = {
  url: { type: 'string' },
  token: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'v' },
  service: { type: 'string' },
  hex: { type: 'boolean' },
  follow: { type: 'boolean', short: 'f' },
  icp: { type: 'boolean' },
  gre: { type: 'boolean' },
  weight: { type: 'string' },
} as const;
type OptionName = keyof typeof OPTIONS;

const GLOBAL: readonly OptionName[] = ['url', 'token', 'json', 'help', 'version'];
/** The options of each kind of command, besides the global ones. */
const API_OPTIONS: readonly OptionName[] = ['service', 'hex', 'follow'];
const DECODE_OPTIONS: readonly OptionName[] = ['icp', 'gre'];
/** `plan join IP --weight W`: the joining engine's Assignment Weight. */
const PLAN_OPTIONS: readonly OptionName[] = ['service', 'weight'];

export const DEFAULT_URL = `http://${ADMIN_DEFAULT_HOST}:${ADMIN_DEFAULT_PORT}`;

export interface GlobalOptions {
  readonly url: string;
  readonly token: string | undefined;
  readonly json: boolean;
}

export interface CommandLine {
  readonly command: string;
  /** The command's arguments (an IP, a weight, a file). */
  readonly args: readonly string[];
  readonly global: GlobalOptions;
  /** API commands: the service (0-255, default 0). */
  readonly service: number;
  /** --service as given, null when absent (`plan` then covers every service the change concerns). */
  readonly serviceGiven: number | null;
  /** plan: --weight as given. */
  readonly weight: string | undefined;
  readonly hex: boolean;
  readonly follow: boolean;
  /** decode: which protocol the datagram is. */
  readonly protocol: 'wccp2' | 'icp' | 'gre';
}

export type Parsed =
  | { readonly kind: 'run'; readonly line: CommandLine }
  /** -h / --help: the usage of `command` (or of wccpctl when none is given). */
  | { readonly kind: 'help'; readonly command: string | undefined }
  /** -v / --version: wccpctl's own version (the daemon's is in `status`). */
  | { readonly kind: 'version' }
  | { readonly kind: 'error'; readonly message: string };

/** `commands` lists the API commands and `decode`; anything else is an unknown command. */
export function parseCommandLine(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
  apiCommands: readonly string[],
): Parsed {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (e) {
    return { kind: 'error', message: e instanceof Error ? e.message : String(e) };
  }
  const { values, positionals } = parsed;
  const [command, ...args] = positionals;
  if (values.help === true) return { kind: 'help', command };
  if (values.version === true) return { kind: 'version' };
  if (command === undefined) return { kind: 'error', message: 'no command given' };
  const own =
    command === 'decode'
      ? DECODE_OPTIONS
      : command === 'plan'
        ? PLAN_OPTIONS
        : apiCommands.includes(command)
          ? API_OPTIONS
          : null;
  if (own === null) return { kind: 'error', message: `unknown command '${command}'` };
  for (const name of Object.keys(values) as OptionName[]) {
    if (!GLOBAL.includes(name) && !own.includes(name)) {
      return { kind: 'error', message: `${command}: unknown option --${name}` };
    }
  }
  let service = 0;
  if (values.service !== undefined) {
    if (!/^\d+$/.test(values.service) || Number(values.service) > 255) {
      return { kind: 'error', message: `${command}: --service: not a service id (0-255): ${values.service}` };
    }
    service = Number(values.service);
  }
  if (values.icp === true && values.gre === true) {
    return { kind: 'error', message: 'decode: --icp and --gre exclude each other' };
  }
  return {
    kind: 'run',
    line: {
      command,
      args,
      global: {
        url: values.url ?? env.WCCPD_URL ?? DEFAULT_URL,
        token: values.token ?? env.WCCPD_TOKEN,
        json: values.json === true,
      },
      service,
      serviceGiven: values.service !== undefined ? service : null,
      weight: values.weight,
      hex: values.hex === true,
      follow: values.follow === true,
      protocol: values.icp === true ? 'icp' : values.gre === true ? 'gre' : 'wccp2',
    },
  };
}
