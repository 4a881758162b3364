// The linter keeps the floors of docs/architecture.md: an import that runs up the house, or from one data-plane
// backend into another, fails `npm run lint`; what the table allows passes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const eslint = new ESLint({ cwd: REPO });

/** The no-restricted-imports messages for `line` in a file at `path` (it need not exist). */
async function refusals(path: string, line: string): Promise<string[]> {
  const [result] = await eslint.lintText(`${line}\nexport const used = x;\n`, { filePath: `${REPO}${path}` });
  return (result?.messages ?? []).filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
}

test('an import that runs up the house fails lint', async () => {
  const upward: [string, string][] = [
    ['src/buckets/upward.ts', "import { x } from '../dataplane/redirector.js';"],
    ['src/wire/upward.ts', "import type { x } from '../cluster/types.js';"],
    ['src/cluster/authority/upward.ts', "import { x } from '../../control/index.js';"],
    ['src/dataplane/nft/upward.ts', "import type { x } from '../../config/types.js';"],
    ['src/vocabulary.ts', "import { x } from './log.js';"],
    ['src/config/upward.ts', "import { x } from '../dataplane/index.js';"],
    ['src/state/upward.ts', "import { x } from '../daemon.js';"],
    ['src/control/upward.ts', "import { x } from '../daemon/reload.js';"],
  ];
  for (const [path, line] of upward) {
    const found = await refusals(path, line);
    assert.equal(found.length, 1, `${path}: ${line} should fail: ${JSON.stringify(found)}`);
    assert.match(found[0] ?? '', /docs\/architecture\.md/);
  }
});

test('a data-plane backend imports no other backend, and the shared plumbing none', async () => {
  const across: [string, string][] = [
    ['src/dataplane/nft/across.ts', "import { x } from '../ingress/ingress.js';"],
    ['src/dataplane/userland/across.ts', "import { x } from '../nft/ruleset.js';"],
    ['src/dataplane/ingress/across.ts', "import { x } from '../index.js';"],
    ['src/dataplane/kernel/across.ts', "import { x } from '../userland/guard.js';"],
    ['src/dataplane/redirector.ts', "import { x } from './kernel/exec.js';"],
  ];
  for (const [path, line] of across) assert.equal((await refusals(path, line)).length, 1, `${path}: ${line}`);
});

test('what the house table allows passes', async () => {
  const allowed: [string, string][] = [
    ['src/buckets/down.ts', "import { x } from '../wire/constants.js';"],
    ['src/cluster/authority/down.ts', "import { x } from '../../buckets/table.js';"],
    ['src/cluster/authority/down.ts', "import { x } from '../types.js';"],
    ['src/config/down.ts', "import { x } from '../dataplane/settings.js';"],
    ['src/dataplane/nft/down.ts', "import { x } from '../kernel/exec.js';"],
    ['src/dataplane/nft/down.ts', "import { x } from '../../log.js';"],
    ['src/dataplane/explain.ts', "import { x } from './kernel/rules.js';"],
    ['src/daemon.ts', "import { x } from './dataplane/index.js';"],
    ['src/daemon/down.ts', "import { x } from '../dataplane/apply.js';"],
    ['src/cli/down.ts', "import { x } from '../daemon.js';"],
  ];
  for (const [path, line] of allowed) assert.deepEqual(await refusals(path, line), [], `${path}: ${line}`);
});
