// The Debian package as an operator meets it (issue 31), run as docs/operations.md says: scripts/package builds it from
// a clean clone (lintian: no errors), dpkg -i installs it, `wccpd --version` and `check-config` of the shipped config
// pass, systemd-analyze verifies the installed unit, an upgrade to a higher version restarts a wccpd holding a table
// and 0 buckets move, and dpkg --purge leaves nothing behind.
//
// Heavy and root: it installs the package on this machine (no chroot) and purges it at the end, whatever happened.
// Node 20 here is Debian's `nodejs` package (20.x from NodeSource), so dpkg sees `nodejs (>= 20)` satisfied; no
// stand-in package is needed. It never starts a wccpd that touches the host's interfaces: the daemon it runs has the
// shipped config with `dataplane.backend: none` and loopback addresses written in, as an admin would edit it.
// systemd is not PID 1 here (no /run/systemd/system), so the maintainer scripts' systemctl calls are skipped, as they
// are in any chroot; the upgrade's restart is done by hand in the order the unit gives it (SIGTERM, ExecStopPost
// cleanup, ExecStartPre check-config, ExecStart), with the package's own binaries.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { haveCommand, isRoot, need } from '../helpers/require.js';
import { freeTcpPort, freeUdpPort, waitFor } from '../helpers/daemon.js';
import { TestEngine } from '../helpers/wccp-engine.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
/** Everything the package puts on the machine, and what its scripts make. */
const LEFT_BEHIND = [
  '/etc/wccpd',
  '/var/lib/wccpd',
  '/usr/lib/wccpd',
  '/usr/sbin/wccpd',
  '/usr/sbin/wccpd-cleanup',
  '/usr/bin/wccpctl',
  '/lib/systemd/system/wccpd.service',
  '/usr/lib/sysusers.d/wccpd.conf',
  '/usr/share/doc/wccpd',
  '/usr/share/lintian/overrides/wccpd',
  '/etc/systemd/system/multi-user.target.wants/wccpd.service',
];

function sh(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 300_000, ...opts });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')}: ${r.stderr}${r.stdout}`);
  return r.stdout;
}

const installed = () =>
  spawnSync('dpkg-query', ['-W', '-f=${Status}', 'wccpd'], { encoding: 'utf8' }).stdout.includes('installed');

/** scripts/package in `clone`: the .deb's path is its last line. */
function buildPackage(clone: string, out: string): string {
  const stdout = sh(join(clone, 'scripts/package'), [], {
    cwd: clone,
    env: { ...process.env, WCCPD_PACKAGE_OUT: out },
  });
  const deb = stdout.trimEnd().split('\n').at(-1) ?? '';
  assert.match(deb, /\/wccpd_[^/]+_all\.deb$/);
  assert.ok(existsSync(deb), deb);
  return deb;
}

const enoughTools =
  isRoot &&
  ['git', 'dpkg-deb', 'lintian', 'systemd-analyze', 'systemd-sysusers', 'runuser', 'setpriv'].every(haveCommand);

