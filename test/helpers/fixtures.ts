// Real datagrams captured from Squid (test/fixtures/*/README.md says how). Tests read them through here, so the
// repository is self-contained wherever it is cloned.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const FIXTURES = fileURLToPath(new URL('../fixtures', import.meta.url));

/** One `.hex` fixture (one UDP payload as a line of hex) as bytes, e.g.
 * fixtureBytes('squid-5.7/here-i-am-hash-192.0.2.11.hex'). */
export function fixtureBytes(path: string): Buffer {
  return Buffer.from(readFileSync(`${FIXTURES}/${path}`, 'utf8').trim(), 'hex');
}
