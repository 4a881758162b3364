// A tiny entry point for `wccpd check-config` until src/cli/wccpd.ts wires it: node --import tsx src/config/check-config-main.ts PATH
import { runCheckConfig } from './check-config.js';

const path = process.argv[2];
if (path === undefined || process.argv.length > 3) {
  process.stderr.write('usage: check-config PATH\n');
  process.exitCode = 2;
} else {
  process.exitCode = await runCheckConfig(path, process.stdout, process.stderr);
}
