// `dataplane.conntrack: services` against the real kernel, in namespaces this test creates (names carry
// process.pid): unrelated forwarded traffic skips conntrack, a service's connections (and the gateway's own) do not,
// and redirection, stickiness and the reset of a gone engine's flows work as with conntrack on everything.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { haveCommand, isRoot, need } from '../../helpers/require.js';
import { NftRedirector } from '../../../src/dataplane/index.js';
import type { Log } from '../../../src/log.js';
import { webCache } from '../service-fixture.js';
import { Topology } from '../topology.js';

const skip = need(
  isRoot && haveCommand('nft') && haveCommand('ip') && haveCommand('conntrack'),
  'root with nft, ip and conntrack (conntrack scope kernel tests)',
);
const E1 = '192.0.2.11';
/** A server on the gateway's own address; says "listening" when it is. */
const GW_SERVER =
  "require('net').createServer((s) => s.end('gateway\\n')).listen(7000, () => console.log('listening'));" +
  'setTimeout(() => process.exit(0), 30000);';

function recorder(): Log & { lines: { level: string; obj: object; msg: string }[] } {
  const lines: { level: string; obj: object; msg: string }[] = [];
  const at =
    (level: string) =>
    (obj: object, msg = ''): void => {
      lines.push({ level, obj, msg });
    };
  return { lines, info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug') };
}

describe('dataplane.conntrack: services in the kernel', { skip }, () => {
  const topo = new Topology('ut');
  const log = recorder();
  let r: NftRedirector;
  /** Conntrack entries in the gateway for this destination and port (0 when none). */
  const tracked = (dst: string, port?: number): number => {
    const filter = port === undefined ? `-d ${dst}` : `-p tcp -d ${dst} --dport ${port}`;
    const out = topo.inGw(`conntrack -L ${filter} 2>/dev/null || true`);
    return out.split('\n').filter((l) => l.includes(dst)).length;
  };

  before(async () => {
    r = await topo.upWith(
      () => new NftRedirector({ netns: topo.gw, conntrack: 'services', log }),
      // An admin's table that relies on conntrack: the redirector must say it would break it.
      () =>
        topo.inGw(
          'nft add table ip adminnat; nft add chain ip adminnat post "{ type nat hook postrouting priority srcnat; }"',
        ),
    );
    await r.apply(webCache(() => E1, [E1]));
  });
  after(() => topo.downAfter(() => r?.stop()));

  test('at start it says unrelated traffic skips conntrack and names the table that NATs', () => {
    assert.ok(log.lines.some((l) => l.level === 'info' && /skip conntrack/.test(l.msg)));
    const warn = log.lines.find((l) => l.level === 'warn');
    assert.match(warn?.msg ?? '', /table ip adminnat uses conntrack/);
    assert.deepEqual((warn?.obj as { tables?: string[] }).tables, ['ip adminnat']);
  });

  test("the service's connections are redirected and tracked; unrelated ones are forwarded and untracked", async () => {
    topo.inGw('conntrack -F 2>/dev/null || true');
    const svc = await topo.probe('198.51.100.7', 80);
    assert.equal(svc.data, 'engine1', JSON.stringify(svc));
    assert.ok(tracked('198.51.100.7', 80) >= 1, 'the redirected connection has a conntrack entry');
    const other = await topo.probe('198.51.100.8', 8080);
    assert.equal(other.data, 'origin', JSON.stringify(other));
    assert.equal(tracked('198.51.100.8', 8080), 0, 'the unrelated connection has no conntrack entry');
    // The gateway's own traffic stays tracked (its firewall may match on state): a connection to a server of its own.
    const server = spawn('ip', ['netns', 'exec', topo.gw, process.execPath, '-e', GW_SERVER], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await once(server.stdout, 'data');
      const own = await topo.probe('203.0.113.1', 7000);
      assert.equal(own.data, 'gateway', JSON.stringify(own));
      assert.ok(tracked('203.0.113.1', 7000) >= 1, "a connection to the gateway's own address is tracked");
    } finally {
      server.kill('SIGTERM');
    }
  });

  test("a redirected flow stays on its engine, and is reset when its engine's slot goes", async () => {
    const held = await topo.hold('198.51.100.9', 80);
    assert.equal(held.first, 'engine1');
    assert.equal(await held.send('ping'), 'engine1', 'the live connection stays on its engine');
    await r.apply(webCache(() => null, []));
    assert.equal(await held.send('ping'), 'error ECONNRESET', "the gone engine's flow is reset at once");
  });

  test('with conntrack on everything (the default), the same unrelated connection is tracked', async () => {
    await r.stop();
    r = new NftRedirector({ netns: topo.gw });
    await r.start();
    await r.apply(webCache(() => E1, [E1]));
    topo.inGw('conntrack -F 2>/dev/null || true');
    const other = await topo.probe('198.51.100.8', 8080);
    assert.equal(other.data, 'origin');
    assert.ok(tracked('198.51.100.8', 8080) >= 1, 'tracked when dataplane.conntrack is all');
  });
});
