// An engine whose HERE_I_AMs flap (here its forwarding method, GRE/L2, every datagram) makes one engine-state
// transition per datagram; the log keeps at most 3 lines per engine and second and one more that counts the rest.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startDaemon } from '../helpers/daemon.js';
import { TestEngine } from '../helpers/wccp-engine.js';

test('engine-state log lines of a flapping engine are bounded: at most 4 per second, the rest counted', async () => {
  const daemon = await startDaemon();
  const router = { address: '127.0.0.1', port: daemon.udpPort };
  const o = {
    address: '127.0.0.11',
    router,
    weight: 10_000,
    capabilities: { forwarding: 0x2, assignment: 0x1, return: 0x2 },
  };
  const engine = new TestEngine(o);
  try {
    await engine.start();
    for (let i = 0; i < 3; i++) await engine.hereIAm();
    const logStart = daemon.output.join('').length;
    const started = Date.now();
    const N = 400;
    for (let i = 0; i < N; i++) {
      o.capabilities = { ...o.capabilities, forwarding: i % 2 === 0 ? 0x1 : 0x2 };
      await engine.hereIAm({ timeoutMs: 2000 });
    }
    const seconds = (Date.now() - started) / 1000;
    await new Promise((r) => setTimeout(r, 2500)); // the last second's held line
    const lines = daemon.output
      .join('')
      .slice(logStart)
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { event?: string; engine?: string; coalesced?: number; msg?: string });
    const states = lines.filter((l) => l.event === 'engine-state' && l.engine === '127.0.0.11');
    const events = JSON.parse(await (await fetch(`${daemon.url}/api/v1/events?limit=500`)).text()) as
      { events?: { type: string }[] } | { type: string }[];
    const list = Array.isArray(events) ? events : (events.events ?? []);
    const transitions = list.filter((e) => e.type === 'engine-state').length;
    const logged = states.length + states.reduce((n, l) => n + (l.coalesced ?? 0), 0);
    console.log(
      `${N} flapping HERE_I_AMs in ${seconds.toFixed(1)} s: ${transitions} transitions in the events (last 500), ` +
        `${states.length} engine-state log lines covering ${logged}`,
    );
    assert.ok(transitions >= 100, `the flapping makes transitions (${transitions})`);
    // At most 3 lines per second as they happen, plus one per second counting the rest.
    assert.ok(states.length <= 4 * (Math.ceil(seconds) + 1), `${states.length} lines in ${seconds.toFixed(1)} s`);
    assert.ok(states.some((l) => (l.coalesced ?? 0) > 0 && /more transitions in the last second/.test(l.msg ?? '')));
  } finally {
    await engine.stop();
    await daemon.stop();
  }
});
