// Reload without a restart (issue 31, docs/operations.md "Reload"): the real wccpd, SIGHUP after an edit that adds a
// service, changes a weight in one and removes another; only what changed moves. Then broken configs (a YAML syntax
// error, a bad value, a changed router address): refused whole, wccpd runs on the config before, and the status, the
// API, wccpctl and /metrics say the last reload failed and why. In-process, with the memory data plane: a service
// added or removed reaches the data plane, and a thousand reloads leave no timer, socket or handle behind.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assignBuckets } from '../../src/buckets/assign.js';
import { Daemon } from '../../src/daemon.js';
import { loadConfig } from '../../src/config/index.js';
import { recordingLog } from '../../src/log.js';
import type { BucketsView, StatusView } from '../../src/admin/api-types.js';
import { MemoryRedirector } from '../helpers/memory-redirector.js';
import { TestEngine } from '../helpers/wccp-engine.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import { TOKEN, launchDaemon, logLines, waitFor, wccpctl, writeLoopbackConfig } from '../helpers/daemon.js';
import type { RunningDaemon } from '../helpers/daemon.js';

const E1 = '127.0.0.11';
const E2 = '127.0.0.12';
/** A dynamic service on TCP port `port`, as the test engines describe it too. */
const dynamic = (id: number, port: number, extra: readonly string[] = []): string[] => [
  `- id: ${id}`,
  '  protocol: tcp',
  `  ports: [${port}]`,
  ...extra.map((l) => `  ${l}`),
  '  engines:',
  '    allow: [127.0.0.0/24]',
  '    lenientReceiveId: 0',
];
const PORT = { 90: 8090, 91: 8091, 92: 8092 } as const;
type Dyn = keyof typeof PORT;

async function get<T>(url: string): Promise<T> {
  const r = await fetch(url);
  assert.equal(r.status, 200, `GET ${url}`);
  return (await r.json()) as T;
}

