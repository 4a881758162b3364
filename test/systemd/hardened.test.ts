// The shipped unit's hardening, and the daemon working under it. systemd-analyze scores the unit offline. There is no
// systemd as PID 1 here (nor in CI's container), so systemd-run cannot start the unit: instead the daemon runs in a
// namespace gateway under the unit's own settings, read from the file: an unprivileged user (nobody, standing in for
// wccpd), exactly its bounding and ambient capabilities, no new privileges, its UMask; strace records every system
// call and socket family of the daemon and its nft/ip children, which must all be inside the unit's SystemCallFilter
// and RestrictAddressFamilies. A client's connection must reach the engine through each data plane.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { haveCommand, isRoot, need } from '../helpers/require.js';
import { waitFor } from '../helpers/daemon.js';
import { killTree, within } from '../helpers/processes.js';
import { Topology } from '../dataplane/topology.js';
import { UNIT_GID, UNIT_UID, asUnitArgs, testEngineArgs, writeGwConfig } from '../dataplane/gw-daemon.js';
import { serviceSection } from './unit-file.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const UNIT_PATH = join(REPO, 'systemd/wccpd.service');
const UNIT = serviceSection(readFileSync(UNIT_PATH, 'utf8'));
const one = (k: string): string => UNIT.get(k)?.at(-1) ?? '';

/** `systemd-analyze syscall-filter`: every group, expanded (groups name other groups). */
function syscallGroups(): Map<string, Set<string>> {
  const raw = new Map<string, string[]>();
  let group = '';
  for (const line of execFileSync('systemd-analyze', ['syscall-filter'], { encoding: 'utf8' }).split('\n')) {
    if (/^@\S+$/.test(line)) {
      group = line;
      raw.set(group, []);
      continue;
    }
    const item = line.trim();
    if (group && item && !item.startsWith('#')) raw.get(group)!.push(item);
  }
  const expand = (name: string, seen = new Set<string>()): Set<string> => {
    const out = new Set<string>();
    if (seen.has(name)) return out;
    seen.add(name);
    for (const item of raw.get(name) ?? []) {
      if (item.startsWith('@')) for (const x of expand(item, seen)) out.add(x);
      else out.add(item);
    }
    return out;
  };
  return new Map([...raw.keys()].map((g) => [g, expand(g)]));
}

/** The system calls the unit's SystemCallFilter= lines allow (an allow list, then `~` lines that take away). */
function allowedSyscalls(): Set<string> {
  const groups = syscallGroups();
  const names = (words: string[]) => words.flatMap((w) => (w.startsWith('@') ? [...(groups.get(w) ?? [])] : [w]));
  let allowed = new Set<string>();
  for (const line of UNIT.get('SystemCallFilter') ?? []) {
    if (line.startsWith('~')) {
      const deny = new Set(names(line.slice(1).trim().split(/\s+/)));
      allowed = new Set([...allowed].filter((s) => !deny.has(s)));
    } else for (const s of names(line.split(/\s+/))) allowed.add(s);
  }
  return allowed;
}

interface Trace {
  syscalls: Set<string>;
  families: Set<string>;
  writes: Set<string>;
  denied: string[];
}

