// Services whose tables change at the same moment reach the data plane in ONE apply: when an engine that serves a
// TPROXY-like pair (service 0 by destination, service 90 by source) fails its health probe, both tables change in the
// same tick and the nft backend writes both in one transaction (a fake `nft`/`ip` records each one). A service whose
// apply the data plane refuses does not keep the other's change out: the batch is applied again one service at a time.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import type { Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { DataplaneError, NftRedirector } from '../../src/dataplane/index.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import type { Redirector, ServiceRedirect } from '../../src/dataplane/index.js';
import type { Exec } from '../../src/dataplane/kernel/exec.js';
import { SQUID_HTTP_PORT } from '../../src/vocabulary.js';
import { recordingLog } from '../../src/log.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { waitFor, writeLoopbackConfig } from '../helpers/daemon.js';
import type { BucketsView } from '../../src/admin/api-types.js';
import { fakeRouteGets } from '../dataplane/service-fixture.js';

const A = '127.0.0.91';
const B = '127.0.0.92';
const SERVICES = [0, 90] as const;

/** A fake `nft`/`ip`: every `nft -f -` transaction's text is recorded; listings are empty. */
function fakeKernel(): { exec: Exec; transactions: string[] } {
  const transactions: string[] = [];
  const exec: Exec = (cmd, args, input) => {
    if (cmd === 'ip' && args.includes('-batch')) return Promise.resolve(fakeRouteGets(input));
    if (cmd === 'ip' && args.includes('-j')) return Promise.resolve('[]');
    if (cmd === 'nft' && args[0] === '-j') return Promise.resolve('{"nftables": []}');
    if (cmd === 'nft' && args[0] === 'list')
      return Promise.reject(new DataplaneError('command-failed', 'no such table'));
    if (cmd === 'nft' && args[0] === '-f' && input !== undefined) transactions.push(input);
    return Promise.resolve('');
  };
  return { exec, transactions };
}

/** Squid 5.7's answer to the HTTP probe (OPTIONS, Max-Forwards: 0), on the engine's proxy port. */
async function proxyStandIn(address: string): Promise<Server> {
  const answer = 'HTTP/1.1 501 Not Implemented\r\nServer: squid/5.7\r\nContent-Length: 0\r\nConnection: close\r\n\r\n';
  const server = createServer((s) => {
    s.on('error', () => undefined);
    s.once('data', () => s.end(answer));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(SQUID_HTTP_PORT, address, () => resolve());
  });
  return server;
}

const closeServer = (s: Server): Promise<void> =>
  new Promise((r) => {
    s.close(() => r());
  });

interface Pair {
  readonly url: string;
  readonly log: ReturnType<typeof recordingLog>;
  readonly proxies: Map<string, Server>;
  readonly daemon: Daemon;
  /** The buckets view of a service (the table decided, and the one in force). */
  view(service: number): Promise<BucketsView>;
}

/**
 * wccpd with services 0 and 90 (both `mode: consistent`, the HTTP probe on, timers.settle 0 so every change is at
 * once), engines A and B registered in both, and both tables in force with both engines.
 */
