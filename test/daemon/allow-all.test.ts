// engines.allow: [0.0.0.0/0] is accepted, since an admin wrote it out, but the daemon says at start what it means.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { logLines, startDaemon } from '../helpers/daemon.js';

test('wccpd logs a warning at start when a service allows every address (0.0.0.0/0), and none otherwise', async () => {
  for (const [allow, warned] of [
    ['[0.0.0.0/0]', true],
    ['[127.0.0.0/24]', false],
  ] as const) {
    const daemon = await startDaemon([], { allow });
    try {
      const lines = logLines(daemon);
      const warning = lines.find((l) => l.key === 'services[0].engines.allow');
      if (!warned) {
        assert.equal(warning, undefined, `no warning for ${allow}`);
        continue;
      }
      assert.ok(warning, `a warning for ${allow}; output:\n${daemon.output.join('')}`);
      assert.equal(warning.level, 40, 'logged at warn');
      assert.match(
        warning.msg,
        /wccpd\.yaml: services\[0\]\.engines\.allow: 0\.0\.0\.0\/0 allows every address: any host that can reach UDP \d+ may register as an engine of service 0/,
      );
    } finally {
      await daemon.stop();
    }
  }
});
