// wccpd entry point: `wccpd [--config PATH] [--pretty]` runs the daemon; `wccpd check-config [--strict] PATH` validates
// a config (--strict: a warning fails it too); `wccpd --version` prints the version and build commit.
import { endEarlySignals } from './early-signals.js'; // first: its handlers cover the loading of everything below
import { parseArgs } from 'node:util';
import { versionLine } from '../build-info.js';
import { ConfigError, formatProblem, loadConfig, runCheckConfig } from '../config/index.js';
import { Daemon } from '../daemon.js';
import { createLog, resolveLogFormat, stderrText } from '../log.js';
import type { Level } from '../log.js';
import { installLastLine, installSignals } from './process-boundary.js';

const DEFAULT_CONFIG = '/etc/wccpd/wccpd.yaml';
const USAGE = 'usage: wccpd [--config PATH] [--pretty] | wccpd check-config [--strict] PATH | wccpd --version';

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        config: { type: 'string' },
        pretty: { type: 'boolean' },
        strict: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' },
      },
    });
  } catch (e) {
    process.stderr.write(`wccpd: ${e instanceof Error ? e.message : String(e)}\n${USAGE}\n`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (values.version === true) {
    process.stdout.write(`${versionLine('wccpd')}\n`);
    return 0;
  }
  if (positionals[0] === 'check-config') {
    const path = positionals[1];
    if (path === undefined || positionals.length > 2 || values.config !== undefined || values.pretty !== undefined) {
      process.stderr.write(`${USAGE}\n`);
      return 2;
    }
    return runCheckConfig(
      path,
      process.stdout,
      { write: (text: string) => process.stderr.write(stderrText(text)) },
      { strict: values.strict === true },
    );
  }
  if (values.strict !== undefined) {
    process.stderr.write(`wccpd: --strict belongs to check-config\n${USAGE}\n`);
    return 2;
  }
  if (positionals.length > 0) {
    process.stderr.write(`wccpd: unknown argument ${positionals[0]}\n${USAGE}\n`);
    return 2;
  }
  const configPath = values.config ?? DEFAULT_CONFIG;
  const pretty = values.pretty === true;
  let config;
  try {
    config = await loadConfig(configPath);
  } catch (e) {
    if (e instanceof ConfigError) {
      for (const p of e.problems) process.stderr.write(stderrText(`${formatProblem(e.file, p)}\n`));
      return 1;
    }
    process.stderr.write(
      stderrText(`wccpd: cannot read config ${configPath}: ${e instanceof Error ? e.message : String(e)}\n`),
    );
    return 1;
  }
  const level: Level = config.logging.level === 'silent' ? 'fatal' : config.logging.level;
  const log = createLog({ format: resolveLogFormat(config.logging.format, pretty), level });
  installLastLine(log);
  const daemon = new Daemon({ config, log, setLogLevel: (l) => (log.level = l === 'silent' ? 'fatal' : l) });
  // A reload asked for while the daemon starts runs once it has started; daemon.reload() never rejects.
  installSignals(log, () => void daemon.reload());
  endEarlySignals();
  try {
    await daemon.start();
  } catch (e) {
    log.error({ err: e instanceof Error ? e.message : String(e) }, 'wccpd cannot start');
    await daemon.stop().catch(() => undefined);
    return 1;
  }
  await new Promise<void>((resolve) => {
    const onSignal = (signal: string) => {
      log.info({ signal }, `${signal}: stopping`);
      resolve();
    };
    process.once('SIGTERM', () => onSignal('SIGTERM'));
    process.once('SIGINT', () => onSignal('SIGINT'));
  });
  await daemon.stop();
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(stderrText(`wccpd: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`));
    process.exit(1);
  },
);
