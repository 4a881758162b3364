// `wccpd check-config [--strict] PATH`: exit code 0 and a one-line summary (and any warnings on stderr), or 1 and every
// problem, one per line; with --strict a warning fails it too (exit 1, after the same output).
import { ConfigError, formatProblem } from './config-error.js';
import { loadConfig } from './load.js';
import { summarizeConfig } from './summary.js';
import { hostInterfaces } from './host.js';
import { configWarnings, type HostFacts } from './warnings.js';

export interface TextSink {
  write(text: string): unknown;
}

export interface CheckConfigOptions {
  /** Exit 1 when there is any warning. */
  readonly strict?: boolean;
  /** Default: this host's (hostInterfaces()). */
  readonly host?: HostFacts;
}

export async function runCheckConfig(
  path: string,
  out: TextSink,
  err: TextSink,
  options: CheckConfigOptions = {},
): Promise<number> {
  try {
    const config = await loadConfig(path);
    out.write(`ok: ${path}: ${summarizeConfig(config)}\n`);
    const warnings = configWarnings(config, options.host ?? { interfaces: await hostInterfaces() });
    for (const w of warnings) err.write(`${formatProblem(path, { ...w, message: `warning: ${w.message}` })}\n`);
    if (options.strict === true && warnings.length > 0) {
      err.write(`${path}: --strict: ${warnings.length} warning${warnings.length === 1 ? '' : 's'}\n`);
      return 1;
    }
    return 0;
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    for (const p of e.problems) err.write(`${formatProblem(e.file, p)}\n`);
    return 1;
  }
}
