// An engine that moves to another interface, over a fake `ip monitor` and fake ip and nft (no root): which monitor
// lines trigger a look-up (not our own routing tables' lines), that one look-up is ONE `ip -batch` for every engine,
// and what the ingress backend writes when an engine moved or is no longer on-link. The kernel's side is in
// engine-move.kernel.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { IngressRedirector } from '../../src/dataplane/ingress/ingress.js';
import { isOurRouteLine } from '../../src/dataplane/kernel/link-watch.js';
import type { MonitorChild } from '../../src/dataplane/kernel/monitor.js';
import type { NftListings, NftTransactions } from '../../src/dataplane/kernel/nft-session.js';
import { recordingLog } from '../../src/log.js';
import { webCache } from './service-fixture.js';

const E1 = '192.0.2.11';
const E2 = '192.0.2.12';
const T = 'netdev wccpd_ingress';

test("our slots' routing tables' lines are not events; every other route line is", () => {
  assert.equal(isOurRouteLine('default via 192.0.2.11 dev br0 table 2048000012'), true);
  assert.equal(isOurRouteLine('Deleted default via 192.0.2.11 dev br0 table 2048007935'), true);
  assert.equal(isOurRouteLine('192.0.2.11 dev br1 scope link'), false);
  assert.equal(isOurRouteLine('local 192.0.2.1 dev br1 table local proto kernel scope host src 192.0.2.1'), false);
  assert.equal(isOurRouteLine('10.0.0.0/8 via 192.0.2.130 dev o0 table 100'), false);
  assert.equal(isOurRouteLine('default via 192.0.2.130 dev o0 table 2048000000'), false);
});

function setup() {
  const sent: string[] = [];
  const session: NftTransactions = {
    describe: 'a fake',
    pid: () => undefined,
    run: async (text) => void sent.push(text),
    stop: async () => undefined,
  };
  const reader: NftListings = {
    list: async () => '{"nftables":[]}',
    stop: async () => undefined,
    pid: () => undefined,
  };
  // Where each engine is: a device, or a router in front of it.
  const where = new Map<string, { dev: string; via?: string }>([
    [E1, { dev: 'br0' }],
    [E2, { dev: 'br0' }],
  ]);
  const answer = (e: string): string => {
    const w = where.get(e) ?? { dev: 'br0' };
    return JSON.stringify([{ dst: e, dev: w.dev, prefsrc: '192.0.2.1', ...(w.via ? { gateway: w.via } : {}) }]);
  };
  const ipCalls: string[] = [];
  const exec = async (cmd: string, args: readonly string[], input?: string): Promise<string> => {
    assert.equal(cmd, 'ip');
    ipCalls.push([...args, ...(input !== undefined ? [JSON.stringify(input)] : [])].join(' '));
    if (args.includes('-batch'))
      return (input ?? '')
        .split('\n')
        .filter((l) => l.startsWith('route get '))
        .map((l) => answer(l.slice('route get '.length)))
        .join('\n');
    return answer(args.at(-1) ?? '');
  };
  const monitor = Object.assign(new EventEmitter(), {
    stdin: new PassThrough(),
    stdout: new PassThrough(),
    kill: () => true,
  });
  const log = recordingLog();
  const r = new IngressRedirector({
    session,
    reader,
    exec,
    log,
    watchLinks: () => monitor as unknown as MonitorChild,
    linkDebounceMs: 5,
    linkMinGapMs: 20,
  });
  return { r, sent, ipCalls, where, log, line: (l: string) => monitor.stdout.write(`${l}\n`) };
}

test('ingress: a route change moves an engine: one ip batch for all engines, its slot rule rewritten, a log line', async () => {
  const f = setup();
  await f.r.start();
  try {
    await f.r.apply(webCache(() => E1, [E1, E2]));
    const s1 = f.r.slotsInUse().get(`0 l2 ${E1}`);
    const sent = f.sent.length;
    const calls = f.ipCalls.length;
    // Our own routes' lines are no event: nothing is looked up.
    f.line('default via 192.0.2.11 dev br0 table 2048000012');
    await sleep(80);
    assert.equal(f.ipCalls.length, calls);
    // Engine 1 moves to br1.
    f.where.set(E1, { dev: 'br1' });
    f.line('192.0.2.11 dev br1 scope link');
    for (let i = 0; i < 50 && f.sent.length === sent; i++) await sleep(10);
    assert.equal(f.ipCalls.length, calls + 1, 'one ip process');
    assert.match(f.ipCalls.at(-1) ?? '', /-batch - "route get 192\.0\.2\.11\\nroute get 192\.0\.2\.12\\n"/);
    assert.deepEqual(f.sent.slice(sent), [
      `flush chain ${T} slot_${s1}\n` +
        `add rule ${T} slot_${s1} counter name engine_${s1} meta priority set 0 fwd ip to ${E1} device "br1"\n`,
    ]);
    assert.ok(
      f.log.lines.some((l) => l.level === 'warn' && l.msg?.startsWith(`engine ${E1} moved from br0 to br1: `)),
      JSON.stringify(f.log.lines),
    );
    assert.equal(f.r.restored().enginesMoved, 1);
    // Nothing moved: a look-up, no transaction.
    f.line('192.0.2.0/25 dev br0 proto kernel scope link src 192.0.2.1');
    for (let i = 0; i < 50 && f.ipCalls.length === calls + 1; i++) await sleep(10);
    await sleep(30);
    assert.equal(f.sent.length, sent + 1);
    // A new slot of the moved engine (another service) gets br1 without a look-up of its own.
    await f.r.applyAll([webCache(() => E1, [E1, E2]), webCache(() => E1, [E1], { serviceId: 60 })]);
    assert.match(f.sent.at(-1) ?? '', /fwd ip to 192\.0\.2\.11 device "br1"/);
    assert.doesNotMatch(f.sent.at(-1) ?? '', /device "br0"[^]*192\.0\.2\.11|192\.0\.2\.11 device "br0"/);
  } finally {
    await f.r.stop();
  }
});

test('ingress: an engine now behind a router: the error its join gets, logged and counted; nothing rewritten', async () => {
  const f = setup();
  await f.r.start();
  try {
    await f.r.apply(webCache(() => E1, [E1]));
    const sent = f.sent.length;
    const failed = f.r.restored().failedChecks;
    f.where.set(E1, { dev: 'o0', via: '192.0.2.130' });
    f.line('192.0.2.11 via 192.0.2.130 dev o0');
    for (let i = 0; i < 50 && f.r.restored().failedChecks === failed; i++) await sleep(10);
    assert.equal(f.r.restored().failedChecks, failed + 1);
    assert.equal(f.sent.length, sent, 'no transaction');
    const warn = f.log.lines.find((l) => l.level === 'warn' && /no longer on-link/.test(l.msg ?? ''));
    assert.match(
      warn?.msg ?? '',
      /engine 192\.0\.2\.11 is reached via the router 192\.0\.2\.130, not directly.*\(it was on br0\)/,
    );
    // A join behind that router is refused with the same words.
    f.where.set('192.0.2.13', { dev: 'o0', via: '192.0.2.130' });
    await assert.rejects(f.r.apply(webCache(() => E1, [E1, '192.0.2.13'])), (e: Error) =>
      e.message.startsWith('engine 192.0.2.13 is reached via the router 192.0.2.130, not directly: L2 forwarding'),
    );
  } finally {
    await f.r.stop();
  }
});
