// The userland backend's link watch on the shims, with a fake `ip monitor link` (no root): which lines reopen which
// sessions, a link flapping in a loop, a link deleted for good, a check pending at stop(). The native failure it
// answers (a session on a link that went down captures nothing afterwards) is in userland-flap.kernel.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { Wire } from '../../../native-free-shims/wire.js';
import * as pcap from '../../../native-free-shims/pcap/index.js';
import * as raw from '../../../native-free-shims/raw-socket/index.js';
import { UserlandRedirector } from '../../../src/dataplane/userland/userland.js';
import { parseLinkLine } from '../../../src/dataplane/userland/link-events.js';
import type { SessionChild } from '../../../src/dataplane/kernel/line-session.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import type { Links } from '../../../src/dataplane/userland/links.js';
import { recordingLog } from '../../../src/log.js';
import { RecordingGuard, shimIo, tcpFrame, tick } from '../../shims/harness.js';
import { webCache } from '../service-fixture.js';

const E1 = '192.0.2.11';

const service = (over: Partial<ServiceRedirect> = {}): ServiceRedirect =>
  webCache(() => E1, [E1], { forwarding: 'gre', ...over });

const down = (dev: string, i = 3): string =>
  `${i}: ${dev}@if2: <BROADCAST,MULTICAST> mtu 1500 qdisc noqueue state DOWN`;
const up = (dev: string, i = 3): string =>
  `${i}: ${dev}@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP`;
const deleted = (dev: string, i = 3): string => `Deleted ${i}: ${dev}@if2: <BROADCAST,MULTICAST> mtu 1500 state DOWN`;

function setup(links?: Links) {
  const wire = new Wire({ localAddress: '192.0.2.1' });
  const io = shimIo(wire);
  const opened: string[] = [];
  const monitor = Object.assign(new EventEmitter(), {
    stdin: new PassThrough(),
    stdout: new PassThrough(),
    kill: () => true,
  });
  const log = recordingLog();
  const r = new UserlandRedirector({
    io: {
      ...io,
      pcap: {
        createSession: (device, options) => {
          opened.push(device);
          return io.pcap.createSession(device, options);
        },
      },
    },
    guard: new RecordingGuard(),
    log,
    watchLinks: true,
    linkMonitor: () => monitor as unknown as SessionChild,
    linkDebounceMs: 5,
    linkMinGapMs: 50,
    ...(links !== undefined ? { links } : {}),
  });
  const gre: string[] = [];
  const engines = raw.createSocket({ protocol: 47, wire });
  engines.on('message', () => gre.push('gre'));
  const client = pcap.createSession('c0', { wire });
  return {
    r,
    log,
    opened,
    gre,
    lines: (...l: string[]) => monitor.stdout.write(`${l.join('\n')}\n`),
    /** Waits (bounded) until `n` sessions were reopened. */
    async reopened(n: number): Promise<number> {
      for (let i = 0; i < 200 && r.stats().capturesReopened < n; i++) await sleep(5);
      return r.stats().capturesReopened;
    },
    send: () => client.inject(tcpFrame({ src: '203.0.113.10', dst: '198.51.100.5', srcPort: 4000, dstPort: 80 }).frame),
    async close() {
      await r.stop();
      client.close();
      engines.close();
      assert.equal(wire.openTaps, 0, 'every session and socket closed');
    },
  };
}

test('parseLinkLine: link lines with their state; deleted links are down; address lines are not links', () => {
  assert.deepEqual(parseLinkLine(up('c0')), { device: 'c0', up: true });
  assert.deepEqual(parseLinkLine(down('c0')), { device: 'c0', up: false });
  assert.deepEqual(parseLinkLine(deleted('c0')), { device: 'c0', up: false });
  assert.deepEqual(parseLinkLine('7: br0: <BROADCAST,MULTICAST,UP> mtu 1500 state UNKNOWN'), {
    device: 'br0',
    up: true,
  });
  assert.equal(parseLinkLine('3: c0    inet 203.0.113.1/28 scope global c0'), null);
  assert.equal(parseLinkLine('       valid_lft forever preferred_lft forever'), null);
});

test('a client interface that goes down and up: its capture reopened once, logged, counted, and it captures', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service({ clientInterfaces: ['c0', 'c1'] }));
  assert.deepEqual(t.opened, ['c0', 'c1']);
  // A link the backend does not use, and an up line for c0 without a down before it (a promiscuity change): nothing.
  t.lines(down('eth9', 9), up('eth9', 9), up('c0'));
  t.lines(down('c0'));
  await sleep(100);
  assert.equal(t.r.stats().capturesReopened, 0, 'nothing reopened while c0 is down');
  t.lines(up('c0'));
  assert.equal(await t.reopened(1), 1);
  assert.deepEqual(t.opened, ['c0', 'c1', 'c0']);
  const info = t.log.lines.filter((l) => l.msg?.includes('reopened'));
  assert.deepEqual(
    info.map((l) => l.msg),
    ['userland reopened its capture session on c0 (service 0): c0 went down and is up again'],
  );
  assert.ok(t.log.lines.some((l) => l.level === 'warn' && l.msg?.includes('c0 went down')));
  t.send();
  await tick();
  assert.equal(t.gre.length, 1, 'the reopened capture redirects');
  await t.close();
});

test('a link flapping in a burst: one reopen; a link deleted for good: none, until it is back', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service());
  const burst: string[] = [];
  for (let i = 0; i < 100; i++) burst.push(down('c0'), up('c0'));
  t.lines(...burst);
  assert.equal(await t.reopened(1), 1);
  await sleep(150);
  assert.equal(t.r.stats().capturesReopened, 1, 'one reopen for the whole burst');
  t.lines(down('c0'), deleted('c0'));
  // Other links keep changing: the deleted link is not retried.
  for (let i = 0; i < 5; i++) {
    t.lines(down('eth9', 9), up('eth9', 9));
    await sleep(60);
  }
  assert.equal(t.r.stats().capturesReopened, 1, 'nothing reopened on a link that is gone');
  t.lines(down('c0', 12), up('c0', 12));
  assert.equal(await t.reopened(2), 2, 're-created (a new ifindex): reopened');
  assert.ok(t.log.lines.some((l) => l.msg?.includes('c0 was deleted and is up again')));
  await t.close();
});

test('a check pending at stop(): nothing is opened after stop', async () => {
  const t = setup();
  await t.r.start();
  await t.r.apply(service());
  t.lines(down('c0'), up('c0'));
  await t.r.stop();
  await sleep(100);
  assert.deepEqual(t.opened, ['c0']);
  assert.equal(t.r.stats().capturesReopened, 0);
  await t.close();
});

test('an L2 engine segment re-created: the injection session reopened and the engine link resolved again', async () => {
  let asked = 0;
  const links: Links = {
    async engineLink() {
      asked++;
      return { device: 'e0', deviceMac: '02:00:00:00:00:e0', engineMac: '02:00:00:00:01:11' };
    },
  };
  const t = setup(links);
  await t.r.start();
  await t.r.apply(service({ forwarding: 'l2' }));
  t.send();
  await tick();
  assert.deepEqual(t.opened, ['c0', 'e0'], 'the injection session on e0 opened at the first frame');
  assert.equal(asked, 1);
  t.lines(deleted('e0', 5), down('e0', 8), up('e0', 8));
  assert.equal(await t.reopened(1), 1);
  assert.deepEqual(t.opened, ['c0', 'e0', 'e0']);
  assert.equal(asked, 2, 'the engine link resolved again');
  await t.close();
});
