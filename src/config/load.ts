// loadConfig: reads the file (and admin.tokenFile) and validates; every failure is a ConfigError naming the file.
import { readFile } from 'node:fs/promises';
import { ConfigError } from './config-error.js';
import { parseConfig } from './parse.js';
import type { Config } from './types.js';

function reason(e: unknown): string {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return 'file not found';
  if (code === 'EACCES') return 'permission denied';
  if (code === 'EISDIR') return 'is a directory, not a file';
  return e instanceof Error ? e.message : String(e);
}

export async function loadConfig(path: string): Promise<Config> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    throw new ConfigError(path, [{ key: '(file)', message: `cannot read the configuration: ${reason(e)}` }]);
  }
  const config = parseConfig(text, path);
  if (config.admin.tokenFile === null) return config;
  let token: string;
  try {
    token = (await readFile(config.admin.tokenFile, 'utf8')).trim();
  } catch (e) {
    throw new ConfigError(path, [
      { key: 'admin.tokenFile', message: `cannot read ${config.admin.tokenFile}: ${reason(e)}` },
    ]);
  }
  if (token === '')
    throw new ConfigError(path, [{ key: 'admin.tokenFile', message: `${config.admin.tokenFile} is empty` }]);
  return { ...config, admin: { ...config.admin, token } };
}