/** The system calls, socket families and written files of every traced process (the GRE probe needs no namespace). */
function readTrace(file: string): Trace {
  const t: Trace = { syscalls: new Set(), families: new Set(), writes: new Set(), denied: [] };
  const lines = readFileSync(file, 'utf8').split('\n');
  for (const line of lines) {
    // execve's EACCES are PATH lookups through directories nobody may read; prlimit64 raising RLIMIT_NOFILE is
    // optional.
    if (/= -1 EPERM|= -1 EACCES/.test(line) && !/ (execve|prlimit64)\(/.test(line)) t.denied.push(line);
    const m = /^\d+\s+([a-z0-9_]+)\((.*)$/.exec(line);
    if (!m) continue;
    t.syscalls.add(m[1]!);
    const fam = /^(?:socket|socketpair)\((AF_[A-Z0-9]+)/.exec(`${m[1]}(${m[2]}`);
    if (fam) t.families.add(fam[1]!);
    const open = /^openat\([^,]+, "([^"]+)", ([A-Z_|]+)/.exec(`${m[1]}(${m[2]}`);
    if (open && /O_WRONLY|O_RDWR|O_CREAT/.test(open[2]!) && !/= -1 /.test(line)) t.writes.add(open[1]!);
  }
  return t;
}

describe('systemd/wccpd.service hardening', () => {
  it(
    'scores 2.5 or lower in systemd-analyze security (offline), running as its own user',
    { skip: need(haveCommand('systemd-analyze'), 'systemd-analyze') },
    () => {
      const r = spawnSync('systemd-analyze', ['security', '--offline=yes', UNIT_PATH], { encoding: 'utf8' });
      const m = /Overall exposure level for wccpd\.service: (\d+\.\d+)/.exec(r.stdout);
      assert.ok(m, `no overall exposure in:\n${r.stdout}${r.stderr}`);
      assert.ok(
        Number(m[1]) <= 2.5,
        `exposure ${m[1]} > 2.5:\n${r.stdout
          .split('\n')
          .filter((l) => l.startsWith('✗'))
          .join('\n')}`,
      );
      assert.match(r.stdout, /✓ User=\/DynamicUser=/);
      assert.match(r.stdout, /✓ SystemCallFilter=~@privileged/);
    },
  );

  it(
    'the sysusers file makes wccpd a system user with no login and the state directory as home',
    { skip: need(haveCommand('systemd-sysusers'), 'systemd-sysusers') },
    () => {
      const root = mkdtempSync(join(tmpdir(), `wccpd-sysusers-${process.pid}-`));
      try {
        mkdirSync(join(root, 'etc'));
        execFileSync('systemd-sysusers', [`--root=${root}`, join(REPO, 'systemd/wccpd.sysusers')], { stdio: 'pipe' });
        const m = /^wccpd:x:(\d+):(\d+):wccpd WCCPv2 router:\/var\/lib\/wccpd:\/usr\/sbin\/nologin$/m.exec(
          readFileSync(join(root, 'etc/passwd'), 'utf8'),
        );
        assert.ok(m, 'a wccpd line in passwd');
        assert.ok(Number(m[1]) < 1000, `a system uid (${m[1]})`);
        assert.match(readFileSync(join(root, 'etc/group'), 'utf8'), new RegExp(`^wccpd:x:${m[2]}:`, 'm'));
        assert.equal(one('User'), 'wccpd');
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    },
  );

  for (const backend of ['nft', 'userland'] as const) {
    const skip = need(
      isRoot &&
        ['strace', 'setpriv', 'nft', 'curl', 'systemd-analyze'].every(haveCommand) &&
        existsSync(join(REPO, 'dist/src/cli/wccpd.js')),
      'root with strace, setpriv, nft, curl, systemd-analyze and a build (npm run build)',
    );
    it(
      `as an unprivileged user with only the unit's capabilities, system calls and families, the ${backend} data plane works`,
      { skip },
      async () => {
        const topo = new Topology(backend === 'nft' ? 'hn' : 'hu', 1);
        const dir = mkdtempSync(join(tmpdir(), `wccpd-hardened-${process.pid}-`));
        let engine: ReturnType<typeof spawn> | null = null;
        let daemon: ReturnType<typeof spawn> | null = null;
        let node = 0;
        try {
          await topo.up();
          chmodSync(dir, 0o755);
          const { config, stateDir } = writeGwConfig(dir, { backend, asUnitUser: true });
          const traceDir = join(dir, 'trace');
          mkdirSync(traceDir, { mode: 0o700 });
          chownSync(traceDir, UNIT_UID, UNIT_GID);
          const wccpd = join(REPO, 'bin/wccpd.js');
          const check = spawnSync('ip', asUnitArgs(topo.gw, `${process.execPath} ${wccpd} check-config ${config}`), {
            encoding: 'utf8',
            timeout: 60_000,
          });
          assert.equal(check.status, 0, `ExecStartPre check-config as the unit's user: ${check.stderr}`);

          const trace = join(traceDir, 'strace.out');
          daemon = spawn(
            'ip',
            asUnitArgs(topo.gw, `strace -f -qq -o ${trace} ${process.execPath} ${wccpd} --config ${config}`),
            {
              stdio: ['ignore', 'pipe', 'pipe'],
            },
          );
          const output: string[] = [];
          daemon.stdout?.on('data', (d: Buffer) => output.push(d.toString()));
          daemon.stderr?.on('data', (d: Buffer) => output.push(d.toString()));
          const exited = new Promise<number | null>((r) => daemon!.once('exit', (code) => r(code)));
          engine = spawn('ip', testEngineArgs(topo, 120), { stdio: 'ignore' });
          const api = (path: string) => topo.inGw(`curl -s --max-time 10 http://127.0.0.1:8080${path}`);

          const withOutput = async <T>(p: Promise<T>): Promise<T> => {
            try {
              return await p;
            } catch (e) {
              throw new Error(`${(e as Error).message}\ndaemon output:\n${output.join('')}`);
            }
          };
          await withOutput(
            waitFor(
              'the engine usable with every bucket',
              async () => {
                const v = JSON.parse(api('/api/v1/services/0/engines') || '{}') as {
                  engines?: { state: string; buckets: number }[];
                };
                return v.engines?.[0]?.state === 'usable' && v.engines[0].buckets === 256 ? true : null;
              },
              60_000,
            ),
          );
          // Both data planes, as the unit's user: nft's rules, userland's captures and injected frames.
          let last: unknown = null;
          const reached = await withOutput(
            waitFor(
              'a client connection answered by the engine',
              async () => {
                const r = await topo.probe('198.51.100.7', 80, 2000);
                last = r;
                return r.data === 'engine1' ? r : null;
              },
              20_000,
            ).catch((e: Error) => {
              throw new Error(`${e.message}; last probe ${JSON.stringify(last)}`);
            }),
          );
          assert.equal(reached.data, 'engine1');
          const metrics = api('/metrics');
          assert.match(
            metrics,
            new RegExp(`wccpd_dataplane_apply_seconds_count\\{backend="${backend}",outcome="ok"\\} [1-9]`),
          );
          assert.doesNotMatch(
            metrics,
            new RegExp(`wccpd_dataplane_apply_seconds_count\\{backend="${backend}",outcome="error"\\} [1-9]`),
          );
          if (backend === 'userland')
            assert.match(
              api('/api/v1/status'),
              /native pcap and raw-socket/,
              'native capture and raw sockets, not the shims',
            );

          const state = await waitFor('the state file', async () =>
            existsSync(join(stateDir, 'state.json')) ? statSync(join(stateDir, 'state.json')) : null,
          );
          assert.deepEqual(
            [state.uid, state.gid, state.mode & 0o777],
            [UNIT_UID, UNIT_GID, 0o600],
            'state.json owned by the user, private (UMask)',
          );
          assert.equal(statSync(stateDir).mode & 0o777, 0o750);

          // SIGTERM to the daemon itself (strace's child): it removes its own kernel objects, with ambient
          // capabilities.
          const stracePid = daemon.pid!;
          node = Number(readFileSync(`/proc/${stracePid}/task/${stracePid}/children`, 'utf8').trim().split(/\s+/)[0]);
          assert.ok(node > 0, 'the daemon under strace');
          process.kill(node, 'SIGTERM');
          assert.equal(await within(exited, 30_000, 'wccpd after SIGTERM'), 0, `wccpd exits 0:\n${output.join('')}`);
          daemon = null;
          const table = backend === 'nft' ? 'wccpd' : 'wccpd_userland';
          assert.equal(
            spawnSync('ip', ['netns', 'exec', topo.gw, 'nft', 'list', 'table', 'inet', table]).status,
            1,
            `inet ${table} removed at stop`,
          );

          const t = readTrace(trace);
          const allowed = allowedSyscalls();
          const denied = [...t.syscalls].filter((s) => !allowed.has(s)).sort();
          assert.deepEqual(
            denied,
            [],
            `system calls outside SystemCallFilter (they would fail with ${one('SystemCallErrorNumber')})`,
          );
          const families = one('RestrictAddressFamilies').split(/\s+/);
          assert.deepEqual(
            [...t.families].filter((f) => !families.includes(f)),
            [],
            'socket families outside RestrictAddressFamilies',
          );
          assert.ok(t.families.has('AF_NETLINK'), 'nft and ip talk netlink');
          if (backend === 'userland') assert.ok(t.families.has('AF_PACKET'), 'pcap captures on an AF_PACKET socket');
          assert.deepEqual(t.denied, [], 'no system call failed for lack of permission');
          // ProtectSystem=strict leaves the state directory the only writable place.
          const writes = [...t.writes].filter(
            (p) =>
              !p.startsWith(`${stateDir}/`) &&
              !p.startsWith('/dev/null') &&
              !p.startsWith('/proc/self/') &&
              p !== trace,
          );
          assert.deepEqual(writes, [], 'files opened for writing outside the state directory');
        } finally {
          // strace, the daemon it traces and their children: killing strace alone left the daemon running, holding
          // this file's pipes, so a failed run never ended.
          for (const p of [daemon, engine]) {
            if (p?.pid !== undefined && p.exitCode === null && p.signalCode === null) killTree(p.pid);
            p?.stdout?.destroy();
            p?.stderr?.destroy();
          }
          await topo.down();
          rmSync(dir, { recursive: true, force: true });
        }
      },
    );
  }
});
