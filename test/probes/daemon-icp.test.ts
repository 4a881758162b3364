// The running daemon with the ICP probe on (and the HTTP probe off): three test engines register over WCCP, each with
// an ICP responder on its own address answering as Squid does. One starts answering MISS_NOFETCH (Squid rebuilding
// its store with -Y, or in hit-only mode): it drains (a member, no buckets, not declared dead) and only its buckets
// move; when it answers MISS again it is usable with the very buckets it held.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestEngine } from '../helpers/wccp-engine.js';
import {
  announcingEngines,
  bucketTable,
  engineRows,
  freeUdpPort,
  launchDaemon,
  waitFor,
  wccpctl,
  writeLoopbackConfig,
  type AnnouncingEngines,
  type RunningDaemon,
} from '../helpers/daemon.js';
import { decodeIcp, encodeIcp } from '../../src/wire/icp.js';

const A = '127.0.0.71';
const B = '127.0.0.72';
const C = '127.0.0.73';

type Opcode = 'MISS' | 'MISS_NOFETCH' | 'HIT';

/** An ICP responder on address:port that answers every QUERY with the opcode of the moment. */
async function icpResponder(
  address: string,
  port: number,
): Promise<{ socket: Socket; answer: { opcode: Opcode }; queries: () => number }> {
  const socket = createSocket('udp4');
  const answer = { opcode: 'MISS' as Opcode };
  let queries = 0;
  socket.on('message', (buf, from) => {
    const d = decodeIcp(buf);
    if (!d.ok || d.value.opcode !== 'QUERY') return;
    queries++;
    socket.send(
      encodeIcp({
        opcode: answer.opcode,
        requestNumber: d.value.requestNumber,
        options: 0,
        optionData: 0,
        senderAddress: address,
        url: d.value.url,
      }),
      from.port,
      from.address,
    );
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(port, address, () => resolve());
  });
  return { socket, answer, queries: () => queries };
}

interface EngineRow {
  address: string;
  state: string;
  buckets: number;
  reason: string;
  drains: string[];
}

test('daemon with the ICP probe: an engine answering MISS_NOFETCH drains, and comes back with its buckets on MISS', async () => {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-icp-${process.pid}-`));
  const icpPort = await freeUdpPort();
  const responders = new Map<string, Awaited<ReturnType<typeof icpResponder>>>();
  let daemon: RunningDaemon | undefined;
  let announcing: AnnouncingEngines | undefined;
  try {
    const config = await writeLoopbackConfig(dir, {
      health: ['http:', '  enabled: false', 'icp:', '  enabled: true', `  port: ${icpPort}`, '  interval: 100ms'],
      lenientReceiveId: 2,
    });
    for (const a of [A, B, C]) responders.set(a, await icpResponder(a, icpPort));
    daemon = await launchDaemon(dir, config);
    const { url, output } = daemon;
    const rows = () => engineRows<EngineRow>(url);
    const table = () => bucketTable(url);
    const row = (r: EngineRow[], a: string) => r.find((e) => e.address === a);
    announcing = await announcingEngines(config.udpPort, [A, B, C], 1000);
    const { engines } = announcing;
    await waitFor(
      'three engines usable with buckets',
      async () => {
        const r = await rows();
        return r.length === 3 && r.every((e) => e.state === 'usable' && e.buckets > 0) ? r : null;
      },
      15_000,
    );
    const before = await table();
    assert.ok((responders.get(B)?.queries() ?? 0) > 0, 'the ICP probe queried the engine');

    (responders.get(B) as { answer: { opcode: Opcode } }).answer.opcode = 'MISS_NOFETCH';
    const drained = await waitFor(
      `${B} draining`,
      async () => {
        const r = await rows();
        return row(r, B)?.state === 'draining' && row(r, B)?.buckets === 0 ? r : null;
      },
      10_000,
    );
    assert.equal(row(drained, B)?.reason, 'ICP MISS_NOFETCH');
    const during = await table();
    for (let b = 0; b < 256; b++) {
      if (before[b] === B)
        assert.ok(during[b] === A || during[b] === C, `bucket ${b} of the draining engine went to another engine`);
      else assert.equal(during[b], before[b], `bucket ${b} of another engine stayed`);
    }
    // Still a WCCP member, not declared dead, and a drain holds while it keeps answering MISS_NOFETCH.
    assert.ok(await (engines[1] as TestEngine).hereIAm({ timeoutMs: 2000 }), 'its HERE_I_AM is still answered');
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(row(await rows(), B)?.state, 'draining');
    const ctl = await wccpctl(['--url', url, 'engines']);
    assert.equal(ctl.code, 0, ctl.stderr);
    assert.match(ctl.stdout, new RegExp(`${B.replace(/\./g, '\\.')}.*draining`));

    (responders.get(B) as { answer: { opcode: Opcode } }).answer.opcode = 'MISS';
    const back = await waitFor(
      `${B} usable again`,
      async () => {
        const r = await rows();
        return row(r, B)?.state === 'usable' && (row(r, B)?.buckets ?? 0) > 0 ? r : null;
      },
      10_000,
    );
    assert.equal(row(back, B)?.reason, 'ICP MISS: fetching again');
    assert.deepEqual(await table(), before, 'the engine regains exactly its buckets');
    const log = output.join('');
    assert.match(log, /engine 127\.0\.0\.72 usable -> draining: ICP MISS_NOFETCH/);
    assert.match(log, /engine 127\.0\.0\.72 draining -> usable: ICP MISS: fetching again/);
  } finally {
    await announcing?.stop();
    for (const r of responders.values()) await new Promise<void>((done) => r.socket.close(() => done()));
    await daemon?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
