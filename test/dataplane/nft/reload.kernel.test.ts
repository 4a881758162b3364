// A reload with the nft backend (docs/operations.md, "Reload"): the built wccpd in a gateway namespace, SIGHUP after
// the config gained service 90: its chain is in the nft table, service 0's rules are untouched; SIGHUP after it is
// removed again: its chain is gone. In namespaces this test creates (names carry process.pid); processes by PID.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { waitFor } from '../../helpers/daemon.js';
import type { StatusView } from '../../../src/admin/api-types.js';
import { startGwDaemon, needGwDaemon, type GwDaemon } from '../gw-daemon.js';
import { Topology } from '../topology.js';

const skip = needGwDaemon();

describe('the nft backend on a reload', { skip }, () => {
  const topo = new Topology('rl');
  let d: GwDaemon | undefined;
  before(() => topo.up());
  after(() => topo.downAfter(() => d?.close()));

  test('a service added on reload gets its rules, one removed loses them; the other service is not touched', async () => {
    d = startGwDaemon(topo, { backend: 'nft' });
    const gw = d;
    const status = (): StatusView | null => {
      const text = gw.api('/api/v1/status');
      return text === '' ? null : (JSON.parse(text) as StatusView);
    };
    await waitFor('the admin API', async () => status(), 30_000);
    const config = join(dirname(gw.stateDir), 'wccpd.yaml');
    const base = readFileSync(config, 'utf8');
    const table = (): string => topo.inGw('nft list table inet wccpd');
    /** Service 0's chain, as nft lists it. */
    const chain0 = (): string => /chain svc_0 \{[^}]*\}/.exec(table())?.[0] ?? '';
    const reload = async (text: string, n: number): Promise<void> => {
      writeFileSync(config, text);
      process.kill(gw.pid, 'SIGHUP');
      const s = await waitFor('the reload', async () => ((status()?.config?.reloads ?? 0) >= n ? status() : null));
      assert.equal(s?.config?.lastReload?.ok, true, s?.config?.lastReload?.errors.join('\n'));
    };
    await waitFor('service 0 in the nft table', async () => (chain0() !== '' ? true : null), 30_000);
    const before0 = chain0();
    assert.doesNotMatch(table(), /chain svc_90 /);

    await reload(
      `${base}${['  - id: 90', '    protocol: tcp', '    ports: [8080]', '    clientInterfaces: [c0]', '    engines:', '      allow: [192.0.2.0/25]', ''].join('\n')}`,
      1,
    );
    await waitFor('service 90 in the nft table', async () => (/chain svc_90 /.test(table()) ? true : null), 15_000);
    assert.equal(chain0(), before0, "service 0's chain is as it was");

    await reload(base, 2);
    await waitFor(
      'service 90 gone from the nft table',
      async () => (/chain svc_90 /.test(table()) ? null : true),
      15_000,
    );
    assert.equal(chain0(), before0, "service 0's chain is as it was");
    assert.deepEqual(
      status()?.services.map((s) => s.id),
      [0],
    );
  });
});
