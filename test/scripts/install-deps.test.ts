// scripts/install-deps as an admin meets it on a gateway that already runs things: it stops no process (a Squid of
// the host's own survives), and while apt installs, a policy-rc.d denies service starts (Debian's squid would start
// its own) and is removed afterwards, also when apt fails or the script is interrupted; an admin's own policy-rc.d
// comes back byte for byte. apt-get is a stub on PATH that records what a package's start would have been told.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isRoot, need } from '../helpers/require.js';

const SCRIPT = fileURLToPath(new URL('../../scripts/install-deps', import.meta.url));
const skip = need(isRoot, 'root (install-deps installs only as root)');

describe('scripts/install-deps', { skip }, () => {
  let dir = '';
  let policy = '';
  let log = '';
  before(() => {
    dir = mkdtempSync(join(tmpdir(), `wccpd-install-deps-${process.pid}-`));
    // A copy of the checkout's shape: the script cds to its parent; node_modules is up to date, so no npm ci.
    mkdirSync(join(dir, 'repo/scripts'), { recursive: true });
    copyFileSync(SCRIPT, join(dir, 'repo/scripts/install-deps'));
    writeFileSync(join(dir, 'repo/package-lock.json'), '{}\n');
    mkdirSync(join(dir, 'repo/node_modules'));
    writeFileSync(join(dir, 'repo/node_modules/.package-lock.json'), '{}\n');
    const future = new Date(Date.now() + 3_600_000);
    utimesSync(join(dir, 'repo/node_modules/.package-lock.json'), future, future);
    mkdirSync(join(dir, 'bin'));
    log = join(dir, 'apt.log');
    policy = join(dir, 'policy-rc.d');
    // The stub asks the policy what invoke-rc.d asks it for a package's start, and records the answer.
    writeFileSync(
      join(dir, 'bin/apt-get'),
      `#!/bin/sh
[ "$1" = update ] && exit 0
if [ -x "$WCCPD_POLICY_RC_D" ]; then "$WCCPD_POLICY_RC_D" squid start; echo "$* policy=$?" >> "${log}"
else echo "$* policy=absent" >> "${log}"; fi
[ -n "$STUB_APT_SLEEP" ] && sleep "$STUB_APT_SLEEP"
exit "\${STUB_APT_EXIT:-0}"
`,
    );
    writeFileSync(join(dir, 'bin/debconf-set-selections'), '#!/bin/sh\ncat >/dev/null\n');
    for (const f of ['apt-get', 'debconf-set-selections']) chmodSync(join(dir, 'bin', f), 0o755);
  });
  after(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  function run(env: Record<string, string> = {}): {
    child: ChildProcess;
    done: Promise<{ code: number | null; out: string }>;
  } {
    rmSync(log, { force: true });
    const child = spawn(join(dir, 'repo/scripts/install-deps'), [], {
      env: {
        ...process.env,
        PATH: `${join(dir, 'bin')}:${process.env.PATH ?? ''}`,
        WCCPD_POLICY_RC_D: policy,
        // A name no Debian system has installed, so it is "missing" and apt-get (the stub) runs.
        WCCPD_APT_PACKAGES: 'wccpd-test-absent-package',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const done = new Promise<{ code: number | null; out: string }>((r) =>
      child.once('close', (code) => r({ code, out })),
    );
    return { child, done };
  }
  const aptLog = () => readFileSync(log, 'utf8');

  it('denies service starts while apt installs and leaves no policy-rc.d behind; a running squid survives', async () => {
    rmSync(policy, { force: true });
    // A process named squid, as a host's own Squid would be (the old script ran `pkill -x squid`).
    copyFileSync('/bin/sleep', join(dir, 'squid'));
    const squid = spawn(join(dir, 'squid'), ['60'], { stdio: 'ignore' });
    try {
      const { code, out } = await run().done;
      assert.equal(code, 0, out);
      assert.equal(
        aptLog(),
        'install -y -qq wccpd-test-absent-package policy=101\n',
        'a start during the install is denied (101)',
      );
      assert.equal(existsSync(policy), false, 'our policy-rc.d is gone');
      assert.equal(squid.exitCode, null);
      assert.equal(squid.signalCode, null, 'the squid process was not signalled');
      process.kill(squid.pid!, 0);
    } finally {
      squid.kill('SIGKILL');
    }
  });

  it("puts an admin's own policy-rc.d back as it was, also when apt fails", async () => {
    const own = "#!/bin/sh\n# the admin's own\nexit 0\n";
    writeFileSync(policy, own, { mode: 0o750 });
    const { code } = await run({ STUB_APT_EXIT: '100' }).done;
    assert.notEqual(code, 0, 'a failed apt-get fails the script');
    assert.equal(aptLog(), 'install -y -qq wccpd-test-absent-package policy=101\n');
    assert.equal(readFileSync(policy, 'utf8'), own);
    assert.equal(statSync(policy).mode & 0o777, 0o750);
  });

  it('removes its policy-rc.d when interrupted during the install', async () => {
    rmSync(policy, { force: true });
    const { child, done } = run({ STUB_APT_SLEEP: '1' });
    for (let i = 0; i < 100 && !existsSync(log); i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(existsSync(log), 'apt-get started');
    child.kill('SIGTERM');
    const { code } = await done;
    assert.notEqual(code, 0);
    assert.equal(existsSync(policy), false, 'no policy-rc.d left after SIGTERM');
  });

  it('runs no npm ci through a symlinked node_modules (it would empty the shared directory)', async () => {
    const shared = join(dir, 'shared-node_modules');
    mkdirSync(shared, { recursive: true });
    writeFileSync(join(shared, 'kept'), 'a package\n');
    const own = join(dir, 'repo/node_modules');
    const aside = join(dir, 'repo/node_modules.own');
    renameSync(own, aside);
    symlinkSync(shared, own);
    // An npm stub that does what npm ci does first: empties node_modules (following the link, as npm does).
    writeFileSync(join(dir, 'bin/npm'), `#!/bin/sh\necho "npm $*" >> "${log}.npm"\nrm -rf node_modules/*\n`);
    chmodSync(join(dir, 'bin/npm'), 0o755);
    // The lock file is newer than the shared packages' record, as in a fresh clone.
    const past = new Date(Date.now() - 3_600_000);
    writeFileSync(join(shared, '.package-lock.json'), '{}\n');
    utimesSync(join(shared, '.package-lock.json'), past, past);
    try {
      const { code, out } = await run().done;
      assert.equal(code, 0, out);
      assert.equal(existsSync(`${log}.npm`), false, `npm ran: ${out}`);
      assert.equal(readFileSync(join(shared, 'kept'), 'utf8'), 'a package\n', 'the shared packages are untouched');
      assert.match(out, /node_modules is a symlink .*: not running npm ci here/);
    } finally {
      rmSync(own, { force: true });
      renameSync(aside, own);
      rmSync(join(dir, 'bin/npm'), { force: true });
    }
  });

  it('stops nothing by name', () => {
    assert.doesNotMatch(readFileSync(SCRIPT, 'utf8'), /^[^#]*\b(pkill|killall)\b/m);
  });
});
