// A file in the state directory replaced atomically: a temp file, fsync, rename over the old one, fsync of the
// directory; after a crash it holds either the old text or the new one, never part of either.
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';

let serial = 0;

export async function writeFileAtomic(file: string, body: string, mode = 0o640): Promise<void> {
  const dir = dirname(file);
  await mkdir(dir, { recursive: true });
  const temp = `${file}.tmp-${process.pid}-${++serial}`;
  try {
    const fh = await open(temp, 'w', mode);
    try {
      await fh.writeFile(body);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(temp, file);
  } catch (e) {
    await rm(temp, { force: true });
    throw e;
  }
  const d = await open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}
