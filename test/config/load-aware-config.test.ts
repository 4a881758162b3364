// services[].loadAware: its defaults, a lab's short window, and what the config refuses with a clear message (the
// modes and authorities where load moves would mean nothing, bytes where the data plane does not count them).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseConfig, serviceGroupConfig } from '../../src/config/index.js';
import { problemAt } from './helpers.js';
import { DEFAULT_LOAD_AWARE } from '../../src/cluster/index.js';

const config = (service: string, backend = 'none'): string => `
router:
  address: 192.0.2.1
dataplane:
  backend: ${backend}
services:
  - id: 0
    clientInterfaces: [c0]
    engines:
      allow: [192.0.2.0/24]
${service
  .split('\n')
  .map((l) => `    ${l}`)
  .join('\n')}
`;

describe('loadAware config', () => {
  it('off without the section; on with it, with the defaults; a lab window of 20s', () => {
    const off = parseConfig(config(''), 'l.yaml').services[0]!;
    assert.deepEqual(off.loadAware, DEFAULT_LOAD_AWARE);
    assert.equal(serviceGroupConfig(off).loadAware, undefined);
    const on = parseConfig(config('loadAware: {}'), 'l.yaml').services[0]!;
    assert.deepEqual(on.loadAware, { ...DEFAULT_LOAD_AWARE, enabled: true });
    assert.deepEqual(on.loadAware, {
      enabled: true,
      measure: 'connections',
      windowMs: 300_000,
      tolerance: 1.15,
      maxMovesPerHour: 32,
      holdMs: 1_800_000,
      minConnections: 1000,
    });
    const lab = parseConfig(
      config('loadAware:\n  window: 20s\n  tolerance: 1.1\n  maxMovesPerHour: 64\n  hold: 5m\n  minConnections: 200'),
      'l.yaml',
    ).services[0]!;
    assert.deepEqual(serviceGroupConfig(lab).loadAware, {
      enabled: true,
      measure: 'connections',
      windowMs: 20_000,
      tolerance: 1.1,
      maxMovesPerHour: 64,
      holdMs: 300_000,
      minConnections: 200,
    });
    const kept = parseConfig(config('loadAware: { enabled: false, window: 1m }'), 'l.yaml').services[0]!;
    assert.equal(kept.loadAware.enabled, false);
  });

  it('refuses it where load moves mean nothing, saying why', () => {
    assert.match(
      problemAt(config('mode: primary-standby\nloadAware: {}'), 'services[0].loadAware').message,
      /not available with mode primary-standby: one engine serves every bucket/,
    );
    assert.match(
      problemAt(config('assignment: mask\nloadAware: {}'), 'services[0].loadAware').message,
      /not available with mask assignment/,
    );
    assert.match(
      problemAt(config('authority: designated-engine\nloadAware: {}'), 'services[0].loadAware').message,
      /not available with authority designated-engine/,
    );
    // Turned off, the settings may stay.
    parseConfig(config('mode: primary-standby\nloadAware: { enabled: false }'), 'l.yaml');
  });

  it('refuses bytes where the data plane counts only new connections, and bad numbers', () => {
    assert.match(
      problemAt(config('loadAware: { measure: bytes }', 'nft'), 'services[0].loadAware.measure').message,
      /only the userland backend does; the nft backend counts each new connection once/,
    );
    parseConfig(config('loadAware: { measure: bytes }', 'userland'), 'l.yaml');
    assert.match(
      problemAt(config('loadAware: { tolerance: 1 }'), 'services[0].loadAware.tolerance').message,
      /must be a number above 1/,
    );
    problemAt(config('loadAware: { window: 1s }'), 'services[0].loadAware.window');
    problemAt(config('loadAware: { maxMovesPerHour: 0 }'), 'services[0].loadAware.maxMovesPerHour');
    problemAt(config('loadAware: { measure: packets }'), 'services[0].loadAware.measure');
    problemAt(config('loadAware: { windw: 1m }'), 'services[0].loadAware.windw');
  });
});
