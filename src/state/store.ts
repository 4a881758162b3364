// Atomic persistence in stateDir. Save: write a temp file, fsync it, keep the current file as the previous generation,
// rename the temp file into place, fsync the directory. Load: the newest good generation; bad files are reported,
// never thrown. Saves to one directory run one at a time, in call order.
import { constants } from 'node:fs';
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeState, encodeState } from './codec.js';
import { emptyState, type PersistedState } from './types.js';

export const STATE_FILE = 'state.json';
export const PREVIOUS_STATE_FILE = 'state.prev.json';

export interface BadStateFile {
  readonly file: string;
  readonly reason: string;
}

export interface LoadedState {
  readonly state: PersistedState;
  /** Which generation the state came from; `empty` when there was none good (a first start, or all bad). */
  readonly source: 'current' | 'previous' | 'empty';
  /** The file the state was read from, or null for the empty state. */
  readonly file: string | null;
  /** Files that exist but could not be used, and why (missing files are not problems). */
  readonly bad: readonly BadStateFile[];
}

const queues = new Map<string, Promise<void>>();
let tempSerial = 0;

async function fsyncPath(path: string, flags: number): Promise<void> {
  const fh = await open(path, flags);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

async function writeGeneration(dir: string, state: PersistedState): Promise<void> {
  await mkdir(dir, { recursive: true });
  const temp = join(dir, `${STATE_FILE}.tmp-${process.pid}-${++tempSerial}`);
  try {
    const fh = await open(temp, 'w', 0o640);
    try {
      await fh.writeFile(encodeState(state));
      await fh.sync();
    } finally {
      await fh.close();
    }
    try {
      await rename(join(dir, STATE_FILE), join(dir, PREVIOUS_STATE_FILE));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    await rename(temp, join(dir, STATE_FILE));
  } catch (e) {
    await rm(temp, { force: true });
    throw e;
  }
  // The renames are durable only once the directory entry is on disk.
  await fsyncPath(dir, constants.O_RDONLY | constants.O_DIRECTORY);
}

/** Saves state atomically; concurrent calls for one directory are serialized. Rejects with the file system's error. */
export function saveState(dir: string, state: PersistedState): Promise<void> {
  const previous = queues.get(dir) ?? Promise.resolve();
  const mine = previous.catch(() => undefined).then(() => writeGeneration(dir, state));
  const tail = mine.catch(() => undefined);
  queues.set(dir, tail);
  void tail.then(() => {
    if (queues.get(dir) === tail) queues.delete(dir);
  });
  return mine;
}

async function readGeneration(path: string): Promise<{ state: PersistedState } | BadStateFile | null> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    return { file: path, reason: `cannot read: ${(e as Error).message}` };
  }
  const decoded = decodeState(bytes);
  return decoded.ok ? { state: decoded.state } : { file: path, reason: decoded.reason };
}

/** The last good state in dir: the current generation, else the previous one, else the empty state. Never throws. */
export async function loadState(dir: string): Promise<LoadedState> {
  const bad: BadStateFile[] = [];
  for (const [name, source] of [
    [STATE_FILE, 'current'],
    [PREVIOUS_STATE_FILE, 'previous'],
  ] as const) {
    const file = join(dir, name);
    const r = await readGeneration(file);
    if (r === null) continue;
    if ('state' in r) return { state: r.state, source, file, bad };
    bad.push(r);
  }
  return { state: emptyState(), source: 'empty', file: null, bad };
}
