// The MAC addresses the ingress backend hands IPv6 frames over with (src/dataplane/ingress/engine-macs.ts): read from
// one `ip -j -batch` answer, line by line; and which `ip monitor` neighbour lines ask the engine watch for a check.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { engineMacs, macKey } from '../../../src/dataplane/ingress/engine-macs.js';
import { isNeighbourLine } from '../../../src/dataplane/kernel/link-watch.js';
import type { RunBatch } from '../../../src/dataplane/kernel/routes.js';

const BR0 = JSON.stringify([{ ifname: 'br0', link_type: 'ether', address: '02:00:00:00:00:01' }]);

/** A batch that answers each line from `answers` (one JSON line each, as ip does), recording the lines asked. */
function batchOf(answers: Record<string, string>, failed = new Map<number, string>()) {
  const asked: string[] = [];
  const batch: RunBatch = async (lines) => {
    asked.push(...lines);
    return { out: lines.map((l) => `${answers[l] ?? '[]'}\n`).join(''), failed };
  };
  return { batch, asked };
}

describe('ingress IPv6: engine MAC addresses', () => {
  test('one batch: each engine neighbour entry, each device once; an unresolved entry is no MAC', async () => {
    const { batch, asked } = batchOf({
      'neigh show to 192.0.2.11 dev br0': JSON.stringify([
        { dst: '192.0.2.11', lladdr: '0a:00:00:00:00:11', state: ['STALE'] },
      ]),
      'neigh show to 192.0.2.12 dev br0': JSON.stringify([{ dst: '192.0.2.12', state: ['FAILED'] }]),
      'neigh show to 192.0.2.13 dev br0': JSON.stringify([
        { dst: '192.0.2.13', lladdr: '0a:00:00:00:00:13', state: ['INCOMPLETE'] },
      ]),
      'link show dev br0': BR0,
    });
    const engines = ['192.0.2.11', '192.0.2.12', '192.0.2.13', '192.0.2.14'].map((engine) => ({
      engine,
      device: 'br0',
    }));
    const macs = await engineMacs(batch, engines);
    assert.deepEqual(asked, [...engines.map((e) => `neigh show to ${e.engine} dev br0`), 'link show dev br0']);
    assert.deepEqual(macs.get(macKey('192.0.2.11', 'br0')), {
      mac: '0a:00:00:00:00:11',
      deviceMac: '02:00:00:00:00:01',
    });
    for (const e of ['192.0.2.12', '192.0.2.13', '192.0.2.14'])
      assert.deepEqual(macs.get(macKey(e, 'br0')), { mac: null, deviceMac: '02:00:00:00:00:01' }, e);
  });

  test('a failed line (a device gone) shifts the answers: nothing is trusted, every MAC unknown', async () => {
    const { batch } = batchOf(
      {
        'neigh show to 192.0.2.11 dev br0': JSON.stringify([{ dst: '192.0.2.11', lladdr: '0a:00:00:00:00:11' }]),
        'link show dev br0': BR0,
      },
      new Map([[2, 'Cannot find device "br1"']]),
    );
    const macs = await engineMacs(batch, [
      { engine: '192.0.2.11', device: 'br0' },
      { engine: '192.0.2.12', device: 'br1' },
    ]);
    assert.deepEqual(
      [...macs.values()],
      [
        { mac: null, deviceMac: null },
        { mac: null, deviceMac: null },
      ],
    );
  });

  test('neighbour lines of ip monitor are told from link, address and route lines', () => {
    for (const l of [
      '192.0.2.11 dev br0 lladdr 0a:00:00:00:00:11 REACHABLE',
      '192.0.2.11 dev br0 lladdr 0a:00:00:00:00:11 STALE',
      'Deleted 192.0.2.11 dev br0 lladdr 0a:00:00:00:00:11 STALE',
      '192.0.2.12 dev br0 FAILED',
    ])
      assert.ok(isNeighbourLine(l), l);
    for (const l of [
      '4: br0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP group default',
      '192.0.2.0/25 dev br0 proto kernel scope link src 192.0.2.1',
      '5: e1    inet 192.0.2.1/25 scope global br0',
    ])
      assert.ok(!isNeighbourLine(l), l);
  });
});
