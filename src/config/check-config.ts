// `wccpd check-config PATH`: exit code 0 and a one-line summary (and any warnings on stderr), or 1 and every problem,
// one per line.
import { ConfigError, formatProblem } from './config-error.js';
import { loadConfig } from './load.js';
import { summarizeConfig } from './summary.js';
import { configWarnings } from './warnings.js';

export interface TextSink {
  write(text: string): unknown;
}

export async function runCheckConfig(path: string, out: TextSink, err: TextSink): Promise<number> {
  try {
    const config = await loadConfig(path);
    out.write(`ok: ${path}: ${summarizeConfig(config)}\n`);
    for (const w of configWarnings(config))
      err.write(`${formatProblem(path, { ...w, message: `warning: ${w.message}` })}\n`);
    return 0;
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    for (const p of e.problems) err.write(`${formatProblem(e.file, p)}\n`);
    return 1;
  }
}