describe('SIGHUP: a service added, a weight changed, a service removed; then broken configs', () => {
  let dir = '';
  let path = '';
  let daemon: RunningDaemon;
  const engines = new Map<string, TestEngine>();
  let keepAlive: ReturnType<typeof setInterval> | undefined;
  /** Service 0, 90 and 91 before the reload: 92 comes, 91 goes, 90's weights change. */
  let first = '';

  const engine = async (address: string, service: 0 | Dyn): Promise<TestEngine> => {
    const e = new TestEngine({
      address,
      router: { address: '127.0.0.1', port: daemon.udpPort },
      ...(service === 0
        ? {}
        : { serviceId: service, dynamic: { protocol: 6, ports: [PORT[service]], flags: 0x12, priority: 100 } }),
    });
    await e.start();
    engines.set(`${service} ${address}`, e);
    return e;
  };
  const buckets = (service: number) => get<BucketsView>(`${daemon.url}/api/v1/services/${service}/buckets`);
  const status = () => get<StatusView>(`${daemon.url}/api/v1/status`);
  const metrics = async () => parsePrometheusText(await (await fetch(`${daemon.url}/metrics`)).text()).samples;
  const register = async (service: 0 | Dyn) => {
    const es = [await engine(E1, service), await engine(E2, service)];
    for (let round = 0; round < 2; round++) for (const e of es) await e.hereIAm();
    await waitFor(`both engines holding buckets of service ${service}`, async () => {
      const t = await buckets(service);
      return t.buckets.includes(E1) && t.buckets.includes(E2) ? t : null;
    });
  };
  /** Writes `text` as the config, sends SIGHUP and waits for the reload it asks for to be over. */
  const reload = async (text: string): Promise<NonNullable<NonNullable<StatusView['config']>['lastReload']>> => {
    const n = (await status()).config?.reloads ?? 0;
    writeFileSync(path, text);
    daemon.child.kill('SIGHUP');
    const s = await waitFor('the reload', async () => {
      const c = (await status()).config;
      return c !== undefined && c.reloads > n ? c : null;
    });
    assert.equal(daemon.child.exitCode, null, 'wccpd runs on');
    assert.ok(s.lastReload !== null);
    return s.lastReload;
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), `wccpd-reload-${process.pid}-`));
    const config = await writeLoopbackConfig(dir, {
      settle: '0ms',
      lenientReceiveId: 0,
      moreServices: [...dynamic(90, PORT[90]), ...dynamic(91, PORT[91])],
    });
    path = config.path;
    first = readFileSync(path, 'utf8');
    daemon = await launchDaemon(dir, config);
    for (const s of [0, 90, 91] as const) await register(s);
    keepAlive = setInterval(() => {
      for (const e of engines.values()) void e.hereIAm({ timeoutMs: 200 }).catch(() => undefined);
    }, 3000);
  });
  after(async () => {
    clearInterval(keepAlive);
    for (const e of engines.values()) await e.stop();
    await daemon?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  let applied = '';
  it('applies only what changed: service 0 keeps every bucket, 90 moves as the assignment says, 91 goes, 92 comes', async () => {
    const before0 = await buckets(0);
    const before90 = await buckets(90);
    applied = first
      .replace(dynamic(90, PORT[90]).join('\n  '), dynamic(90, PORT[90], [`weights: { ${E1}: 30000 }`]).join('\n  '))
      .replace(dynamic(91, PORT[91]).join('\n  '), dynamic(92, PORT[92]).join('\n  '));
    assert.notEqual(applied, first);
    const r = await reload(applied);
    assert.equal(r.ok, true, r.errors.join('\n'));
    assert.deepEqual(r.changed, [
      'services[1].weights (service 90)',
      'services[2] (service 92 added)',
      'service 91 removed',
    ]);

    const after0 = await buckets(0);
    assert.deepEqual(after0.buckets, before0.buckets, 'service 0: not one bucket moved');
    assert.equal(after0.changeNumber, before0.changeNumber);

    // The balance assignment with the new weights, from the table before: what the weight change must move, no more.
    const predicted = assignBuckets(
      { changeNumber: before90.changeNumber, buckets: before90.buckets },
      [
        { address: E1, weight: 30000, priority: 0 },
        { address: E2, weight: 10000, priority: 0 },
      ],
      { mode: 'balance' },
    );
    const after90 = await waitFor('service 90 reassigned', async () => {
      const t = await buckets(90);
      return t.changeNumber !== before90.changeNumber ? t : null;
    });
    assert.deepEqual(after90.buckets, predicted.buckets, 'service 90 moved as the assignment predicts');
    const moved = after90.buckets.filter((b, i) => b !== before90.buckets[i]).length;
    assert.equal(moved, 64, '128/128 -> 192/64: 64 buckets move');
    assert.equal(after90.buckets.filter((b) => b === E1).length, 192);

    const s = await status();
    assert.deepEqual(
      s.services.map((x) => x.id),
      [0, 90, 92],
    );
    assert.equal((await fetch(`${daemon.url}/api/v1/services/91/buckets`)).status, 404, 'service 91 is gone');
    // Service 92 is new: its engines register as at a start.
    for (const a of [E1, E2]) engines.get(`91 ${a}`)?.stop();
    await register(92);
    assert.match(
      (await wccpctl(['--url', daemon.url, 'status'])).stdout,
      /Last reload:\s+ok at \S+\n\s+applied: services\[1\]\.weights \(service 90\)/,
    );
    const m = await metrics();
    assert.equal(sampleValue(m, 'wccpd_config_last_reload_successful', {}), 1);
    assert.equal(sampleValue(m, 'wccpd_config_reloads_total', { result: 'success' }), 1);
  });

  const refused = async (text: string, why: RegExp): Promise<void> => {
    const before = await Promise.all([0, 90, 92].map((id) => buckets(id)));
    const failures = (await status()).config?.reloadFailures ?? 0;
    const r = await reload(text);
    assert.equal(r.ok, false);
    assert.deepEqual(r.changed, []);
    assert.ok(
      r.errors.some((e) => why.test(e)),
      `an error matching ${why}: ${r.errors.join(' | ')}`,
    );
    const s = await status();
    assert.equal(s.config?.reloadFailures, failures + 1);
    assert.deepEqual(
      s.services.map((x) => x.id),
      [0, 90, 92],
      'the running config stays',
    );
    const after = await Promise.all([0, 90, 92].map((id) => buckets(id)));
    assert.deepEqual(
      after.map((t) => t.buckets),
      before.map((t) => t.buckets),
      'no bucket moved',
    );
    const ctl = await wccpctl(['--url', daemon.url, 'status']);
    assert.match(ctl.stdout, /Last reload:\s+FAILED at /);
    assert.ok(
      ctl.stdout.split('\n').every((l) => l.length <= 100),
      'wccpctl status fits 100 columns',
    );
    const shown = ctl.stdout.replace(/\s+/g, ' ');
    for (const e of r.errors) assert.ok(shown.includes(e), `wccpctl status shows ${e}`);
    const m = await metrics();
    assert.equal(sampleValue(m, 'wccpd_config_last_reload_successful', {}), 0);
    assert.equal(sampleValue(m, 'wccpd_config_reloads_total', { result: 'failure' }), failures + 1);
    for (const e of r.errors)
      assert.ok(
        logLines(daemon).some((l) => l.msg === `reload refused: ${e}`),
        `the log has the line "reload refused: ${e}"`,
      );
  };

  it('a YAML syntax error: refused, the running config stays', async () => {
    await refused(`${applied}\n  - id: [\n`, /wccpd\.yaml: \(yaml\)/);
  });

  it('a bad value: refused with the key named, as check-config names it', async () => {
    await refused(applied.replace('settle: 0ms', 'settle: soon'), /wccpd\.yaml: timers\.settle: /);
  });

  it('a changed router address with a weight change: refused whole, naming the restart', async () => {
    await refused(
      applied.replace('address: 127.0.0.1', 'address: 127.0.0.2').replace(`${E1}: 30000`, `${E1}: 10000`),
      /wccpd\.yaml: router\.address: changed; restart wccpd to change it/,
    );
  });

  it('the edit undone: the next reload succeeds and changes nothing', async () => {
    const r = await reload(applied);
    assert.equal(r.ok, true);
    assert.deepEqual(r.changed, []);
    assert.equal(sampleValue(await metrics(), 'wccpd_config_last_reload_successful', {}), 1);
  });
});

