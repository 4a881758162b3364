// The software fast path check against the real kernel, in a namespace this test creates: the answer agrees with
// what creating a flowtable does, the check itself creates nothing, and the nft backend and the status views say it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { NftRedirector } from '../../../src/dataplane/index.js';
import { createExec } from '../../../src/dataplane/kernel/exec.js';
import { probeFlowtable } from '../../../src/dataplane/nft/flowtable-probe.js';
import { DataplaneError } from '../../../src/dataplane/errors.js';

const skip = need(isRoot && haveCommand('nft') && haveCommand('ip'), 'root with nft and ip (flowtable check)');

describe('software fast path check', { skip }, () => {
  const ns = `wdft-${process.pid}`;
  before(() => {
    execFileSync('ip', ['netns', 'add', ns]);
  });
  after(() => {
    execFileSync('ip', ['netns', 'del', ns]);
  });

  test('agrees with the kernel, and leaves nothing behind', async () => {
    const exec = createExec({ netns: ns });
    const status = await probeFlowtable(exec);
    // The ground truth: really create one (in a table of the test's own), then remove it.
    let kernelHasIt = true;
    try {
      await exec(
        'nft',
        ['-f', '-'],
        'table inet t {\n flowtable f {\n  hook ingress priority filter\n  devices = { lo }\n }\n}\n',
      );
    } catch (e) {
      kernelHasIt = false;
      assert.match((e as DataplaneError).stderr ?? '', /No such file or directory|not supported/);
    }
    await exec('nft', ['-f', '-'], 'add table inet t\ndelete table inet t\n');
    assert.equal(status.flowtable, kernelHasIt);
    assert.equal(status.used, false);
    assert.match(
      status.detail,
      kernelHasIt
        ? /has nftables flowtables/
        : /^software fast path unavailable: this kernel has no nftables flowtable support/,
    );
    assert.doesNotMatch(await exec('nft', ['list', 'tables']), /wccpd_flowtable_probe/);
  });

  test('the nft backend reports it after start()', async () => {
    const r = new NftRedirector({ netns: ns, probeGre: () => Promise.resolve(false) });
    assert.equal(r.fastPath(), null);
    await r.start();
    try {
      const f = r.fastPath();
      assert.ok(f !== null);
      assert.equal(f.flowtable, (await probeFlowtable(createExec({ netns: ns }))).flowtable);
    } finally {
      await r.stop();
    }
  });
});

test("a check that fails for another reason says so, with nft's words", async () => {
  const s = await probeFlowtable(() =>
    Promise.reject(new DataplaneError('command-failed', 'nft failed', 'nft', 'Error: Permission denied')),
  );
  assert.equal(s.flowtable, false);
  assert.equal(s.detail, 'software fast path unavailable: the flowtable check failed (Error: Permission denied)');
});
