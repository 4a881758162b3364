// The cleanup script in a namespace of its own: it removes wccpd's nft tables (inet, and the ingress backend's netdev
// one), ip rules, routes and devices (those its record lists, and rules that carry all three of wccpd's names), leaves
// everything else byte-identical, keeps the fail-closed table unless given --all, and succeeds when there is nothing
// to do. In both families: an IPv6 service's slots have IPv6 twins of the same names (issue 36).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  lchownSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { haveCommand, isRoot, need } from '../helpers/require.js';

const CLEANUP = fileURLToPath(new URL('../../systemd/wccpd-cleanup', import.meta.url));
const NS = `wccpd-cleanup-${process.pid}`;
const skip = need(isRoot && haveCommand('ip') && haveCommand('nft'), 'root, ip and nft (network namespaces)');

function inNs(...args: string[]): string {
  return execFileSync('ip', ['netns', 'exec', NS, ...args], { encoding: 'utf8' });
}

/** A routing table's routes; '' for an IPv6 table the kernel never made (ip -6 says "FIB table does not exist"). */
function routes(family: '-4' | '-6', table: string): string {
  const r = spawnSync('ip', ['netns', 'exec', NS, 'ip', family, 'route', 'show', 'table', table], { encoding: 'utf8' });
  if (r.status !== 0 && !/FIB table does not exist/.test(r.stderr)) throw new Error(`ip ${family}: ${r.stderr}`);
  return r.stdout;
}

function runCleanup(...args: string[]): { status: number | null; stderr: string } {
  return runCleanupWith('sh', {}, ...args);
}

/** The script under a given shell (bash evaluates more inside `$(( ))` than dash), from a given directory. */
function runCleanupWith(
  shell: 'sh' | 'bash',
  options: { cwd?: string },
  ...args: string[]
): { status: number | null; stderr: string } {
  const r = spawnSync('ip', ['netns', 'exec', NS, shell, CLEANUP, ...args], { encoding: 'utf8', ...options });
  return { status: r.status, stderr: r.stderr };
}

/** The wccpd user's state directory, as systemd makes it (StateDirectoryMode=0750), owned by nobody here. */
const NOBODY = 65534;
function wccpdOwnedDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-cleanup-owned-'));
  chownSync(dir, NOBODY, NOBODY);
  chmodSync(dir, 0o750);
  return dir;
}

/** What must never change: every rule, the routes of the kernel's and the admin's tables, and the nft tables that are
 * not wccpd's. */
function foreignState(): string {
  return (
    inNs('nft', 'list', 'table', 'netdev', 'other') +
    inNs('nft', 'list', 'table', 'netdev', 'wccpd') +
    inNs('nft', 'list', 'table', 'inet', 'wccpd_ingress') +
    (['-4', '-6'] as const)
      .map(
        (family) =>
          `rules ${family}\n${inNs('ip', family, 'rule', 'show')}` +
          ['local', 'main', 'default', '100', '2048'].map((t) => `table ${t}\n${routes(family, t)}`).join(''),
      )
      .join('')
  );
}

/** wccpd's objects, as the nft data plane makes them (src/dataplane/kernel/names.ts): slot v -> mark v<<19, table
 * 2048000000+v. */
function addOurs(values: number[]): void {
  inNs('nft', 'add', 'table', 'inet', 'wccpd');
  inNs('nft', 'add', 'table', 'inet', 'wccpd_userland');
  // The ingress backend's table, with a base chain on a client interface as it makes one.
  inNs('nft', 'add', 'table', 'netdev', 'wccpd_ingress');
  inNs('nft', 'add chain netdev wccpd_ingress in { type filter hook ingress device "v0" priority 0; policy accept; }');
  for (const v of values) {
    const table = String(2_048_000_000 + v);
    inNs('ip', 'route', 'add', 'default', 'via', `192.0.2.${10 + (v % 200)}`, 'dev', 'v0', 'table', table);
    inNs(
      'ip',
      'rule',
      'add',
      'priority',
      '2048',
      'fwmark',
      `0x${(v * 2 ** 19).toString(16)}/0xfff80000`,
      'lookup',
      table,
    );
  }
  // The guard pair around the slots' rules.
  inNs('ip', 'rule', 'add', 'priority', '2049', 'fwmark', '0/0xfff80000', 'nop');
  inNs('ip', 'rule', 'add', 'priority', '2047', 'fwmark', '0/0xfff80000', 'goto', '2049');
}

