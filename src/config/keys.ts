// Every key the configuration file may hold, as a tree: the parser accepts exactly these (an unknown key is an error
// with a did-you-mean), and test/config/config-doc.test.ts holds docs/config.md to the same list. A list of
// mappings is named with `[]` (`services[]`); a leaf is `true`.
type KeyTree = { readonly [name: string]: KeyTree | true };

const PROBE = { enabled: true, interval: true, timeout: true, rise: true, fall: true, hardFall: true } as const;

export const CONFIG_KEYS = {
  router: { address: true, port: true },
  admin: { listen: true, token: true, tokenFile: true, hosts: true, eventClients: true },
  logging: { level: true, format: true },
  stateDir: true,
  dataplane: { backend: true, conntrack: true, flows: { max: true, idle: true } },
  timers: { hereIAm: true, settle: true },
  health: {
    http: { ...PROBE, port: true },
    icp: { ...PROBE, port: true },
    tcp: { ...PROBE, port: true },
    icmp: PROBE,
  },
  warmup: { listen: true, icpPort: true, httpPort: true, maxRelayRate: true, maxObjectSize: true },
  'services[]': {
    id: true,
    password: true,
    protocol: true,
    ports: true,
    portsSource: true,
    priority: true,
    forwarding: true,
    return: true,
    assignment: true,
    authority: true,
    mode: true,
    failMode: true,
    clientInterfaces: true,
    families: true,
    peers: true,
    weights: true,
    failbackHold: true,
    historyWindow: true,
    engines: { allow: true, lenientReceiveId: true },
    quirks: true,
    warmup: {
      enabled: true,
      duration: true,
      maxPeerHits: true,
      minHitRatio: true,
      window: true,
      peerTimeout: true,
      source: true,
      minSourceHold: true,
    },
    loadAware: {
      enabled: true,
      measure: true,
      window: true,
      tolerance: true,
      maxMovesPerHour: true,
      hold: true,
      minConnections: true,
    },
    maintenance: { 'maintenance[]': { cron: true, duration: true, action: true, engine: true, timezone: true } },
  },
  'peers[]': { address: true, api: true },
} as const satisfies KeyTree;

function names(tree: KeyTree): string[] {
  return Object.keys(tree).map((k) => k.replace(/\[\]$/, ''));
}

/** The keys a section may hold, by its dotted path without list indices: `''` (the top), `services.engines`. */
export function sectionKeys(path: string): string[] {
  let tree: KeyTree = CONFIG_KEYS;
  for (const part of path === '' ? [] : path.split('.')) {
    const next: KeyTree | true | undefined = tree[part] ?? tree[`${part}[]`];
    if (next === undefined || next === true) throw new Error(`no config section ${path}`);
    // A key holding only a list of mappings (`maintenance: [...]`): its items' keys.
    const only = Object.keys(next);
    tree = only.length === 1 && only[0]!.endsWith('[]') ? (next[only[0]!] as KeyTree) : next;
  }
  return names(tree);
}

/** Every leaf key as `services[].engines.allow`, `peers[].api`, `health.http.port`. */
export function configKeyPaths(tree: KeyTree = CONFIG_KEYS, prefix = ''): string[] {
  return Object.entries(tree).flatMap(([k, v]) => {
    if (v === true) return [`${prefix}${k}`];
    const only = Object.keys(v);
    if (only.length === 1 && only[0] === `${k}[]`) return configKeyPaths(v[only[0]] as KeyTree, `${prefix}${k}[].`);
    return configKeyPaths(v, `${prefix}${k}.`);
  });
}
