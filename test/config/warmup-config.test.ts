// The warm-up config: the top-level broker block and each service's warm-up numbers, their defaults and their errors.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseConfig } from '../../src/config/index.js';
import { MINIMAL, problemAt, withService } from './helpers.js';

describe('warmup config', () => {
  it('without warmup.listen there is no broker, and every service carries the defaults', () => {
    const c = parseConfig(MINIMAL, 'w.yaml');
    assert.deepEqual(c.warmup, {
      listen: null,
      icpPort: 3130,
      httpPort: 3128,
      maxRelayRate: 100_000_000,
      maxObjectBytes: 256 * 1024 * 1024,
    });
    assert.deepEqual(c.services[0]?.warmup, {
      enabled: true,
      durationMs: 600_000,
      maxPeerHits: 100_000,
      minHitRatio: 0.05,
      window: 200,
      peerTimeoutMs: 100,
      source: 'previous-owner',
      minSourceHoldMs: 60_000,
    });
  });

  it('reads the broker block and a service block', () => {
    const c = parseConfig(
      'warmup:\n  listen: 192.0.2.1\n  icpPort: 13130\n  httpPort: 13128\n  maxRelayRate: 1.5G\n  maxObjectSize: 64Mi\n' +
        withService(
          'warmup: { duration: 2m, maxPeerHits: 500, minHitRatio: 0.2, window: 50, peerTimeout: 150ms, source: all-engines, minSourceHold: 0s }',
        ),
      'w.yaml',
    );
    assert.deepEqual(c.warmup, {
      listen: '192.0.2.1',
      icpPort: 13130,
      httpPort: 13128,
      maxRelayRate: 1_500_000_000,
      maxObjectBytes: 64 * 1024 * 1024,
    });
    assert.deepEqual(c.services[0]?.warmup, {
      enabled: true,
      durationMs: 120_000,
      maxPeerHits: 500,
      minHitRatio: 0.2,
      window: 50,
      peerTimeoutMs: 150,
      source: 'all-engines',
      minSourceHoldMs: 0,
    });
  });

  it('a service may turn it off', () => {
    const c = parseConfig(`warmup: { listen: 192.0.2.1 }\n${withService('warmup: { enabled: false }')}`, 'w.yaml');
    assert.equal(c.services[0]?.warmup.enabled, false);
  });

  it('names each mistake', () => {
    assert.match(problemAt(`warmup: { listen: 0.0.0.0 }\n${MINIMAL}`, 'warmup.listen').message, /cache_peer/);
    assert.match(problemAt(`warmup: { listen: nowhere }\n${MINIMAL}`, 'warmup.listen').message, /not an IPv4 address/);
    assert.match(problemAt(`warmup: { icpPort: 3130 }\n${MINIMAL}`, 'warmup.listen').message, /is required/);
    assert.match(
      problemAt(`warmup: { listen: 192.0.2.1, icpPort: 3128 }\n${MINIMAL}`, 'warmup.httpPort').message,
      /same as warmup.icpPort/,
    );
    assert.match(
      problemAt(withService('warmup: { duration: 5m }'), 'services[0].warmup').message,
      /no effect without a top-level warmup.listen/,
    );
    assert.match(
      problemAt(`warmup: { listen: 192.0.2.1, maxRelayRate: fast }\n${MINIMAL}`, 'warmup.maxRelayRate').message,
      /byte count .*100M, 1G/,
    );
    assert.match(
      problemAt(`warmup: { listen: 192.0.2.1, maxRelayRate: 1000 }\n${MINIMAL}`, 'warmup.maxRelayRate').message,
      /0 \(no limit\) or at least 64Ki/,
    );
    assert.match(
      problemAt(`warmup: { listen: 192.0.2.1, maxObjectSize: 0 }\n${MINIMAL}`, 'warmup.maxObjectSize').message,
      /from 1 to/,
    );
    const on = `warmup: { listen: 192.0.2.1 }\n`;
    assert.match(
      problemAt(on + withService('warmup: { minHitRatio: 1.5 }'), 'services[0].warmup.minHitRatio').message,
      /0 to 1/,
    );
    assert.match(
      problemAt(on + withService('warmup: { source: everyone }'), 'services[0].warmup.source').message,
      /previous-owner, all-engines/,
    );
    assert.match(
      problemAt(on + withService('warmup: { peerTimeout: 10s }'), 'services[0].warmup.peerTimeout').message,
      /1ms to 5s/,
    );
    assert.match(
      problemAt(on + withService('warmup: { maxPeerHit: 5 }'), 'services[0].warmup.maxPeerHit').message,
      /did you mean "maxPeerHits"/,
    );
    assert.match(
      problemAt(on + withService('warmup: { window: 0 }'), 'services[0].warmup.window').message,
      /1 to 100000/,
    );
    assert.match(
      problemAt(on + withService('warmup: { minSourceHold: 25h }'), 'services[0].warmup.minSourceHold').message,
      /0s to 24h/,
    );
  });
});