/** The IPv6 twins of wccpd's slot objects (an IPv6 service, src/dataplane/kernel/routes6.ts) and guard pair. */
function addOurs6(values: number[]): void {
  for (const v of values) {
    const table = String(2_048_000_000 + v);
    inNs('ip', '-6', 'route', 'add', 'default', 'via', `2001:db8:e::${10 + (v % 200)}`, 'dev', 'v0', 'table', table);
    const mark = `0x${(v * 2 ** 19).toString(16)}/0xfff80000`;
    inNs('ip', '-6', 'rule', 'add', 'priority', '2048', 'fwmark', mark, 'lookup', table);
  }
  inNs('ip', '-6', 'rule', 'add', 'priority', '2049', 'fwmark', '0/0xfff80000', 'nop');
  inNs('ip', '-6', 'rule', 'add', 'priority', '2047', 'fwmark', '0/0xfff80000', 'goto', '2049');
}

describe('systemd/wccpd-cleanup', { skip }, () => {
  let stateDir = '';
  let baseline = '';
  before(() => {
    stateDir = mkdtempSync(join(tmpdir(), 'wccpd-cleanup-'));
    execFileSync('ip', ['netns', 'add', NS]);
    inNs('ip', 'link', 'set', 'lo', 'up');
    // No duplicate address detection: the link-local addresses are in the local table at once, not a moment after
    // the baseline was taken.
    inNs('sysctl', '-qw', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0');
    inNs('ip', 'link', 'add', 'v0', 'type', 'veth', 'peer', 'name', 'v1');
    inNs('ip', 'addr', 'add', '192.0.2.1/24', 'dev', 'v0');
    inNs('ip', 'link', 'set', 'v0', 'up');
    inNs('ip', 'link', 'set', 'v1', 'up');
    inNs('ip', '-6', 'addr', 'add', '2001:db8:e::1/64', 'dev', 'v0', 'nodad');
    // Not ours: an admin's table 100 at priority 10000 with its own fwmark (the old cleanup flushed both), a rule at
    // our priority with our mask but another table, one at our priority with another mask, our old numbers.
    inNs('ip', 'route', 'add', 'unreachable', '203.0.113.0/24', 'table', 'default');
    inNs('ip', 'route', 'add', 'default', 'via', '192.0.2.12', 'dev', 'v0', 'table', '100');
    inNs('ip', 'route', 'add', 'default', 'via', '192.0.2.13', 'dev', 'v0', 'table', '2048');
    inNs('ip', 'rule', 'add', 'priority', '10000', 'fwmark', '0x5', 'lookup', '100');
    inNs('ip', 'rule', 'add', 'priority', '10001', 'fwmark', '0x101', 'lookup', '101');
    inNs('ip', 'rule', 'add', 'priority', '2048', 'fwmark', '0x80000/0xfff80000', 'lookup', '100');
    inNs('ip', 'rule', 'add', 'priority', '2048', 'fwmark', '0x80000/0xffffffff', 'lookup', '2048000001');
    inNs('ip', 'rule', 'add', 'priority', '2048', 'fwmark', '0x100000/0xfff80000', 'lookup', '2048');
    // Near the guard pair but not it: another action at 2047, another mask at 2049.
    inNs('ip', 'rule', 'add', 'priority', '2047', 'fwmark', '0/0xfff80000', 'lookup', '100');
    inNs('ip', 'rule', 'add', 'priority', '2049', 'fwmark', '0/0xffff0000', 'nop');
    // The same in IPv6: the admin's rule and table 100, a rule at our priority and mask to another table, a route in
    // the default table.
    inNs('ip', '-6', 'route', 'add', 'unreachable', '2001:db8:dead::/48', 'table', 'default');
    inNs('ip', '-6', 'route', 'add', 'default', 'via', '2001:db8:e::12', 'dev', 'v0', 'table', '100');
    inNs('ip', '-6', 'rule', 'add', 'priority', '10000', 'fwmark', '0x5', 'lookup', '100');
    inNs('ip', '-6', 'rule', 'add', 'priority', '2048', 'fwmark', '0x80000/0xfff80000', 'lookup', '100');
    inNs('ip', '-6', 'rule', 'add', 'priority', '2049', 'fwmark', '0/0xffff0000', 'nop');
    inNs('nft', 'add', 'table', 'inet', 'other');
    // Another tool's netdev table on the same interface, and tables named like ours in other families.
    inNs('nft', 'add', 'table', 'netdev', 'other');
    inNs('nft', 'add chain netdev other in { type filter hook ingress device "v0" priority -10; policy accept; }');
    inNs('nft', 'add', 'table', 'netdev', 'wccpd');
    inNs('nft', 'add', 'table', 'inet', 'wccpd_ingress');
    baseline = foreignState();
  });
  after(() => {
    spawnSync('ip', ['netns', 'del', NS]);
    rmSync(stateDir, { recursive: true, force: true });
  });

  /** Writes the record (after its header line), runs the cleanup: silent, exit 0, everything not ours as before. */
  function cleanUpWithRecord(lines: readonly string[]): void {
    writeFileSync(join(stateDir, 'kernel-objects'), ['wccpd-kernel-objects 1', ...lines, ''].join('\n'));
    assert.notEqual(foreignState(), baseline);
    const r = runCleanup('--state-dir', stateDir);
    assert.equal(r.stderr, '');
    assert.equal(r.status, 0);
    assert.equal(foreignState(), baseline);
  }

  it("removes the recorded objects and rules with all of wccpd's names; everything else stays byte-identical", () => {
    addOurs([1, 5, 7935, 8191]);
    inNs('nft', 'add', 'table', 'inet', 'wccpd_closed');
    // The record lists slot 5 (and lines that do not name our objects: they are ignored, never acted on).
    cleanUpWithRecord([
      'rule 2048 0x280000/0xfff80000 2048000005',
      'route 2048000005',
      'route 254',
      'route 100',
      'rule 10000 0x5/0xffffffff 100',
      'link eth0',
    ]);
    assert.doesNotMatch(inNs('ip', '-4', 'rule', 'show'), /0xfff80000 lookup 20480/);
    for (const t of ['2048000001', '2048000005', '2048007935', '2048008191']) {
      assert.equal(inNs('ip', '-4', 'route', 'show', 'table', t), '', `table ${t}`);
    }
    const tables = inNs('nft', 'list', 'tables');
    assert.doesNotMatch(tables, /table inet wccpd\n/);
    assert.doesNotMatch(tables, /wccpd_userland/);
    assert.doesNotMatch(tables, /table netdev wccpd_ingress/);
    assert.match(tables, /table inet other/);
    assert.match(tables, /table inet wccpd_closed/, 'a fail-closed service stays closed while wccpd is down');
    assert.equal(readFileSync(join(stateDir, 'kernel-objects'), 'utf8'), 'wccpd-kernel-objects 1\n');
  });

  it("IPv6 too: the recorded rule6 and route6 objects and the IPv6 rules with all of wccpd's names go", () => {
    addOurs([3]);
    addOurs6([1, 5, 7935]);
    // A table the record alone names (its rule already gone, a crash between the two).
    inNs('ip', '-6', 'route', 'add', 'default', 'via', '2001:db8:e::19', 'dev', 'v0', 'table', '2048000009');
    cleanUpWithRecord([
      'guard6 2047 2049',
      'rule6 2048 0x280000/0xfff80000 2048000005',
      'route6 2048000005',
      'route6 2048000009',
      'route6 100',
      'rule6 10000 0x5/0xffffffff 100',
    ]);
    for (const family of ['-4', '-6'] as const) {
      assert.doesNotMatch(
        inNs('ip', family, 'rule', 'show'),
        /0xfff80000 lookup 20480|^204[79]:.*0xfff80000 (goto|nop)/m,
      );
      for (const t of ['2048000001', '2048000003', '2048000005', '2048000009', '2048007935'])
        assert.equal(routes(family, t), '', `ip ${family} table ${t}`);
    }
    assert.equal(readFileSync(join(stateDir, 'kernel-objects'), 'utf8'), 'wccpd-kernel-objects 1\n');
  });

  it("without a record it still finds wccpd's rules by their names, and touches nothing else", () => {
    rmSync(join(stateDir, 'kernel-objects'));
    addOurs([2, 300]);
    const r = runCleanup('--state-dir', stateDir);
    assert.equal(r.stderr, '');
    assert.equal(r.status, 0);
    assert.equal(foreignState(), baseline);
    assert.equal(inNs('ip', '-4', 'route', 'show', 'table', '2048000300'), '');
  });

  it('--all removes the fail-closed table too; with nothing left it exits 0 and says nothing (idempotent)', () => {
    const r = runCleanup('--all', '--state-dir', stateDir);
    assert.equal(r.stderr, '');
    assert.equal(r.status, 0);
    assert.doesNotMatch(inNs('nft', 'list', 'tables'), /table inet wccpd(_closed|_userland)?\n|netdev wccpd_ingress/);
    const again = runCleanup('--all', '--state-dir', stateDir);
    assert.deepEqual(again, { status: 0, stderr: '' });
    assert.equal(foreignState(), baseline);
  });

  it("never writes through a link planted in the wccpd user's directory; the record is emptied as its owner", () => {
    const dir = wccpdOwnedDir();
    const elsewhere = mkdtempSync(join(tmpdir(), 'wccpd-cleanup-victim-'));
    try {
      const victim = join(elsewhere, 'shadow');
      writeFileSync(victim, 'root:precious\n', { mode: 0o644 });
      const record = join(dir, 'kernel-objects');
      writeFileSync(record, 'wccpd-kernel-objects 1\nrule 2048 0x180000/0xfff80000 2048000003\n');
      chownSync(record, NOBODY, NOBODY);
      // What a compromised wccpd can plant: the old script wrote `$record.tmp-cleanup` as root, through the link.
      for (const name of ['kernel-objects.tmp-cleanup', 'kernel-objects.tmp']) {
        symlinkSync(victim, join(dir, name));
        lchownSync(join(dir, name), NOBODY, NOBODY);
      }
      addOurs([3]);
      const r = runCleanup('--state-dir', dir);
      assert.equal(readFileSync(victim, 'utf8'), 'root:precious\n', 'the file behind the link is untouched');
      assert.equal(r.stderr, '');
      assert.equal(r.status, 0);
      assert.equal(inNs('ip', '-4', 'route', 'show', 'table', '2048000003'), '');
      assert.equal(readFileSync(record, 'utf8'), 'wccpd-kernel-objects 1\n');
      assert.equal(statSync(record).uid, NOBODY, 'written by the directory owner, not by root');
      assert.equal(foreignState(), baseline);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  for (const shell of ['sh', 'bash'] as const) {
    it(`under ${shell}, a record whose fields are not numbers runs nothing and is refused, naming the line`, () => {
      const dir = wccpdOwnedDir();
      const cwd = mkdtempSync(join(tmpdir(), 'wccpd-cleanup-cwd-'));
      try {
        const record = join(dir, 'kernel-objects');
        // Under bash, `$(( ))` expands an array subscript: the old script ran the command in it as root.
        const hostile = 'rule 2048 0x80000/0xfff80000+a[$(touch${IFS}pwned)] 2048000001';
        writeFileSync(record, `wccpd-kernel-objects 1\nroute 2048000006\n${hostile}\n`);
        chownSync(record, NOBODY, NOBODY);
        addOurs([6]);
        const r = runCleanupWith(shell, { cwd }, '--state-dir', dir);
        assert.equal(existsSync(join(cwd, 'pwned')), false, 'the command in the record ran');
        assert.match(r.stderr, /kernel-objects line 3 \(rule\): field 3 is not .*the record is refused/);
        assert.equal(r.status, 1);
        // What is found by its names is still removed; the record is kept for whoever looks into it.
        assert.doesNotMatch(inNs('ip', '-4', 'rule', 'show'), /0xfff80000 lookup 20480/);
        assert.equal(inNs('ip', '-4', 'route', 'show', 'table', '2048000006'), '');
        assert.match(readFileSync(record, 'utf8'), /pwned/);
        assert.equal(foreignState(), baseline);
      } finally {
        rmSync(dir, { recursive: true, force: true });
        rmSync(cwd, { recursive: true, force: true });
      }
    });
  }

  it('on a kernel without IPv6 (ipv6.disable=1) it skips the IPv6 part, says so once, and prints no ip -6 error', () => {
    // Such a kernel, simulated in a mount namespace of the run's own: no /proc/sys/net/ipv6 (a tmpfs over
    // /proc/sys/net), and an `ip` that refuses `-6` as that kernel does (the real one for everything else).
    const dir = mkdtempSync(join(tmpdir(), 'wccpd-cleanup-noipv6-'));
    try {
      const ip = realpathSync('/usr/sbin/ip');
      copyFileSync(ip, join(dir, 'ip.real'));
      writeFileSync(
        join(dir, 'ip'),
        `#!/bin/sh\nfor a in "$@"; do [ "$a" = -6 ] && { echo 'RTNETLINK answers: Address family not supported by ` +
          `protocol' >&2; echo 'Dump terminated' >&2; exit 2; }; done\nexec ${dir}/ip.real "$@"\n`,
        { mode: 0o755 },
      );
      addOurs([4]);
      // The record of a run before a reboot with IPv6 disabled: its IPv6 lines name nothing now.
      writeFileSync(
        join(stateDir, 'kernel-objects'),
        'wccpd-kernel-objects 1\nrule6 2048 0x200000/0xfff80000 2048000004\nroute6 2048000004\nguard6\n',
      );
      const r = spawnSync(
        'unshare',
        [
          '-m',
          'sh',
          '-ec',
          `mount --make-rprivate /; mount -t tmpfs none /proc/sys/net; mount --bind ${dir}/ip ${ip}
           exec ip netns exec ${NS} sh ${CLEANUP} --state-dir ${stateDir}`,
        ],
        { encoding: 'utf8' },
      );
      assert.equal(r.stderr, '');
      assert.equal(r.status, 0);
      assert.equal(
        r.stdout,
        'wccpd-cleanup: this kernel has no IPv6 (/proc/sys/net/ipv6 is absent): no IPv6 rule or route to remove\n',
      );
      // The IPv4 part as ever.
      assert.doesNotMatch(inNs('ip', '-4', 'rule', 'show'), /0xfff80000 lookup 20480/);
      assert.equal(inNs('ip', '-4', 'route', 'show', 'table', '2048000004'), '');
      assert.equal(readFileSync(join(stateDir, 'kernel-objects'), 'utf8'), 'wccpd-kernel-objects 1\n');
      assert.equal(foreignState(), baseline);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses an unknown argument with exit 2, naming it', () => {
    const r = runCleanup('--everything');
    assert.equal(r.status, 2);
    assert.match(r.stderr, /unknown argument --everything/);
  });
});
