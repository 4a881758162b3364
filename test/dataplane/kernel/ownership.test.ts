// The nft backend's bookkeeping without a kernel (a fake `ip`/`nft`): slots never run out over thousands of joins and
// leaves and an engine keeps its slot across them, the ownership record is written before each object is created and
// never names a foreign object, GRE
// engines behind a router are accepted while L2 ones must be on-link, and the ip_gre probe needs no namespace.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DataplaneError, MAX_SLOT, MIN_SLOT, NftRedirector } from '../../../src/dataplane/index.js';
import { kernelHasIpGre } from '../../../src/dataplane/nft/gre-probe.js';
import { homeSlot, parseSlotKey } from '../../../src/dataplane/kernel/engine-slots.js';
import type { Exec } from '../../../src/dataplane/kernel/exec.js';
import { OwnershipRecord, parseObjectLine } from '../../../src/dataplane/kernel/ownership.js';
import { findEngineSegment } from '../../../src/dataplane/kernel/routes.js';
import { fakeRouteGets, fakeTimers, webCache } from '../service-fixture.js';

/** A fake `ip` and `nft`: every engine is on-link via br0 unless `via` names its router; commands are logged. */
function fakeKernel(via: Record<string, string> = {}): { exec: Exec; log: string[] } {
  const log: string[] = [];
  const exec: Exec = (cmd, args, input) => {
    const line = `${cmd} ${args.join(' ')}`;
    log.push(input !== undefined && cmd === 'ip' ? `${line}\n${input}` : line);
    if (cmd === 'ip' && args[0] === '-j' && args[1] === 'route' && args[2] === 'get') {
      const e = args[3] ?? '';
      return Promise.resolve(
        JSON.stringify([{ dst: e, dev: 'br0', prefsrc: '192.0.2.1', ...(via[e] ? { gateway: via[e] } : {}) }]),
      );
    }
    if (cmd === 'ip' && args.includes('-batch')) return Promise.resolve(fakeRouteGets(input, via));
    if (cmd === 'ip' && args.includes('-j')) return Promise.resolve('[]');
    if (cmd === 'nft' && args[0] === 'list')
      return Promise.reject(new DataplaneError('command-failed', 'no such table'));
    return Promise.resolve('');
  };
  return { exec, log };
}

test('slots never run out: 8,000 engines join and leave, each slot within range and at its home, the same on return', async () => {
  const { exec } = fakeKernel();
  const r = new NftRedirector({ exec, probeGre: () => Promise.resolve(false) });
  await r.start();
  const slotOf = new Map<string, number>();
  let engines: string[] = [];
  for (let i = 0; i < 8_000; i++) {
    // One engine leaves (the oldest, once 32 are in), one joins: addresses cycle through 192.0.2.2-254.
    const joining = `192.0.2.${2 + (i % 253)}`;
    engines = [...engines.filter((e) => e !== joining), joining].slice(-32);
    await r.apply(webCache((b) => engines[b % engines.length] ?? null, engines));
    const inUse = r.slotsInUse();
    assert.equal(inUse.size, engines.length);
    assert.equal(new Set(inUse.values()).size, inUse.size, 'no two engines share a slot');
    for (const [key, s] of inUse) {
      assert.ok(s >= MIN_SLOT && s <= MAX_SLOT, `slot ${s}`);
      const { engine } = parseSlotKey(key);
      assert.equal(s, homeSlot(parseSlotKey(key), { min: MIN_SLOT, max: MAX_SLOT }), `${key} at its home`);
      // An engine that comes back gets the slot it had: its connections' marks (kept by conntrack, or replicated to a
      // peer gateway) still name it.
      assert.equal(slotOf.get(engine) ?? s, s, `${engine} came back to another slot`);
      slotOf.set(engine, s);
    }
  }
  assert.equal(slotOf.size, 253);
});

test('more engines at once than slots is a clear error, not a wrap onto a slot in use', async () => {
  const { exec } = fakeKernel();
  const r = new NftRedirector({ exec, probeGre: () => Promise.resolve(false) });
  await r.start();
  // The most wccpd can ever need at once: 32 engines in each of 206 service groups (0 and 51-255) = 6,592; the
  // backend does not care which group an engine is in, so one group of 6,592 stands for them (one transaction).
  const all = Array.from({ length: 206 * 32 }, (_, n) => `10.${n >> 16}.${(n >> 8) & 255}.${n & 255}`);
  await r.apply(webCache(() => null, all, { serviceId: 51 }));
  assert.equal(r.slotsInUse().size, 206 * 32, 'every service group full: 6,592 engines fit');
  const more = Array.from({ length: 32 * 45 }, (_, i) => `172.16.${i >> 8}.${i & 255}`);
  await assert.rejects(
    r.apply(webCache(() => null, more, { serviceId: 0 })),
    (e: unknown) => e instanceof DataplaneError && /no free engine slot/.test(e.message),
  );
});

