// `wccpctl decode` as an admin runs it: a real process, files and stdin, exit codes and what it prints.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodeIcp } from '../../src/wire/icp.js';
import { encodeGreRedirect, encodeIpv4Tcp } from '../../src/wire/gre.js';

import { FIXTURES } from '../helpers/fixtures.js';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), `wccpctl-decode-${process.pid}-`));
after(() => rmSync(dir, { recursive: true, force: true }));

function wccpctl(args: string[], input?: string | Buffer): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/wccpctl.ts', ...args], {
    cwd: ROOT,
    input,
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const fixtures = ['squid-5.7', 'squid-master'].flatMap((d) =>
  readdirSync(join(FIXTURES, d))
    .filter((f) => f.endsWith('.hex'))
    .map((f) => join(FIXTURES, d, f)),
);

test('decodes every Squid fixture file: exit 0, message type and the engine address printed', () => {
  assert.equal(fixtures.length, 5);
  for (const f of fixtures) {
    const r = wccpctl(['decode', f]);
    assert.equal(r.status, 0, `${f}: ${r.stderr}`);
    assert.equal(r.stderr, '');
    const type = f.includes('redirect-assign') ? 'REDIRECT_ASSIGN' : 'HERE_I_AM';
    assert.match(r.stdout, new RegExp(`^type=\\d+ ${type} version=0x0200`), f);
    const engine = /(192\.0\.2\.\d+)\.hex$/.exec(f)?.[1] ?? '';
    assert.ok(r.stdout.includes(engine), `${f} output names ${engine}`);
  }
});

test('--json prints the decoded message as JSON (before or after the command name)', () => {
  const f = join(FIXTURES, 'squid-5.7', 'here-i-am-mask-192.0.2.12.hex');
  for (const args of [
    ['decode', '--json', f],
    ['--json', 'decode', f],
  ]) {
    const r = wccpctl(args);
    assert.equal(r.status, 0, r.stderr);
    const msg = JSON.parse(r.stdout) as {
      type: string;
      components: { kind: string; element?: { address: string; assignment: { type: string } } }[];
    };
    assert.equal(msg.type, 'HERE_I_AM');
    const id = msg.components.find((c) => c.kind === 'web-cache-identity');
    assert.equal(id?.element?.address, '192.0.2.12');
    assert.equal(id?.element?.assignment.type, 'mask');
  }
});

test('reads hex text or raw bytes from stdin (no FILE, or -)', () => {
  const hex = readFileSync(join(FIXTURES, 'squid-master', 'redirect-assign-192.0.2.11.hex'), 'utf8');
  const spaced = (hex.trim().match(/.{1,8}/g) ?? []).join(' \n');
  const a = wccpctl(['decode'], spaced);
  assert.equal(a.status, 0, a.stderr);
  assert.match(a.stdout, /REDIRECT_ASSIGN/);
  assert.match(a.stdout, /0-255 \(256\)/);
  const b = wccpctl(['decode', '-'], Buffer.from(hex.trim(), 'hex'));
  assert.equal(b.status, 0, b.stderr);
  assert.equal(b.stdout, a.stdout);
});

test('a broken datagram exits 1 with the decode error naming the component and offset on stderr', () => {
  const bytes = Buffer.from(
    readFileSync(join(FIXTURES, 'squid-5.7', 'here-i-am-hash-192.0.2.11.hex'), 'utf8').trim(),
    'hex',
  );
  bytes.writeUInt16BE(200, 46); // WC_ID_INFO (at offset 44) now claims 200 bytes; 100 are left
  const path = join(dir, 'broken.hex');
  writeFileSync(path, bytes.toString('hex'));
  const r = wccpctl(['decode', path]);
  assert.equal(r.status, 1);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /^wccpctl decode: WCCP2 HERE_I_AM: WC_ID_INFO at offset 44: /);
  const cut = wccpctl(['decode'], bytes.subarray(0, 5).toString('hex'));
  assert.equal(cut.status, 1);
  assert.match(cut.stderr, /header at offset 0: truncated/);
});

test('bad input and bad usage exit 1 with a message', () => {
  const odd = wccpctl(['decode'], 'abc');
  assert.equal(odd.status, 1);
  assert.match(odd.stderr, /odd number/);
  const missing = wccpctl(['decode', join(dir, 'no-such-file')]);
  assert.equal(missing.status, 1);
  assert.match(missing.stderr, /cannot read .*no-such-file/);
  const both = wccpctl(['decode', '--icp', '--gre', '-'], '00');
  assert.equal(both.status, 1);
  const unknown = wccpctl(['frobnicate']);
  assert.equal(unknown.status, 1);
  assert.match(unknown.stderr, /unknown command 'frobnicate'/);
});

test('--icp decodes an ICP message and --gre a GRE redirection; each rejects the other kind', () => {
  const icp = encodeIcp({
    opcode: 'MISS_NOFETCH',
    requestNumber: 42,
    options: 0,
    optionData: 0,
    senderAddress: '192.0.2.11',
    url: 'http://198.51.100.80/x',
  });
  const a = wccpctl(['decode', '--icp'], icp.toString('hex'));
  assert.equal(a.status, 0, a.stderr);
  assert.match(a.stdout, /^ICP MISS_NOFETCH .*request=42 .*sender=192\.0\.2\.11/);
  assert.match(a.stdout, /url=http:\/\/198\.51\.100\.80\/x/);
  const gre = encodeGreRedirect(
    { serviceId: 90, dynamic: true, alternate: false, altBucket: 3, priBucket: 77 },
    encodeIpv4Tcp({ src: '203.0.113.10', dst: '198.51.100.80', srcPort: 40000, dstPort: 80 }),
  );
  const b = wccpctl(['decode', '--gre', '--json'], gre);
  assert.equal(b.status, 0, b.stderr);
  const g = JSON.parse(b.stdout) as {
    serviceId: number;
    priBucket: number;
    dynamic: boolean;
    innerIpv4: { dst: string; checksumOk: boolean };
  };
  assert.deepEqual(
    [g.serviceId, g.priBucket, g.dynamic, g.innerIpv4.dst, g.innerIpv4.checksumOk],
    [90, 77, true, '198.51.100.80', true],
  );
  const c = wccpctl(['decode', '--gre'], icp);
  assert.equal(c.status, 1);
  assert.match(c.stderr, /^wccpctl decode: GRE redirect: GRE header at offset 0: unsupported-flags/);
});
