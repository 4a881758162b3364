import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { haveCommand, need } from '../helpers/require.js';
import { serviceSection, unitSection } from './unit-file.js';

const UNIT_PATH = fileURLToPath(new URL('../../systemd/wccpd.service', import.meta.url));
const CLEANUP_PATH = fileURLToPath(new URL('../../systemd/wccpd-cleanup', import.meta.url));
const WCCPD_PATH = fileURLToPath(new URL('../../bin/wccpd.js', import.meta.url));
const UNIT = readFileSync(UNIT_PATH, 'utf8');

describe('systemd/wccpd.service', () => {
  it(
    'passes systemd-analyze verify with no warning',
    { skip: need(haveCommand('systemd-analyze'), 'systemd-analyze') },
    () => {
      // verify checks that each Exec* program exists; the package is not installed here, so the copy points them at
      // this checkout (test/package/package.test.ts verifies the installed unit as it is).
      const dir = mkdtempSync(join(tmpdir(), 'wccpd-unit-'));
      try {
        const unit = join(dir, 'wccpd.service');
        writeFileSync(
          unit,
          UNIT.replaceAll('/usr/sbin/wccpd-cleanup', CLEANUP_PATH).replaceAll('/usr/sbin/wccpd ', `${WCCPD_PATH} `),
        );
        const r = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8' });
        assert.equal(r.stderr, '', 'systemd-analyze printed warnings');
        assert.equal(r.status, 0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it('restarts wccpd after any end systemd did not order, however often', () => {
    const s = serviceSection(UNIT);
    // on-failure: a non-zero status (70 after an error nothing caught) or a death by a signal other than SIGHUP,
    // SIGINT, SIGTERM and SIGPIPE, which systemd counts as clean; wccpd handles the first three and Node ignores the
    // last (test/cli/signals.test.ts). Nothing may widen "success" or prevent the restart.
    assert.deepEqual(s.get('Restart'), ['on-failure']);
    for (const k of ['SuccessExitStatus', 'RestartPreventExitStatus'])
      assert.equal(s.has(k), false, `${k} would keep wccpd down`);
    // The default start limit (5 starts in 10 s) would leave a crash loop down for good, with the redirect removed.
    assert.deepEqual(unitSection(UNIT, 'Unit').get('StartLimitIntervalSec'), ['0']);
  });

  it('is hardened as the operations doc says', () => {
    const s = serviceSection(UNIT);
    const one = (k: string): string | undefined => s.get(k)?.at(-1);
    for (const [k, v] of [
      ['NoNewPrivileges', 'yes'],
      ['ProtectSystem', 'strict'],
      ['ProtectHome', 'yes'],
      ['PrivateTmp', 'yes'],
      ['StateDirectory', 'wccpd'],
      ['ConfigurationDirectory', 'wccpd'],
      ['ProtectKernelModules', 'yes'],
      ['ProtectControlGroups', 'yes'],
      ['LockPersonality', 'yes'],
      ['SystemCallArchitectures', 'native'],
      ['Restart', 'on-failure'],
      ['ExecStartPre', '/usr/sbin/wccpd check-config /etc/wccpd/wccpd.yaml'],
      ['ExecStart', '/usr/sbin/wccpd --config /etc/wccpd/wccpd.yaml'],
      ['ExecReload', '/bin/kill -HUP $MAINPID'],
      ['ExecStopPost', '+/usr/sbin/wccpd-cleanup'],
      ['User', 'wccpd'],
      ['Group', 'wccpd'],
      ['SystemCallErrorNumber', 'EPERM'],
      ['UMask', '0077'],
      ['Nice', '-10'],
      ['CPUWeight', '1000'],
    ]) {
      assert.equal(one(k!), v, `${k} should be ${v}`);
    }
    for (const k of ['CapabilityBoundingSet', 'AmbientCapabilities']) {
      assert.deepEqual(one(k)?.split(/\s+/).sort(), ['CAP_NET_ADMIN', 'CAP_NET_RAW'], k);
    }
    assert.deepEqual(one('RestrictAddressFamilies')?.split(/\s+/).sort(), [
      'AF_INET',
      'AF_INET6',
      'AF_NETLINK',
      'AF_PACKET',
      'AF_UNIX',
    ]);
    assert.equal(s.has('MemoryDenyWriteExecute'), false, 'V8 JIT needs W+X memory');
  });
});