test(
  'build from a clean clone, install, check, upgrade with a table held (0 buckets move), purge: nothing left',
  {
    skip: need(enoughTools, 'root, git, dpkg-deb, lintian, systemd-analyze, systemd-sysusers, runuser, setpriv'),
    timeout: 600_000,
  },
  async () => {
    assert.equal(installed(), false, 'wccpd is installed on this machine already: the test would replace it');
    for (const p of LEFT_BEHIND) assert.equal(existsSync(p), false, `${p} exists before the test`);
    const dir = mkdtempSync(join(tmpdir(), 'wccpd-package-'));
    let daemon: ChildProcess | null = null;
    const engines: TestEngine[] = [];
    let keepAlive: ReturnType<typeof setInterval> | undefined;
    try {
      // A clean clone of this commit; the build tools come from the checkout's node_modules (no registry needed).
      const clone = join(dir, 'clone');
      sh('git', ['clone', '--quiet', '--no-hardlinks', REPO, clone]);
      // A copy, not a link: nothing the build or the clean-up does may reach the shared node_modules.
      sh('cp', ['-a', `${join(REPO, 'node_modules')}/.`, join(clone, 'node_modules')]);
      const commit = sh('git', ['-C', clone, 'rev-parse', '--short=12', 'HEAD']).trim();
      const version = (JSON.parse(readFileSync(join(clone, 'package.json'), 'utf8')) as { version: string }).version;
      const deb = buildPackage(clone, join(dir, 'out1'));

      const field = (f: string) => sh('dpkg-deb', ['-f', deb, f]).trim();
      assert.equal(field('Architecture'), 'all');
      assert.equal(field('Version'), version);
      assert.equal(field('Depends'), 'nodejs (>= 20), nftables, iproute2, systemd');
      assert.equal(sh('dpkg-deb', ['--ctrl-tarfile', deb]).length > 0, true);
      const contents = sh('dpkg-deb', ['-c', deb]);
      for (const p of [
        './usr/sbin/wccpd',
        './usr/bin/wccpctl',
        './usr/sbin/wccpd-cleanup',
        './lib/systemd/system/wccpd.service',
        './usr/lib/sysusers.d/wccpd.conf',
        './etc/wccpd/wccpd.yaml',
        './usr/share/doc/wccpd/operations.md',
        './usr/share/doc/wccpd/copyright',
        './usr/lib/wccpd/node_modules/pino/package.json',
      ])
        assert.match(contents, new RegExp(` ${p.replaceAll('.', '\\.')}\\n`), `${p} in the package`);
      assert.doesNotMatch(
        contents,
        /node_modules\/(typescript|eslint|tsx|pcap|raw-socket)\//,
        'no dev or native packages',
      );
      const ctl = join(dir, 'ctl');
      sh('dpkg-deb', ['-e', deb, ctl]);
      assert.equal(readFileSync(join(ctl, 'conffiles'), 'utf8'), '/etc/wccpd/wccpd.yaml\n');

      // Install. Nothing starts: the postinst enables and starts nothing on a first install.
      sh('dpkg', ['-i', deb], { env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
      assert.ok(installed());
      assert.equal(existsSync('/etc/systemd/system/multi-user.target.wants/wccpd.service'), false, 'not enabled');
      assert.equal(spawnSync('pgrep', ['-u', 'wccpd']).status, 1, 'no process of the wccpd user');
      const stat = (p: string) => {
        const s = statSync(p);
        return { mode: (s.mode & 0o777).toString(8), uid: s.uid, group: sh('stat', ['-c', '%G', p]).trim() };
      };
      assert.deepEqual(stat('/etc/wccpd/wccpd.yaml'), { mode: '640', uid: 0, group: 'wccpd' });
      assert.deepEqual(stat('/etc/wccpd/admin-token'), { mode: '640', uid: 0, group: 'wccpd' });
      assert.match(readFileSync('/etc/wccpd/admin-token', 'utf8'), /^[0-9a-f]{48}\n$/);

      assert.equal(sh('/usr/sbin/wccpd', ['--version']), `wccpd ${version} (commit ${commit})\n`);
      assert.equal(sh('/usr/bin/wccpctl', ['--version']), `wccpctl ${version} (commit ${commit})\n`);
      // check-config of the shipped config, as root and as the unit's user (ExecStartPre runs as wccpd).
      assert.match(sh('/usr/sbin/wccpd', ['check-config', '/etc/wccpd/wccpd.yaml']), /^ok: /);
      assert.match(
        sh('runuser', ['-u', 'wccpd', '--', '/usr/sbin/wccpd', 'check-config', '/etc/wccpd/wccpd.yaml']),
        /^ok: /,
      );
      const verify = spawnSync('systemd-analyze', ['verify', '/lib/systemd/system/wccpd.service'], {
        encoding: 'utf8',
      });
      assert.equal(verify.stderr, '', 'systemd-analyze verify of the installed unit printed warnings');
      assert.equal(verify.status, 0);

      // The admin's edit: loopback and `backend: none` here (the test must not redirect on this host).
      const udpPort = await freeUdpPort();
      const httpPort = await freeTcpPort();
      const shipped = readFileSync('/etc/wccpd/wccpd.yaml', 'utf8');
      const edited = shipped
        .replace(/address: 192\.0\.2\.1 .*/, `address: 127.0.0.1\n  port: ${udpPort}`)
        .replace('listen: 127.0.0.1:8080', `listen: 127.0.0.1:${httpPort}`)
        .replace(/backend: nft .*/, 'backend: none')
        .replace('- 192.0.2.0/24', '- 127.0.0.0/24')
        .replace(/clientInterfaces: \[\] .*/, 'clientInterfaces: [lo]')
        // The test engines run no proxy for the default HTTP probe.
        .replace('timers:', 'health:\n  http:\n    enabled: false\ntimers:');
      assert.notEqual(edited, shipped);
      writeFileSync('/etc/wccpd/wccpd.yaml', edited);
      const url = `http://127.0.0.1:${httpPort}`;
      const start = () => {
        sh('runuser', ['-u', 'wccpd', '--', '/usr/sbin/wccpd', 'check-config', '/etc/wccpd/wccpd.yaml']);
        const child = spawn(
          'setpriv',
          ['--reuid=wccpd', '--regid=wccpd', '--init-groups', '/usr/sbin/wccpd', '--config', '/etc/wccpd/wccpd.yaml'],
          {
            stdio: 'ignore',
          },
        );
        return child;
      };
      const stop = async (child: ChildProcess) => {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
        sh('/usr/sbin/wccpd-cleanup', []);
      };
      const table = async () => {
        const r = await fetch(`${url}/api/v1/services/0/buckets`);
        return r.ok ? ((await r.json()) as { changeNumber: number; buckets: (string | null)[] }) : null;
      };
      daemon = start();
      await waitFor('the admin API', async () => ((await fetch(`${url}/api/v1/status`)).ok ? true : null), 20_000);
      for (const address of ['127.0.0.11', '127.0.0.12']) {
        const e = new TestEngine({ address, router: { address: '127.0.0.1', port: udpPort } });
        await e.start();
        engines.push(e);
      }
      for (let round = 0; round < 2; round++) for (const e of engines) await e.hereIAm();
      keepAlive = setInterval(() => {
        for (const e of engines) void e.hereIAm().catch(() => undefined);
      }, 1000);
      const before = await waitFor('both engines holding buckets', async () => {
        const t = await table();
        return t !== null && t.buckets.includes('127.0.0.11') && t.buckets.includes('127.0.0.12') ? t : null;
      });
      // Give the state a save (debounced 250 ms) before the upgrade.
      await new Promise((r) => setTimeout(r, 1000));

      // Version 2: the same tree, one commit more with a higher version.
      const [major, minor, patch] = version.split('.').map(Number) as [number, number, number];
      const next = `${major}.${minor}.${patch + 1}`;
      const pkgJson = join(clone, 'package.json');
      writeFileSync(pkgJson, readFileSync(pkgJson, 'utf8').replace(`"version": "${version}"`, `"version": "${next}"`));
      sh('git', ['-C', clone, '-c', 'user.name=test', '-c', 'user.email=test@example.org', 'commit', '-qam', next]);
      const deb2 = buildPackage(clone, join(dir, 'out2'));
      sh('dpkg', ['-i', deb2], { env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
      assert.equal(readFileSync('/etc/wccpd/wccpd.yaml', 'utf8'), edited, "the admin's config is kept");
      // The restart the postinst asks systemd for (try-restart), done as the unit does it.
      assert.match(
        readFileSync('/var/lib/dpkg/info/wccpd.postinst', 'utf8'),
        /deb-systemd-invoke try-restart wccpd\.service/,
      );
      await stop(daemon);
      daemon = start();
      const after = await waitFor(
        'the upgraded wccpd with both engines back',
        async () => {
          const t = await table();
          return t !== null && t.buckets.includes('127.0.0.11') && t.buckets.includes('127.0.0.12') ? t : null;
        },
        20_000,
      );
      const status = (await (await fetch(`${url}/api/v1/status`)).json()) as { build: { version: string } };
      assert.equal(status.build.version, next);
      const moved = after.buckets.filter((b, i) => b !== before.buckets[i]).length;
      assert.equal(moved, 0, 'buckets moved across the upgrade');
      assert.equal(sh('/usr/sbin/wccpd', ['--version']).split(' ')[1], next);

      clearInterval(keepAlive);
      for (const e of engines.splice(0)) await e.stop();
      await stop(daemon);
      daemon = null;
      // The admin enabled it meanwhile (docs/operations.md): purge takes the link too.
      sh('ln', [
        '-s',
        '/lib/systemd/system/wccpd.service',
        '/etc/systemd/system/multi-user.target.wants/wccpd.service',
      ]);
      sh('dpkg', ['--purge', 'wccpd']);
      assert.equal(installed(), false);
      for (const p of LEFT_BEHIND) assert.equal(existsSync(p), false, `${p} is left after the purge`);
      assert.equal(spawnSync('dpkg-statoverride', ['--list', '/etc/wccpd/wccpd.yaml']).status, 1, 'the statoverride');
      // The system user stays (Debian's convention for a uid that owned files; docs/operations.md, "Uninstall").
    } finally {
      clearInterval(keepAlive);
      for (const e of engines) await e.stop().catch(() => undefined);
      if (daemon !== null && daemon.exitCode === null) daemon.kill('SIGKILL');
      if (installed()) spawnSync('dpkg', ['--purge', 'wccpd']);
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