describe('reload in-process, on the memory data plane', () => {
  it('a service added or removed reaches the data plane; a thousand reloads leave nothing behind', async () => {
    const dir = mkdtempSync(join(tmpdir(), `wccpd-reload-mem-${process.pid}-`));
    const config = await writeLoopbackConfig(dir, { moreServices: dynamic(91, PORT[91]) });
    const base = readFileSync(config.path, 'utf8');
    // Another service, another token, the TCP probe on, a maintenance window: every part a reload touches.
    const other = base
      .replace(`token: ${TOKEN}`, 'token: another-token')
      .replace('  enabled: false', '  enabled: false\n  tcp:\n    enabled: true')
      .replace(
        dynamic(91, PORT[91]).join('\n  '),
        dynamic(92, PORT[92], ['maintenance:', '  - cron: "0 3 * * *"', '    duration: 10m']).join('\n  '),
      );
    const redirector = new MemoryRedirector();
    const log = recordingLog();
    const daemon = new Daemon({ config: await loadConfig(config.path), log, redirector });
    const resources = () => {
      const n = new Map<string, number>();
      for (const r of process.getActiveResourcesInfo()) n.set(r, (n.get(r) ?? 0) + 1);
      return n;
    };
    try {
      await daemon.start();
      await waitFor('service 91 applied', async () => redirector.service(91) ?? null);
      writeFileSync(config.path, other);
      await daemon.reload();
      await waitFor('service 92 applied', async () => redirector.service(92) ?? null);
      assert.equal(redirector.service(91), undefined, 'service 91 removed from the data plane');
      assert.ok(redirector.service(0), 'service 0 stays');
      const r = await fetch(`http://127.0.0.1:${config.httpPort}/api/v1/services/0/engines/127.0.0.9/drain`, {
        method: 'POST',
        headers: { authorization: `Bearer another-token` },
      });
      assert.notEqual(r.status, 401, 'the new token is in force');

      await new Promise((res) => setTimeout(res, 300));
      const start = resources();
      for (let i = 0; i < 1000; i++) {
        writeFileSync(config.path, i % 2 === 0 ? base : other);
        await daemon.reload();
      }
      await new Promise((res) => setTimeout(res, 300));
      const end = resources();
      for (const [kind, n] of end)
        assert.ok(n <= (start.get(kind) ?? 0) + 1, `${kind}: ${start.get(kind) ?? 0} before 1000 reloads, ${n} after`);
      const status = (await (await fetch(`http://127.0.0.1:${config.httpPort}/api/v1/status`)).json()) as StatusView;
      assert.equal(status.config?.reloads, 1001);
      assert.equal(status.config?.reloadFailures, 0);
      assert.ok(redirector.service(92), 'the last config (other) is in force');
    } finally {
      await daemon.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