async function withPair(redirector: Redirector, run: (p: Pair) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), `wccpd-batch-${process.pid}-`));
  const config = await writeLoopbackConfig(dir, {
    lenientReceiveId: 0,
    settle: '0ms',
    health: [],
    service: ['mode: consistent'],
    moreServices: [
      '- id: 90',
      '  protocol: tcp',
      '  ports: [80]',
      '  portsSource: true',
      '  mode: consistent',
      '  engines:',
      '    allow: [127.0.0.0/24]',
      '    lenientReceiveId: 0',
    ],
  });
  const url = `http://127.0.0.1:${config.httpPort}`;
  const log = recordingLog();
  const daemon = new Daemon({
    config: await loadConfig(config.path),
    log,
    redirector,
    checkBridgeNetfilter: async () => ({ loaded: false, callIptables: false, bridges: [], active: false }),
  });
  const proxies = new Map<string, Server>();
  const engines: TestEngine[] = [];
  const router = { address: '127.0.0.1', port: config.udpPort };
  const view = async (service: number) =>
    (await (await fetch(`${url}/api/v1/services/${service}/buckets`)).json()) as BucketsView;
  try {
    for (const a of [A, B]) proxies.set(a, await proxyStandIn(a));
    await daemon.start();
    for (const address of [A, B]) {
      engines.push(new TestEngine({ address, router }));
      engines.push(
        new TestEngine({
          address,
          router,
          serviceId: 90,
          dynamic: { protocol: 6, ports: [80], flags: 0x31, priority: 240 },
        }),
      );
    }
    for (const e of engines) await e.start();
    for (let round = 0; round < 2; round++) for (const e of engines) await e.hereIAm();
    for (const id of SERVICES)
      await waitFor(`service ${id}'s two-engine table in force`, async () => {
        const t = await view(id);
        return t.buckets.includes(A) && t.buckets.includes(B) && t.inForce?.changeNumber === t.changeNumber
          ? true
          : null;
      });
    await run({ url, log, proxies, daemon, view });
  } finally {
    for (const e of engines) await e.stop();
    await daemon.stop();
    for (const s of proxies.values()) await closeServer(s);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Waits until every bucket of `service` is B's in the table decided and in force. */
const healedOntoB = (p: Pair, service: number) =>
  waitFor(`service ${service}'s table without A in force`, async () => {
    const t = await p.view(service);
    return t.buckets.every((e) => e === B) && t.inForce?.changeNumber === t.changeNumber ? t : null;
  });

test("an engine of both services failing its probe changes both services' tables in ONE nft transaction", async () => {
  const k = fakeKernel();
  const nft = new NftRedirector({ exec: k.exec, probeGre: () => Promise.resolve(false) });
  await withPair(nft, async (p) => {
    await nft.settled();
    const before = k.transactions.length;
    const tables = await Promise.all(SERVICES.map((id) => p.view(id)));
    await closeServer(p.proxies.get(A) as Server);
    p.proxies.delete(A);
    for (const id of SERVICES) await healedOntoB(p, id);
    await nft.settled();
    const after = k.transactions.slice(before);
    // Both tables moved on, and the one transaction since A failed rewrote both bucket maps.
    for (const [i, id] of SERVICES.entries())
      assert.ok((await p.view(id)).changeNumber > (tables[i]?.changeNumber ?? Infinity), `service ${id} changed`);
    assert.equal(after.length, 1, `one transaction for both services, saw ${after.length}:\n${after.join('\n---\n')}`);
    for (const id of SERVICES) assert.match(after[0] ?? '', new RegExp(`^flush map inet wccpd bucket_${id}$`, 'm'));
  });
});

/** Refuses every apply that holds service 90 while `refuse90` is set, as a kernel rejecting that table would. */
class Refuses90 extends MemoryRedirector {
  refuse90 = false;
  refused = 0;
  override async applyAll(services: readonly ServiceRedirect[]): Promise<void> {
    if (this.refuse90 && services.some((s) => s.serviceId === 90)) {
      this.refused++;
      throw new Error('nft: Error: Could not process rule: No such file or directory');
    }
    await super.applyAll(services);
  }
}

test("a service whose apply is refused keeps no other service's change out: the batch is split, the refused one retries", async () => {
  const r = new Refuses90();
  await withPair(r, async (p) => {
    const batchesBefore = r.batches.length;
    r.refuse90 = true;
    await closeServer(p.proxies.get(A) as Server);
    p.proxies.delete(A);
    // Service 0 heals at once, on its own; 90's table is decided but the older one stays in force.
    const zero = await healedOntoB(p, 0);
    assert.equal(r.service(0)?.table.changeNumber, zero.changeNumber);
    const ninety = await waitFor('service 90 decided without A', async () => {
      const t = await p.view(90);
      return t.buckets.every((e) => e === B) ? t : null;
    });
    assert.ok((ninety.inForce?.changeNumber ?? Infinity) < ninety.changeNumber, 'the refused table is not in force');
    assert.ok(r.service(90)?.table.buckets.includes(A), 'the data plane still holds 90 with A');
    await waitFor('the logged split and retry', async () =>
      p.log.lines.some((l) => /services 0, 90 together failed/.test(l.msg ?? '')) &&
      p.log.lines.some((l) => l.level === 'error' && /service 90 .*retrying in/.test(l.msg ?? ''))
        ? true
        : null,
    );
    // The split applied 0 alone: the only batch that came into force since holds service 0 and not 90.
    assert.deepEqual(
      r.batches.slice(batchesBefore).map((b) => b.map((s) => s.serviceId)),
      [[0]],
    );
    // Once the cause is gone, the retry brings 90 into force too.
    r.refuse90 = false;
    await waitFor(
      'service 90 in force after its retry',
      async () => {
        const t = await p.view(90);
        return t.inForce?.changeNumber === t.changeNumber ? true : null;
      },
      10_000,
    );
    assert.ok(r.service(90)?.table.buckets.every((e) => e === B));
    assert.ok(r.refused >= 2, 'the batch and 90 on its own were both refused');
  });
});
