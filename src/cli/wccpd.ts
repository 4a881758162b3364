// wccpd entry point: `wccpd [--config PATH] [--pretty]` runs the daemon; `wccpd check-config PATH` validates a config.
import { ConfigError, formatProblem, loadConfig, runCheckConfig } from '../config/index.js';
import { Daemon } from '../daemon.js';
import { createLog } from '../log.js';
import type { Level } from '../log.js';

const DEFAULT_CONFIG = '/etc/wccpd/wccpd.yaml';
const USAGE = 'usage: wccpd [--config PATH] [--pretty] | wccpd check-config PATH';

async function main(argv: string[]): Promise<number> {
  if (argv[0] === 'check-config') {
    const path = argv[1];
    if (!path || argv.length > 2) {
      process.stderr.write(`${USAGE}\n`);
      return 2;
    }
    return runCheckConfig(path, process.stdout, process.stderr);
  }
  let configPath = DEFAULT_CONFIG;
  let pretty = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--config' && argv[i + 1] !== undefined) configPath = argv[++i] as string;
    else if (a?.startsWith('--config=')) configPath = a.slice('--config='.length);
    else if (a === '--pretty') pretty = true;
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    } else {
      process.stderr.write(`wccpd: unknown argument ${a}\n${USAGE}\n`);
      return 2;
    }
  }
  let config;
  try {
    config = await loadConfig(configPath);
  } catch (e) {
    if (e instanceof ConfigError) {
      for (const p of e.problems) process.stderr.write(`${formatProblem(e.file, p)}\n`);
      return 1;
    }
    process.stderr.write(`wccpd: cannot read config ${configPath}: ${e instanceof Error ? e.message : String(e)}\n`);
    return 1;
  }
  const level: Level = config.logging.level === 'silent' ? 'fatal' : config.logging.level;
  const log = createLog({ pretty, level });
  const daemon = new Daemon({ config, log });
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
    process.stderr.write(`wccpd: ${e instanceof Error ? e.stack ?? e.message : String(e)}\n`);
    process.exit(1);
  },
);
