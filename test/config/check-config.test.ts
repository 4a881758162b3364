import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ConfigError, LOG_LEVELS, loadConfig, runCheckConfig } from '../../src/config/index.js';
import { DATAPLANE_BACKENDS } from '../../src/dataplane/settings.js';
import { ASSIGNMENT_MODES, FAIL_MODES } from '../../src/vocabulary.js';

const run = promisify(execFile);
let dir = '';

function sink(): { text: string; write(s: string): void } {
  return {
    text: '',
    write(s: string) {
      this.text += s;
    },
  };
}

// A config with no warning on any Linux host (lo exists everywhere).
const GOOD = `router: { address: 192.0.2.1 }
dataplane: { backend: nft }
services:
  - id: 0
    clientInterfaces: [lo]
    engines: { allow: [192.0.2.0/24] }
  - id: 77
    clientInterfaces: [lo]
    protocol: tcp
    ports: [8080, 3128]
    forwarding: gre
    return: gre
    failMode: closed
    mode: primary-standby
    engines: { allow: [192.0.2.0/24] }
`;

describe('wccpd check-config', () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'wccpd-check-config-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('prints a one-line summary and returns 0 for a good file', async () => {
    const path = join(dir, 'good.yaml');
    await writeFile(path, GOOD);
    const out = sink();
    const err = sink();
    assert.equal(await runCheckConfig(path, out, err), 0);
    assert.equal(
      out.text,
      `ok: ${path}: 2 services (0: web-cache, l2/l2, hash, appliance, balance, fail open; ` +
        '77: tcp 8080,3128, gre/gre, hash, appliance, primary-standby, fail closed)\n',
    );
    assert.equal(err.text, '');
  });

  it('prints every problem as FILE: KEY: message and returns 1', async () => {
    const path = join(dir, 'bad.yaml');
    await writeFile(path, GOOD.replace('failMode: closed', 'failMode: shut').replace('id: 0', 'id: 3'));
    const out = sink();
    const err = sink();
    assert.equal(await runCheckConfig(path, out, err), 1);
    assert.equal(out.text, '');
    const lines = err.text.trimEnd().split('\n');
    assert.equal(lines.length, 2);
    assert.match(lines[0]!, new RegExp(`^${path}: services\\[0\\]\\.id: well-known service 3 is not supported`));
    assert.match(lines[1]!, new RegExp(`^${path}: services\\[1\\]\\.failMode: "shut" is not allowed`));
  });

  it('refuses engines.allow: [] naming the file and key; passes 0.0.0.0/0 with a warning on stderr', async () => {
    const path = join(dir, 'allow.yaml');
    await writeFile(path, GOOD.replace('engines: { allow: [192.0.2.0/24] }', 'engines: { allow: [] }'));
    const err = sink();
    assert.equal(await runCheckConfig(path, sink(), err), 1);
    assert.equal(
      err.text,
      `${path}: services[0].engines.allow: is empty: list the CIDR blocks engines may register from ` +
        '(e.g. [192.0.2.0/24]); to allow every address write [0.0.0.0/0] (wccpd then warns at start) (line 6)\n',
    );

    await writeFile(path, GOOD.replace('engines: { allow: [192.0.2.0/24] }', 'engines: { allow: [0.0.0.0/0] }'));
    const out = sink();
    const warn = sink();
    assert.equal(await runCheckConfig(path, out, warn), 0);
    assert.match(out.text, /^ok: /);
    assert.equal(
      warn.text,
      `${path}: services[0].engines.allow: warning: 0.0.0.0/0 allows every address: any host that ` +
        'can reach UDP 2048 may register as an engine of service 0 (and the service has no password)\n',
    );
  });

  it('passes the old dataplane.flows.idleSeconds with a deprecation warning naming idle and the line', async () => {
    const path = join(dir, 'idle.yaml');
    await writeFile(
      path,
      'router: { address: 192.0.2.1 }\n' +
        'dataplane:\n  backend: ingress\n  flows:\n    idleSeconds: 600\n' +
        'services:\n  - id: 0\n    clientInterfaces: [lo]\n    engines: { allow: [192.0.2.0/24] }\n',
    );
    const out = sink();
    const warn = sink();
    assert.equal(await runCheckConfig(path, out, warn), 0, warn.text);
    assert.match(out.text, /^ok: /);
    assert.equal(
      warn.text,
      `${path}: dataplane.flows.idleSeconds: warning: is deprecated (a bare number of seconds); write idle: 10m ` +
        'instead, a duration as everywhere else in the file (line 5)\n',
    );
  });

  it('warns about a config that would silently do nothing or is open to others; --strict fails on it', async () => {
    const path = join(dir, 'risky.yaml');
    await writeFile(
      path,
      GOOD.replace('backend: nft', 'backend: none')
        .replace('clientInterfaces: [lo]', 'clientInterfaces: [lo, nosuch-wccpd9]')
        .concat('stateDir: var/wccpd\nadmin: { listen: 0.0.0.0:8080, token: change-me }\n'),
    );
    const host = { interfaces: new Set(['lo', 'eth0']) };
    const out = sink();
    const warn = sink();
    assert.equal(await runCheckConfig(path, out, warn, { host }), 0, warn.text);
    assert.match(out.text, /^ok: /);
    assert.deepEqual(warn.text.trimEnd().split('\n'), [
      `${path}: dataplane.backend: warning: none: engines register and buckets are assigned, but no packet is ` +
        'redirected; set nft, ingress or userland on a gateway (docs/performance.md, "Choosing a backend")',
      `${path}: stateDir: warning: "var/wccpd" is relative to the directory wccpd starts in, so a start from ` +
        'elsewhere begins with no bucket table or membership; give an absolute path such as /var/lib/wccpd',
      `${path}: admin.token: warning: is the example token change-me: anyone who has read the example can drain ` +
        'your engines; put a secret of your own in admin.tokenFile',
      `${path}: admin.listen: warning: 0.0.0.0:8080 is not a loopback address: any host that reaches it reads the ` +
        "cluster's state (reads need no token) and the token crosses the network in clear HTTP; bind 127.0.0.1, " +
        'or let only trusted hosts reach the port',
      `${path}: services[0].clientInterfaces: warning: "nosuch-wccpd9" is not an interface on this host ` +
        '(eth0, lo): no packet arrives on it, so service 0 redirects nothing from it; check the name with ip link',
    ]);

    const strict = sink();
    assert.equal(await runCheckConfig(path, sink(), strict, { host, strict: true }), 1);
    assert.equal(strict.text, `${warn.text}${path}: --strict: 5 warnings\n`);
    // The example token read from admin.tokenFile is named by that key.
    const tokenPath = join(dir, 'example-token');
    await writeFile(tokenPath, 'change-me\n');
    await writeFile(path, `${GOOD}admin: { tokenFile: ${tokenPath} }\n`);
    const fromFile = sink();
    assert.equal(await runCheckConfig(path, sink(), fromFile, { host }), 0);
    assert.match(fromFile.text, /^\S+: admin\.tokenFile: warning: is the example token change-me: /);
  });

  it('names a missing interface and the example token on this host, and exits 1 with --strict, as a command', async () => {
    const main = new URL('../../src/cli/wccpd.ts', import.meta.url).pathname;
    const path = join(dir, 'cmd-risky.yaml');
    await writeFile(
      path,
      GOOD.replace('clientInterfaces: [lo]', 'clientInterfaces: [nosuch-wccpd9]').concat(
        'admin: { token: change-me }\n',
      ),
    );
    const ok = await run(process.execPath, ['--import', 'tsx', main, 'check-config', path]);
    assert.match(ok.stdout, /^ok: /);
    const lines = ok.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 2, ok.stderr);
    assert.match(lines[0]!, /: admin\.token: warning: is the example token change-me: /);
    assert.match(
      lines[1]!,
      /: services\[0\]\.clientInterfaces: warning: "nosuch-wccpd9" is not an interface on this host \(.*\blo\b/,
    );
    await assert.rejects(
      run(process.execPath, ['--import', 'tsx', main, 'check-config', '--strict', path]),
      (e: { code?: number; stdout?: string; stderr?: string }) => {
        assert.equal(e.code, 1);
        assert.match(e.stdout ?? '', /^ok: /);
        assert.equal(e.stderr, `${ok.stderr}${path}: --strict: 2 warnings\n`);
        return true;
      },
    );
    // A good file passes --strict; --strict without check-config is a usage mistake.
    const good = join(dir, 'cmd-strict-good.yaml');
    await writeFile(good, GOOD);
    const strictGood = await run(process.execPath, ['--import', 'tsx', main, 'check-config', '--strict', good]);
    assert.equal(strictGood.stderr, '');
    await assert.rejects(
      run(process.execPath, ['--import', 'tsx', main, '--strict', '--config', good]),
      (e: { code?: number }) => {
        assert.equal(e.code, 2);
        return true;
      },
    );
  });

  it('says so when the file cannot be read', async () => {
    const err = sink();
    assert.equal(await runCheckConfig(join(dir, 'absent.yaml'), sink(), err), 1);
    assert.match(err.text, /absent\.yaml: \(file\): cannot read the configuration: file not found/);
  });

  it('runs as a command with the exit code and output a shell sees', async () => {
    const main = new URL('../../src/cli/wccpd.ts', import.meta.url).pathname;
    const good = join(dir, 'cmd-good.yaml');
    await writeFile(good, GOOD);
    const ok = await run(process.execPath, ['--import', 'tsx', main, 'check-config', good]);
    assert.match(ok.stdout, /^ok: .*cmd-good\.yaml: 2 services/);
    const bad = join(dir, 'cmd-bad.yaml');
    await writeFile(bad, 'router: { address: nowhere }\n');
    await assert.rejects(
      run(process.execPath, ['--import', 'tsx', main, 'check-config', bad]),
      (e: { code?: number; stderr?: string }) => {
        assert.equal(e.code, 1);
        assert.match(e.stderr ?? '', /cmd-bad\.yaml: router\.address: "nowhere" is not an IPv4 address/);
        assert.match(e.stderr ?? '', /cmd-bad\.yaml: services: is required/);
        return true;
      },
    );
    // Usage mistakes exit 2 (parseArgs refuses unknown options; check-config takes one path and nothing else).
    for (const args of [
      ['check-config'],
      ['check-config', good, good],
      ['check-config', good, '--pretty'],
      ['--conifg', good],
    ]) {
      await assert.rejects(
        run(process.execPath, ['--import', 'tsx', main, ...args]),
        (e: { code?: number; stderr?: string }) => {
          assert.equal(e.code, 2, args.join(' '));
          assert.match(e.stderr ?? '', /usage: wccpd/);
          return true;
        },
      );
    }
  });

  it('reads admin.tokenFile, and names it when it cannot', async () => {
    const tokenPath = join(dir, 'token');
    await writeFile(tokenPath, 's3cret-token\n');
    const path = join(dir, 'token.yaml');
    await writeFile(path, `${GOOD}admin: { tokenFile: ${tokenPath} }\n`);
    assert.equal((await loadConfig(path)).admin.token, 's3cret-token');
    await writeFile(path, `${GOOD}admin: { tokenFile: ${join(dir, 'no-token')} }\n`);
    await assert.rejects(loadConfig(path), (e: unknown) => {
      assert.ok(e instanceof ConfigError);
      assert.equal(e.problems[0]!.key, 'admin.tokenFile');
      assert.match(e.problems[0]!.message, /no-token: file not found/);
      return true;
    });
  });
});

