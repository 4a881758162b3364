// The warnings check-config prints are logged at warn when the daemon starts, each with its key, and the daemon runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { logLines, startDaemon } from '../helpers/daemon.js';

test('wccpd logs at start a client interface this host lacks and backend none, and keeps running', async () => {
  const daemon = await startDaemon(['clientInterfaces: [lo, nosuch-wccpd9]']);
  try {
    const lines = logLines(daemon);
    const warned = (key: string) => lines.find((l) => l.key === key && l.level === 40);
    assert.match(
      warned('services[0].clientInterfaces')?.msg ?? daemon.output.join(''),
      /wccpd\.yaml: services\[0\]\.clientInterfaces: "nosuch-wccpd9" is not an interface on this host \(.*\blo\b.*\): no packet arrives on it, so service 0 redirects nothing from it/,
    );
    assert.match(
      warned('dataplane.backend')?.msg ?? '',
      /dataplane\.backend: none: engines register and buckets are assigned, but no packet is redirected/,
    );
    // lo exists, the state directory is absolute, the token is not the example's, the API is on loopback.
    for (const key of ['stateDir', 'admin.token', 'admin.listen'])
      assert.equal(warned(key), undefined, `no warning for ${key}`);
    assert.equal(lines.filter((l) => l.key === 'services[0].clientInterfaces').length, 1, 'lo is not named');
    assert.equal((await fetch(`${daemon.url}/api/v1/services/0/buckets`)).status, 200, 'the daemon runs on');
  } finally {
    await daemon.stop();
  }
});
