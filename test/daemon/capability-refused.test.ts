// An engine refused for its capabilities (Squid's default GRE forwarding and return against wccpd's default L2) is
// told the fix wherever an operator looks: the daemon's log line, the API's engine view and `wccpctl engines`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { logLines, startDaemon, waitFor, wccpctl } from '../helpers/daemon.js';
import { TestEngine } from '../helpers/wccp-engine.js';

const FIX =
  'fix: on a Squid engine add to squid.conf "wccp2_forwarding_method l2", "wccp2_return_method l2"; ' +
  "or set forwarding: gre, return: gre in the service's wccpd config (docs/squid.md)";

test('a GRE-only engine is refused with the squid.conf lines and the wccpd keys that fix it', async () => {
  const daemon = await startDaemon();
  // What Squid announces with no wccp2_*_method line: GRE forwarding, hash assignment, GRE return.
  const engine = new TestEngine({
    address: '127.0.0.11',
    router: { address: '127.0.0.1', port: daemon.udpPort },
    capabilities: { forwarding: 0x1, assignment: 0x1, return: 0x1 },
  });
  try {
    await engine.start();
    for (let i = 0; i < 3; i++) await engine.hereIAm();
    const refusal = await waitFor('the refusal logged', async () =>
      logLines(daemon).find((l) => /HERE_I_AM from 127\.0\.0\.11 refused/.test(l.msg)),
    );
    assert.equal(refusal.level, 40);
    assert.equal(
      refusal.msg,
      'HERE_I_AM from 127.0.0.11 refused: forwarding method: engine offers GRE, service uses L2; ' +
        `return method: engine offers GRE, service uses L2; ${FIX}`,
    );

    const view = (await (await fetch(`${daemon.url}/api/v1/services/0/engines`)).json()) as {
      engines: { address: string; state: string; flags: { refused?: string | null } }[];
    };
    const e = view.engines.find((x) => x.address === '127.0.0.11');
    assert.equal(e?.state, 'joining');
    assert.ok(e?.flags.refused?.endsWith(FIX), JSON.stringify(e));

    const ctl = await wccpctl(['--url', daemon.url, 'engines']);
    assert.equal(ctl.code, 0, ctl.stderr);
    assert.ok(ctl.stdout.includes('wccp2_forwarding_method l2'), ctl.stdout);
    assert.ok(ctl.stdout.replace(/\s+/g, ' ').includes(FIX), ctl.stdout);
  } finally {
    await engine.stop();
    await daemon.stop();
  }
});