describe('examples/wccpd.yaml', () => {
  it('is a valid quick-start configuration', async () => {
    const path = new URL('../../examples/wccpd.yaml', import.meta.url).pathname;
    const c = await loadConfig(path);
    assert.deepEqual(c.router, { address: '127.0.0.1', port: 2048 });
    assert.deepEqual(c.admin.listen, { host: '127.0.0.1', port: 8080 });
    assert.equal(c.dataplane.backend, 'none');
    assert.equal(c.stateDir, './var/lib/wccpd');
    // Its comments list every choice the parser has (the mode list once lacked consistent).
    const text = await readFile(path, 'utf8');
    for (const [key, choices] of [
      ['mode', ASSIGNMENT_MODES],
      ['failMode', FAIL_MODES],
      ['backend', DATAPLANE_BACKENDS],
      ['level', LOG_LEVELS],
    ] as const) {
      const comment = new RegExp(`^\\s*${key}: .*#(.*)$`, 'm').exec(text)?.[1] ?? '';
      for (const c of choices) assert.match(comment, new RegExp(`\\b${c}\\b`), `${key}'s comment names ${c}`);
    }
    // What the laptop example gives up is said when it is checked.
    const warn = sink();
    assert.equal(await runCheckConfig(path, sink(), warn, { host: { interfaces: null } }), 0);
    assert.deepEqual(
      warn.text
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(': ')[1]),
      ['dataplane.backend', 'stateDir', 'admin.token'],
    );
    assert.deepEqual(
      c.services[0]!.engines.allow.map((a) => a.text),
      ['127.0.0.0/8', '192.0.2.0/24'],
    );
  });
});