test('the record lists each object before it is created, and is emptied once they are removed', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-record-'));
  try {
    const { exec, log } = fakeKernel();
    const file = join(dir, 'kernel-objects');
    let recordAtRuleAdd = '';
    const watching: Exec = async (cmd, args, input) => {
      if (cmd === 'ip' && input?.includes('rule add')) recordAtRuleAdd = readFileSync(file, 'utf8');
      return exec(cmd, args, input);
    };
    const timers = fakeTimers();
    const r = new NftRedirector({
      exec: watching,
      stateDir: dir,
      probeGre: () => Promise.resolve(false),
      now: timers.now,
      setTimer: timers.setTimer,
    });
    await r.start();
    await r.apply(webCache(() => '192.0.2.11', ['192.0.2.11']));
    // 192.0.2.11's home slot (engine-slots.ts): 0xc000020b mod 7933 + 1 = 7547, field mark 7547 << 19.
    const slot = homeSlot({ serviceId: 0, engine: '192.0.2.11', forwarding: 'l2' }, { min: MIN_SLOT, max: MAX_SLOT });
    assert.equal(slot, 7547);
    // One ip process made the guard pair, the slot's route and its rule: by then the record listed them.
    assert.equal(
      recordAtRuleAdd,
      'wccpd-kernel-objects 1\nguard 2047 2049\nroute 2048007547\nrule 2048 0xebd80000/0xfff80000 2048007547\n',
    );
    assert.match(
      log.join('\n'),
      /ip -j -force -batch -\nroute get 192\.0\.2\.11\nrule add priority 2049 fwmark 0\/0xfff80000 nop\nrule add priority 2047 fwmark 0\/0xfff80000 goto 2049\nroute replace default via 192\.0\.2\.11 table 2048007547\nrule add priority 2048 fwmark 0xebd80000\/0xfff80000 lookup 2048007547\n/,
    );
    // The engine leaves: its slot is parked (not live), its objects and their record lines stay, no ip runs.
    log.splice(0);
    await r.apply(webCache(() => null, []));
    assert.deepEqual(r.slotsInUse(), new Map());
    assert.deepEqual(r.parkedSlots(), new Map([[7547, '0 l2 192.0.2.11']]));
    assert.equal(log.filter((l) => l.startsWith('ip ')).length, 0);
    assert.match(readFileSync(file, 'utf8'), /route 2048007547/);
    // Parked for ten minutes, then removed: rules first, then the route, then the guard pair; the record emptied.
    timers.advance(10 * 60_000);
    await r.settled();
    assert.equal(readFileSync(file, 'utf8'), 'wccpd-kernel-objects 1\n');
    assert.deepEqual(r.parkedSlots(), new Map());
    assert.match(
      log.join('\n'),
      /rule del priority 2048 fwmark 0xebd80000\/0xfff80000 lookup 2048007547\nroute del default table 2048007547\nrule del priority 2047 fwmark 0\/0xfff80000 goto 2049\nrule del priority 2049 fwmark 0\/0xfff80000 nop\n$/,
    );
    // No command ever names a table, rule or device outside wccpd's own.
    assert.doesNotMatch(log.join('\n'), /\b(flush|table (25[3-5]|main|local|default|100)\b)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a record line that does not name one of wccpd's objects is ignored, never acted on", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'wccpd-record-'));
  try {
    writeFileSync(
      join(dir, 'kernel-objects'),
      [
        'wccpd-kernel-objects 1',
        'route 254',
        'route 2048000001',
        'route 100',
        'rule 10000 0x5/0xffffffff 100',
        'rule 2048 0x80000/0xfff80000 254',
        'rule 2048 0x80001/0xfff80000 2048000001',
        'rule 2048 0x100000/0xfff80000 2048000002',
        'link eth0',
        'link wccpd-gre7',
        'link wccpd-gre99999',
        '',
      ].join('\n'),
    );
    const record = OwnershipRecord.inStateDir(dir);
    const loaded = await record.load();
    assert.deepEqual(loaded.objects, [
      { kind: 'route', table: 2048000001 },
      { kind: 'rule', value: 2 },
      { kind: 'link', name: 'wccpd-gre7' },
    ]);
    assert.equal(loaded.ignored.length, 7);
    assert.equal(parseObjectLine('route 2048008191')?.kind, 'route');
    assert.equal(parseObjectLine('route 2048008192'), null);
    assert.deepEqual(parseObjectLine('guard 2047 2049'), { kind: 'guard' });
    for (const near of ['guard 2047 2050', 'guard 2048 2049', 'guard', 'guard 2047 2049 x'])
      assert.equal(parseObjectLine(near), null, near);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('L2 engines must be on-link; a GRE engine may be behind a router', async () => {
  const { exec } = fakeKernel({ '198.51.100.7': '192.0.2.254' });
  await assert.rejects(
    findEngineSegment(exec, '198.51.100.7', 'l2'),
    (e: unknown) =>
      e instanceof DataplaneError && e.reason === 'engine-not-attached' && /forwarding: gre/.test(e.message),
  );
  assert.deepEqual(await findEngineSegment(exec, '198.51.100.7', 'gre'), { dev: 'br0', src: '192.0.2.1' });
});

test('the ip_gre probe creates no namespace: /sys/module first, else a recorded wccpd-gre0 made and deleted at once', async () => {
  const record = new OwnershipRecord(null);
  const loaded = fakeKernel();
  assert.equal(await kernelHasIpGre(loaded.exec, record, { moduleLoaded: () => Promise.resolve(true) }), true);
  assert.deepEqual(loaded.log, []);

  const tried = fakeKernel();
  const seenRecorded: boolean[] = [];
  const exec: Exec = (cmd, args, input) => {
    if (args[1] === 'add') seenRecorded.push(record.has({ kind: 'link', name: 'wccpd-gre0' }));
    return tried.exec(cmd, args, input);
  };
  assert.equal(await kernelHasIpGre(exec, record, { moduleLoaded: () => Promise.resolve(false) }), true);
  assert.deepEqual(seenRecorded, [true], 'recorded before it is created');
  assert.ok(tried.log.every((l) => !/netns/.test(l)));
  assert.match(tried.log[0] ?? '', /^ip link add wccpd-gre0 type gre /);
  assert.equal(tried.log[1], 'ip link del wccpd-gre0');
  assert.deepEqual(record.objects(), [], 'forgotten once deleted');

  const without: Exec = (cmd, args) =>
    args[1] === 'add'
      ? Promise.reject(new DataplaneError('command-failed', 'Unknown device type.'))
      : Promise.resolve('');
  assert.equal(await kernelHasIpGre(without, record, { moduleLoaded: () => Promise.resolve(false) }), false);
  assert.deepEqual(record.objects(), []);
});

test('GRE: one tunnel device per engine, shared by the slots of every service that uses it, deleted with its last slot', async () => {
  const { exec, log } = fakeKernel();
  // Parking off: a released slot's objects go with the change that releases it.
  const r = new NftRedirector({ exec, probeGre: () => Promise.resolve(true), parkMs: 0 });
  await r.start();
  const E1 = '192.0.2.11';
  const E2 = '192.0.2.12';
  const gre = (serviceId: number, engines: string[]): ReturnType<typeof webCache> =>
    webCache((b) => engines[b % engines.length] ?? null, engines, { serviceId, forwarding: 'gre', serviceFlags: 0x12 });
  const text = (): string => log.splice(0).join('\n');
  await r.apply(gre(80, [E1, E2]));
  await r.apply(gre(90, [E1, E2]));
  const both = text();
  // Two services x two engines: four slots, but the kernel refuses a second tunnel to the same engine, so two devices.
  assert.deepEqual(
    [...both.matchAll(/link add (\S+) type gre remote (\S+)/g)].map((m) => `${m[1]} ${m[2]}`),
    [`wccpd-gre1 ${E1}`, `wccpd-gre2 ${E2}`],
  );
  const slots = r.slotsInUse();
  assert.equal(slots.size, 4);
  for (const id of [80, 90]) {
    for (const [e, dev] of [
      [E1, 'wccpd-gre1'],
      [E2, 'wccpd-gre2'],
    ] as const) {
      const table = 2_048_000_000 + (slots.get(`${id} gre ${e}`) ?? NaN);
      assert.match(both, new RegExp(`route replace default dev ${dev} table ${table}\\n`), `service ${id} engine ${e}`);
    }
  }
  // Service 90 goes: its slots' rules and routes go, the devices stay for service 80's slots.
  await r.removeService(90);
  const one = text();
  assert.equal((one.match(/rule del /g) ?? []).length, 2);
  assert.doesNotMatch(one, /link (add|del)/);
  assert.deepEqual(
    r.record.objects().filter((o) => o.kind === 'link'),
    [
      { kind: 'link', name: 'wccpd-gre1' },
      { kind: 'link', name: 'wccpd-gre2' },
    ],
  );
  // E1 leaves and E3 joins in one change: E1's device is deleted after E3's is made, so E3 does not take its name.
  await r.apply(gre(80, [E2, '192.0.2.13']));
  const swap = text();
  assert.match(swap, /link add wccpd-gre3 type gre remote 192\.0\.2\.13/);
  assert.match(swap, /link del wccpd-gre1/);
  assert.ok(swap.indexOf('link add wccpd-gre3') < swap.indexOf('link del wccpd-gre1'));
  await r.removeService(80);
  assert.match(text(), /link del wccpd-gre2\nlink del wccpd-gre3/);
  assert.deepEqual(r.record.objects(), []);
});
