import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ConfigError, configWarnings, parseConfig } from '../../src/config/index.js';
import { MINIMAL, problemAt, problems, withService } from './helpers.js';

const DESIGN = readFileSync(new URL('./fixtures/design-example.yaml', import.meta.url), 'utf8');

describe('parseConfig', () => {
  it('families: ipv4, ipv6 or both; not empty, not twice; ipv6 needs l2 forwarding and hash assignment', () => {
    assert.deepEqual(parseConfig(withService('families: [ipv4, ipv6]'), 't').services[0]!.families, ['ipv4', 'ipv6']);
    assert.deepEqual(parseConfig(withService('families: [ipv6]'), 't').services[0]!.families, ['ipv6']);
    assert.deepEqual(parseConfig(MINIMAL, 't').services[0]!.families, ['ipv4']);
    assert.match(problemAt(withService('families: []'), 'services[0].families').message, /is empty/);
    assert.match(
      problemAt(withService('families: [ipv4, inet6]'), 'services[0].families[1]').message,
      /"inet6" is not an address family; write ipv4, ipv6 or both/,
    );
    assert.match(problemAt(withService('families: [ipv6, ipv6]'), 'services[0].families[1]').message, /listed twice/);
    assert.match(
      problemAt(withService('families: [ipv4, ipv6]\nforwarding: gre'), 'services[0].families').message,
      /ipv6 needs forwarding l2: GRE forwarding is IPv4 only/,
    );
    assert.match(
      problemAt(withService('families: [ipv6]\nassignment: mask'), 'services[0].families').message,
      /ipv6 needs assignment hash/,
    );
    // IPv4 alone keeps GRE and mask as before.
    assert.equal(parseConfig(withService('families: [ipv4]\nforwarding: gre'), 't').services[0]!.forwarding, 'gre');
    // The userland backend's packet I/O is IPv4 only: a service that asks for IPv6 there is refused, by name.
    const userland = (families: string): string =>
      withService(`families: ${families}\nclientInterfaces: [c0]`).replace('backend: none', 'backend: userland');
    assert.match(
      problemAt(userland('[ipv4, ipv6]'), 'services[0].families').message,
      /ipv6 is not redirected by dataplane backend userland: .* IPv4 only \(docs\/userland\.md, "IPv6"\)/,
    );
    assert.deepEqual(parseConfig(userland('[ipv4]'), 't').services[0]!.families, ['ipv4']);
  });

  it('accepts the documented example config and fills what it says', () => {
    const c = parseConfig(DESIGN, 'design.yaml');
    assert.equal(c.file, 'design.yaml');
    assert.deepEqual(c.router, { address: '192.0.2.1', port: 2048 });
    assert.deepEqual(c.admin, {
      listen: { host: '127.0.0.1', port: 8080 },
      token: 'change-me',
      tokenFile: null,
      hosts: [],
      eventClients: 64,
    });
    assert.equal(c.stateDir, '/var/lib/wccpd');
    assert.equal(c.dataplane.backend, 'nft');
    assert.equal(c.timers.hereIAmMs, 10_000);
    assert.equal(c.services.length, 1);
    const s = c.services[0]!;
    assert.equal(s.id, 0);
    assert.equal(s.type, 'standard');
    assert.equal(s.protocol, 'tcp');
    assert.deepEqual(s.ports, [80]);
    assert.equal(s.priority, 240);
    assert.equal(s.password, 'secret');
    assert.equal(s.forwarding, 'l2');
    assert.equal(s.return, 'l2');
    assert.equal(s.assignment, 'hash');
    assert.equal(s.authority, 'appliance');
    assert.equal(s.mode, 'balance');
    assert.equal(s.failMode, 'open');
    assert.deepEqual(s.clientInterfaces, ['c0']);
    assert.deepEqual(s.families, ['ipv4'], 'absent: IPv4 only, as before families existed');
    assert.deepEqual(
      s.engines.allow.map((a) => a.text),
      ['192.0.2.0/24'],
    );
    assert.equal(s.engines.lenientReceiveId, 2);
  });

  it('fills defaults for everything optional', () => {
    const c = parseConfig(MINIMAL, 'm.yaml');
    assert.equal(c.router.port, 2048);
    assert.deepEqual(c.admin.listen, { host: '127.0.0.1', port: 8080 });
    assert.equal(c.admin.token, null);
    assert.equal(c.logging.level, 'info');
    assert.equal(c.timers.hereIAmMs, 10_000);
    assert.deepEqual(c.health.http, {
      enabled: true,
      intervalMs: 50,
      timeoutMs: 400,
      rise: 3,
      fall: 16,
      hardFall: 2,
      port: 3128,
    });
    assert.deepEqual(c.health.tcp, {
      enabled: false,
      intervalMs: 50,
      timeoutMs: 400,
      rise: 3,
      fall: 16,
      hardFall: 2,
      port: 3128,
    });
    assert.equal(c.health.icp.port, 3130);
    assert.equal(c.health.icmp.port, null);
    const s = c.services[0]!;
    assert.equal(s.password, null);
    assert.equal(s.historyWindowMs, 600_000);
    assert.equal(s.engines.lenientReceiveId, 2);
    assert.deepEqual(s.peers, []);
    assert.deepEqual(s.weights, {});
    assert.deepEqual(s.quirks, []);
  });

  it('reads every optional key an admin may set', () => {
    const text = `
router: { address: 192.0.2.1, port: 12048 }
admin: { listen: 127.0.0.1:0, token: t0k }
logging: { level: debug }
stateDir: ./var/lib/wccpd
dataplane: { backend: userland }
timers: { hereIAm: 1m30s }
health:
  icp: { enabled: true, interval: 2s, timeout: 500ms, rise: 3, fall: 4, port: 13130 }
  icmp: { enabled: true }
services:
  - id: 51
    protocol: udp
    ports: [53, 5353]
    priority: 200
    mode: primary-standby
    failbackHold: 1h
    historyWindow: 5m
    peers: [192.0.2.2, 192.0.2.3]
    weights: { 192.0.2.11: 3, 192.0.2.12: 0 }
    clientInterfaces: [eth1, c0]
    quirks: [squid-capability-stride]
    engines: { allow: [192.0.2.0/25, 198.51.100.7], lenientReceiveId: 0 }
  - id: 0
    mode: round-robin
    clientInterfaces: [c0]
    engines: { allow: [192.0.2.0/24] }
`;
    const c = parseConfig(text, 'full.yaml');
    assert.equal(c.router.port, 12048);
    assert.deepEqual(c.admin.listen, { host: '127.0.0.1', port: 0 });
    assert.equal(c.logging.level, 'debug');
    assert.equal(c.stateDir, './var/lib/wccpd');
    assert.equal(c.timers.hereIAmMs, 90_000);
    assert.deepEqual(c.health.icp, {
      enabled: true,
      intervalMs: 2000,
      timeoutMs: 500,
      rise: 3,
      fall: 4,
      hardFall: 2,
      port: 13130,
    });
    assert.equal(c.health.icmp.enabled, true);
    const s = c.services[0]!;
    assert.equal(s.type, 'dynamic');
    assert.equal(s.protocol, 'udp');
    assert.deepEqual(s.ports, [53, 5353]);
    assert.equal(s.priority, 200);
    assert.equal(s.mode, 'primary-standby');
    assert.equal(s.failbackHoldMs, 3_600_000);
    assert.equal(s.historyWindowMs, 300_000);
    assert.deepEqual(s.peers, ['192.0.2.2', '192.0.2.3']);
    assert.deepEqual(s.weights, { '192.0.2.11': 3, '192.0.2.12': 0 });
    assert.deepEqual(s.quirks, ['squid-capability-stride']);
    assert.deepEqual(
      s.engines.allow.map((a) => a.text),
      ['192.0.2.0/25', '198.51.100.7/32'],
    );
    assert.equal(s.engines.lenientReceiveId, 0);
    assert.equal(c.services[1]!.mode, 'round-robin');
  });

  it('names an unknown key, suggests the likely spelling, and gives its line', () => {
    const p = problemAt(withService('failmode: open'), 'services[0].failmode');
    assert.match(p.message, /unknown key \(did you mean "failMode"\?\)/);
    assert.equal(p.line, 8);
    assert.match(problemAt(MINIMAL + 'colour: blue\n', 'colour').message, /unknown key; allowed here: router, admin/);
  });

  it('rejects bad durations with what was found and what is allowed', () => {
    assert.match(
      problemAt(MINIMAL + 'timers: { hereIAm: 10 }\n', 'timers.hereIAm').message,
      /number 10 is not a duration \(a bare number has no unit.*use a number with ms, s, m or h/,
    );
    assert.match(
      problemAt(MINIMAL + 'timers: { hereIAm: 10 sec }\n', 'timers.hereIAm').message,
      /"10 sec" is not a duration/,
    );
    assert.match(
      problemAt(MINIMAL + 'timers: { hereIAm: 20m }\n', 'timers.hereIAm').message,
      /"20m" is out of range; allowed 100ms to 10m/,
    );
    assert.match(
      problemAt(withService('historyWindow: soon'), 'services[0].historyWindow').message,
      /"soon" is not a duration/,
    );
  });

  it('rejects bad IPv4 addresses and CIDR blocks', () => {
    assert.match(
      problemAt(MINIMAL.replace('192.0.2.1', '192.0.2.256'), 'router.address').message,
      /"192.0.2.256" is not an IPv4 address/,
    );
    assert.match(
      problemAt(MINIMAL.replace('192.0.2.1', '192.0.02.1'), 'router.address').message,
      /not an IPv4 address/,
    );
    assert.match(
      problemAt(MINIMAL.replace('192.0.2.0/24', '192.0.2.0/33'), 'services[0].engines.allow[0]').message,
      /prefix length must be 0-32/,
    );
    assert.match(
      problemAt(MINIMAL.replace('192.0.2.0/24', '192.0.2.1/24'), 'services[0].engines.allow[0]').message,
      /host bits set; did you mean 192.0.2.0\/24\?/,
    );
    assert.match(
      problemAt(MINIMAL.replace('192.0.2.0/24', 'lan'), 'services[0].engines.allow[0]').message,
      /"lan" is not an IPv4 address/,
    );
    assert.match(problemAt(withService('peers: [192.0.2.1]'), 'services[0].peers[0]').message, /is this router/);
    assert.match(
      problemAt(withService('weights: { 203.0.113.9: 2 }'), 'services[0].weights.203.0.113.9').message,
      /outside engines.allow/,
    );
    assert.match(
      problemAt(MINIMAL + 'admin: { listen: "localhost:80" }\n', 'admin.listen').message,
      /not an IPv4 address and port/,
    );
  });

  it("reads the peer gateways (address and admin API) and lists them in every service's Router View", () => {
    const c = parseConfig(
      withService('peers: [192.0.2.9]') +
        `peers:
  - { address: 192.0.2.2, api: "http://192.0.2.2:8080/" }
  - { address: 192.0.2.9, api: "https://gw3.example:8443" }
`,
      'peers.yaml',
    );
    assert.deepEqual(c.peers, [
      { address: '192.0.2.2', api: 'http://192.0.2.2:8080' },
      { address: '192.0.2.9', api: 'https://gw3.example:8443' },
    ]);
    assert.deepEqual(c.services[0]!.peers, ['192.0.2.9', '192.0.2.2'], "the service's own peers first, no duplicate");
    assert.deepEqual(parseConfig(MINIMAL, 'm.yaml').peers, []);
    const peers = (lines: string): string => `${MINIMAL}peers:\n${lines}`;
    assert.match(
      problemAt(peers('  - { address: 192.0.2.1, api: "http://x:1" }\n'), 'peers[0].address').message,
      /is this router/,
    );
    assert.match(
      problemAt(peers('  - { address: 192.0.2.2 }\n'), 'peers[0].api').message,
      /is required: the peer's admin API/,
    );
    assert.match(problemAt(peers('  - { api: "http://x:1" }\n'), 'peers[0].address').message, /is required/);
    assert.match(
      problemAt(peers('  - { address: 192.0.2.2, api: "ftp://x" }\n'), 'peers[0].api').message,
      /not an http\(s\) URL/,
    );
    assert.match(
      problemAt(peers('  - { address: 192.0.2.2, api: "192.0.2.2:8080" }\n'), 'peers[0].api').message,
      /not an http\(s\) URL/,
    );
    assert.match(
      problemAt(
        peers('  - { address: 192.0.2.2, api: "http://a:1" }\n  - { address: 192.0.2.2, api: "http://b:1" }\n'),
        'peers[1].address',
      ).message,
      /listed twice/,
    );
    assert.match(
      problemAt(peers('  - { address: 192.0.2.2, api: "http://a:1", token: x }\n'), 'peers[0].token').message,
      /unknown key/,
    );
  });

  it('rejects values outside an enumeration, listing the allowed ones', () => {
    assert.match(
      problemAt(withService('failMode: opne'), 'services[0].failMode').message,
      /"opne" is not allowed \(did you mean "open"\?\); use one of: open, closed/,
    );
    assert.match(
      problemAt(withService('mode: fastest'), 'services[0].mode').message,
      /use one of: balance, consistent, primary-standby, round-robin/,
    );
    assert.match(
      problemAt(MINIMAL.replace('backend: none', 'backend: ebpf'), 'dataplane.backend').message,
      /use one of: nft, ingress, userland, none/,
    );
    assert.match(
      problemAt(withService('quirks: [squid-stride]'), 'services[0].quirks[0]').message,
      /not a known quirk; known: squid-capability-stride/,
    );
  });

  it('rejects a password longer than 8 bytes, and an unquoted number', () => {
    assert.match(
      problemAt(withService('password: secret123'), 'services[0].password').message,
      /9 bytes long; .* at most 8/,
    );
    assert.match(problemAt(withService('password: 0123'), 'services[0].password').message, /quote it/);
    assert.equal(parseConfig(withService('password: "12345678"'), 'x').services[0]!.password, '12345678');
  });

  it('rejects well-known service ids other than 0', () => {
    for (const id of ['1', '50']) {
      assert.match(
        problemAt(MINIMAL.replace('id: 0', `id: ${id}`), 'services[0].id').message,
        new RegExp(`well-known service ${id} is not supported; use 0 .* or a dynamic service 51-255`),
      );
    }
    assert.match(problemAt(MINIMAL.replace('id: 0', 'id: 256'), 'services[0].id').message, /found 256/);
  });

  it('needs protocol and ports for a dynamic service, and refuses them for service 0', () => {
    const all = problems(MINIMAL.replace('id: 0', 'id: 90'));
    assert.deepEqual(all.map((p) => p.key).sort(), ['services[0].ports', 'services[0].protocol']);
    assert.match(all.find((p) => p.key === 'services[0].protocol')!.message, /required for dynamic service 90/);
    assert.match(
      problemAt(withService('protocol: tcp\nports: [1, 2, 3, 4, 5, 6, 7, 8, 9]', '90'), 'services[0].ports').message,
      /1 to 8 ports/,
    );
    assert.match(
      problemAt(withService('protocol: tcp\nports: [80, 80]', '90'), 'services[0].ports[1]').message,
      /listed twice/,
    );
    assert.match(problemAt(withService('ports: [8080]'), 'services[0].ports').message, /only to dynamic services/);
  });

  it("reads portsSource and an optional priority for dynamic services (null: the engines' priority)", () => {
    const pair = parseConfig(
      withService('protocol: tcp\nports: [80]\nportsSource: true\npriority: 240', '90'),
      't.yaml',
    ).services[0]!;
    assert.equal(pair.portsSource, true);
    assert.equal(pair.priority, 240);
    const plain = parseConfig(withService('protocol: tcp\nports: [80]', '80'), 't.yaml').services[0]!;
    assert.equal(plain.portsSource, false);
    assert.equal(plain.priority, null);
    assert.equal(parseConfig(MINIMAL, 't.yaml').services[0]!.portsSource, false);
    assert.match(
      problemAt(withService('portsSource: true'), 'services[0].portsSource').message,
      /only to dynamic services/,
    );
    assert.ok(problemAt(withService('protocol: tcp\nports: [80]\nportsSource: 1', '90'), 'services[0].portsSource'));
    assert.ok(problemAt(withService('protocol: tcp\nports: [80]\npriority: 256', '90'), 'services[0].priority'));
  });

  it('rejects duplicate service ids, naming the first one', () => {
    const text = `${MINIMAL}  - id: 0\n    engines: { allow: [192.0.2.0/24] }\n`;
    assert.match(problemAt(text, 'services[1].id').message, /service 0 is already defined at services\[0\]/);
  });

  it('requires engines.allow, router.address, services and client interfaces for a kernel data plane', () => {
    assert.match(
      problemAt(MINIMAL.replace(/ {4}engines:\n.*\n/, ''), 'services[0].engines.allow').message,
      /is required/,
    );
    assert.match(problemAt('services: []\nrouter: {}\n', 'router.address').message, /is required/);
    assert.match(problemAt('router: { address: 192.0.2.1 }\n', 'services').message, /is required/);
    assert.match(
      problemAt(MINIMAL.replace('backend: none', 'backend: nft'), 'services[0].clientInterfaces').message,
      /required with dataplane backend nft/,
    );
  });

  it('refuses an empty engines.allow instead of letting it mean everyone; 0.0.0.0/0 must be written out', () => {
    const empty = problemAt(MINIMAL.replace('allow: [192.0.2.0/24]', 'allow: []'), 'services[0].engines.allow');
    assert.match(empty.message, /^is empty: list the CIDR blocks engines may register from .*write \[0\.0\.0\.0\/0\]/);
    assert.equal(empty.line, 9);
    const all = parseConfig(MINIMAL.replace('192.0.2.0/24', '0.0.0.0/0'), 'test.yaml');
    assert.deepEqual(
      all.services[0]!.engines.allow.map((c) => [c.text, c.prefixLength]),
      [['0.0.0.0/0', 0]],
    );
  });

  it('reads admin.hosts (names, lower case, no port) and admin.eventClients', () => {
    const c = parseConfig(`${MINIMAL}admin: { hosts: [GW1.example.net., 192.0.2.1], eventClients: 8 }\n`, 'test.yaml');
    assert.deepEqual([c.admin.hosts, c.admin.eventClients], [['gw1.example.net', '192.0.2.1'], 8]);
    assert.match(
      problemAt(`${MINIMAL}admin: { hosts: ["gw1.example.net:8080"] }\n`, 'admin.hosts[0]').message,
      /without a port/,
    );
    assert.match(problemAt(`${MINIMAL}admin: { hosts: ["*"] }\n`, 'admin.hosts[0]').message, /not a host name/);
    assert.match(
      problemAt(`${MINIMAL}admin: { eventClients: 0 }\n`, 'admin.eventClients').message,
      /whole number from 1 to 10000/,
    );
  });

  it('checks probe knobs and cross-key rules', () => {
    assert.match(
      problemAt(MINIMAL + 'health: { tcp: { interval: 100ms, timeout: 1100ms } }\n', 'health.tcp.timeout').message,
      /at most 10 probes of one engine may be in flight: timeout 1.1s is longer than 10 x interval 100ms/,
    );
    assert.doesNotThrow(
      () => parseConfig(MINIMAL + 'health: { http: { interval: 100ms, timeout: 1s } }\n', 'x.yaml'),
      'overlapping probes are fine',
    );
    assert.match(
      problemAt(MINIMAL + 'health: { icmp: { rise: 0 } }\n', 'health.icmp.rise').message,
      /whole number from 1 to 100; found number 0/,
    );
    assert.ok(problemAt(MINIMAL + 'health: { icmp: { port: 7 } }\n', 'health.icmp.port'), 'ICMP has no port');
    assert.ok(problemAt(MINIMAL + 'health: { tcp: { port: 70000 } }\n', 'health.tcp.port'));
    assert.match(
      problemAt(withService('failbackHold: 10s'), 'services[0].failbackHold').message,
      /only to mode primary-standby/,
    );
    assert.match(problemAt(MINIMAL + 'admin: { token: a, tokenFile: /x }\n', 'admin.tokenFile').message, /not both/);
  });

  it('reports every problem at once, in file order', () => {
    const text = `
router:
  address: 192.0.2.300
timers:
  hereIAm: fast
services:
  - id: 7
    password: much-too-long
    failMode: sideways
    enginez: {}
`;
    const all = problems(text, '/etc/wccpd/wccpd.yaml');
    const keys = all.map((p) => p.key);
    for (const k of [
      'router.address',
      'timers.hereIAm',
      'services[0].id',
      'services[0].password',
      'services[0].failMode',
      'services[0].enginez',
      'services[0].engines.allow',
    ]) {
      assert.ok(keys.includes(k), `missing ${k} in ${keys.join(', ')}`);
    }
    const lines = all.map((p) => p.line ?? Infinity);
    assert.deepEqual(
      lines,
      [...lines].sort((a, b) => a - b),
    );
    try {
      parseConfig(text, '/etc/wccpd/wccpd.yaml');
    } catch (e) {
      assert.ok(e instanceof ConfigError);
      assert.match(e.message, /^\/etc\/wccpd\/wccpd.yaml: \d+ configuration problems:\n/);
      assert.match(e.message, /\n\/etc\/wccpd\/wccpd.yaml: services\[0\].failMode: "sideways" is not allowed/);
    }
  });

  it('reports YAML syntax errors and duplicate keys with a line', () => {
    const p = problems('router:\n  address: 192.0.2.1\n  address: 192.0.2.2\n');
    assert.equal(p[0]!.key, '(yaml)');
    assert.match(p[0]!.message, /unique/i);
    assert.equal(p[0]!.line, 3);
    assert.equal(problems('services: [\n')[0]!.key, '(yaml)');
    assert.match(problemAt('- just\n- a list\n', '(top level)').message, /must be a mapping/);
  });

  it('reads maintenance windows and refuses bad cron text, naming the key', () => {
    const c = parseConfig(
      MINIMAL +
        `    maintenance:
      - { cron: "0 2 * * sun", duration: 1h, action: drain, engine: 192.0.2.11 }
      - { cron: "*/10 * * * * *", duration: 3s, timezone: UTC }
`,
      'x.yaml',
    );
    assert.deepEqual(c.services[0]?.maintenance, [
      { cron: '0 2 * * sun', durationMs: 3_600_000, action: 'drain', engine: '192.0.2.11', timezone: null },
      { cron: '*/10 * * * * *', durationMs: 3000, action: 'drain', engine: null, timezone: 'UTC' },
    ]);
    assert.match(
      problemAt(
        MINIMAL + '    maintenance: [{ cron: "0 25 * * sun", duration: 1h }]\n',
        'services[0].maintenance[0].cron',
      ).message,
      /"0 25 \* \* sun" is not a valid cron expression \(hour "25": /,
    );
    assert.match(
      problemAt(
        MINIMAL + '    maintenance: [{ cron: "sunday at two", duration: 1h }]\n',
        'services[0].maintenance[0].cron',
      ).message,
      /has 3 fields; a cron expression has 5/,
    );
    assert.ok(
      problemAt(MINIMAL + '    maintenance: [{ cron: "0 2 * * sun" }]\n', 'services[0].maintenance[0].duration'),
    );
    assert.match(
      problemAt(
        MINIMAL + '    maintenance: [{ cron: "0 2 * * sun", duration: 1h, action: reboot }]\n',
        'services[0].maintenance[0].action',
      ).message,
      /the one action is drain/,
    );
    assert.match(
      problemAt(
        MINIMAL + '    maintenance: [{ cron: "0 2 * * sun", duration: 1h, engine: 198.51.100.1 }]\n',
        'services[0].maintenance[0].engine',
      ).message,
      /outside engines.allow/,
    );
    assert.ok(
      problemAt(
        MINIMAL + '    maintenance: [{ cron: "0 2 * * sun", duration: 1h, timezone: Mars/Olympus }]\n',
        'services[0].maintenance[0].timezone',
      ),
    );
  });
});

describe('dataplane backend ingress', () => {
  const ingress = (dataplane: string, service = ''): string =>
    withService(`clientInterfaces: [c0]${service ? `\n${service}` : ''}`).replace(
      'dataplane:\n  backend: none',
      `dataplane: ${dataplane}`,
    );

  it('is accepted, with the flow map at its defaults unless dataplane.flows says otherwise', () => {
    const c = parseConfig(ingress('{ backend: ingress }'), 't.yaml');
    assert.equal(c.dataplane.backend, 'ingress');
    assert.deepEqual(c.dataplane.flows, { max: 262_143, idleMs: 600_000 });
    assert.deepEqual(c.deprecated, []);
    const set = parseConfig(ingress('{ backend: ingress, flows: { max: 4096, idle: 30s } }'), 't.yaml');
    assert.deepEqual(set.dataplane.flows, { max: 4096, idleMs: 30_000 });
    assert.deepEqual(set.deprecated, []);
    for (const [idle, ms] of [
      ['10s', 10_000],
      ['1m30s', 90_000],
      ['10m', 600_000],
      ['24h', 86_400_000],
    ] as const)
      assert.equal(
        parseConfig(ingress(`{ backend: ingress, flows: { idle: ${idle} } }`), 't.yaml').dataplane.flows.idleMs,
        ms,
        idle,
      );
    // The other backends carry the defaults, unused.
    assert.deepEqual(parseConfig(ingress('{ backend: nft }'), 't.yaml').dataplane.flows, {
      max: 262_143,
      idleMs: 600_000,
    });
  });

  it('still reads the old idleSeconds (a bare number of seconds), with a deprecation warning naming idle', () => {
    const text = ingress('\n  backend: ingress\n  flows:\n    idleSeconds: 90');
    const c = parseConfig(text, 't.yaml');
    assert.deepEqual(c.dataplane.flows, { max: 262_143, idleMs: 90_000 });
    assert.equal(c.deprecated.length, 1);
    const d = c.deprecated[0];
    assert.equal(d?.key, 'dataplane.flows.idleSeconds');
    assert.match(d?.message ?? '', /is deprecated \(a bare number of seconds\); write idle: 90s instead/);
    assert.equal(d?.line, text.split('\n').findIndex((l) => l.includes('idleSeconds')) + 1);
    // check-config and the daemon's start say it as a warning.
    assert.deepEqual(configWarnings(c), [d]);
  });

  it('checks the flow map bounds, each with its range', () => {
    for (const [flows, key, want] of [
      ['{ max: 0 }', 'dataplane.flows.max', /whole number from 1 to 16777216; found number 0/],
      ['{ max: 16777217 }', 'dataplane.flows.max', /from 1 to 16777216/],
      ['{ max: 1.5 }', 'dataplane.flows.max', /whole number/],
      ['{ max: "many" }', 'dataplane.flows.max', /whole number/],
      ['{ idle: 600 }', 'dataplane.flows.idle', /number 600 is not a duration \(a bare number has no unit/],
      ['{ idle: soon }', 'dataplane.flows.idle', /"soon" is not a duration; use a number with ms, s, m or h/],
      ['{ idle: 9s }', 'dataplane.flows.idle', /"9s" is out of range; allowed 10s to 24h/],
      ['{ idle: 25h }', 'dataplane.flows.idle', /out of range; allowed 10s to 24h/],
      ['{ idle: 10500ms }', 'dataplane.flows.idle', /"10500ms" is not a whole number of seconds/],
      ['{ idle: 10m, idleSeconds: 600 }', 'dataplane.flows.idleSeconds', /give idle or idleSeconds, not both/],
      ['{ idleSeconds: 9 }', 'dataplane.flows.idleSeconds', /whole number from 10 to 86400; found number 9/],
      ['{ idleSeconds: 86401 }', 'dataplane.flows.idleSeconds', /from 10 to 86400/],
      ['{ idleSeconds: 1.5 }', 'dataplane.flows.idleSeconds', /whole number/],
      [
        '{ idleSeconds: 600s }',
        'dataplane.flows.idleSeconds',
        /a bare number of seconds \(deprecated\); .* idle: 600s/,
      ],
      ['{ idel: 10m }', 'dataplane.flows.idel', /did you mean "idle"/],
    ] as const) {
      assert.match(problemAt(ingress(`{ backend: ingress, flows: ${flows} }`), key).message, want, flows);
    }
  });

  it('refuses flows with another backend, and conntrack with ingress', () => {
    assert.match(
      problemAt(ingress('{ backend: nft, flows: { max: 10 } }'), 'dataplane.flows').message,
      /applies to the ingress backend only \(backend is nft, whose connections are held by conntrack\)/,
    );
    assert.match(
      problemAt(ingress('{ backend: userland, flows: { max: 10 } }'), 'dataplane.flows').message,
      /applies to the ingress backend only \(backend is userland\)/,
    );
    assert.match(
      problemAt(ingress('{ flows: { idleSeconds: 60 } }'), 'dataplane.flows').message,
      /backend is nft/,
      'nft is the default backend',
    );
    assert.match(
      problemAt(ingress('{ backend: ingress, conntrack: services }'), 'dataplane.conntrack').message,
      /applies to the nft backend only \(backend is ingress, which needs no conntrack\)/,
    );
  });

  it('refuses a GRE service, saying why and what works', () => {
    const p = problemAt(ingress('{ backend: ingress }', 'forwarding: gre'), 'services[0].forwarding');
    assert.match(
      p.message,
      /gre is not supported by dataplane backend ingress: it hands each packet to its engine at layer 2/,
    );
    assert.match(p.message, /use forwarding l2 .* or backend nft or userland for GRE/);
    assert.equal(p.line, 8, "the line of the service's forwarding key");
    // The same service is fine with nft, and an l2 one with ingress.
    assert.equal(parseConfig(ingress('{ backend: nft }', 'forwarding: gre'), 't.yaml').services[0]?.forwarding, 'gre');
    assert.equal(
      parseConfig(ingress('{ backend: ingress }', 'forwarding: l2'), 't.yaml').services[0]?.forwarding,
      'l2',
    );
  });

  it('needs clientInterfaces, as nft does', () => {
    assert.match(
      problemAt(MINIMAL.replace('backend: none', 'backend: ingress'), 'services[0].clientInterfaces').message,
      /required with dataplane backend ingress/,
    );
  });
});
