// What a reload (SIGHUP, `systemctl reload wccpd`) may change in a running wccpd, as ONE table: every key of the
// parsed config is either applied live or needs a restart. The daemon applies the live differences; a reload that
// changes any restart key is refused whole. docs/operations.md ("Reload") lists the same table, and
// test/config/reload.test.ts holds both the table (every Config field is classified) and the docs to it.
import { isDeepStrictEqual } from 'node:util';
import type { ConfigProblem } from './config-error.js';
import type { Config, ServiceConfig } from './types.js';

/** `live`: applied by a reload; `restart`: only a restart of wccpd changes it (the reload is refused). */
export type ReloadClass = 'live' | 'restart';

export interface ReloadKey {
  /** The key as the file names it (`admin.token`; under `services[i].` for a service's). */
  readonly key: string;
  /** Where the parsed config holds it (Config or ServiceConfig), when it is named otherwise. */
  readonly field?: string;
  readonly class: ReloadClass;
  /** What a reload does with it, or why it needs a restart. */
  readonly why: string;
}

/** The top-level keys. `services` is the list: a service added or removed is live; each one's keys are below. */
export const RELOAD_KEYS: readonly ReloadKey[] = [
  { key: 'router.address', class: 'restart', why: 'the WCCP socket is bound to it at start' },
  { key: 'router.port', class: 'restart', why: 'the WCCP socket is bound to it at start' },
  { key: 'admin.listen', class: 'restart', why: 'the admin API is bound to it at start' },
  { key: 'admin.token', class: 'live', why: 'changes are checked against the new token at once' },
  { key: 'admin.tokenFile', class: 'live', why: 'read again at every reload; its token applies at once' },
  { key: 'admin.hosts', class: 'live', why: 'the Host check uses the new names at once' },
  { key: 'admin.eventClients', class: 'live', why: 'the new cap holds for new event-stream clients' },
  { key: 'logging.level', class: 'live', why: 'the next line is written at the new level' },
  { key: 'logging.format', class: 'restart', why: 'the log stream is opened at start' },
  { key: 'stateDir', class: 'restart', why: 'the state file and the data plane ownership record live there' },
  { key: 'dataplane.backend', class: 'restart', why: 'the data plane is started at start' },
  { key: 'dataplane.conntrack', class: 'restart', why: 'the data plane is started at start' },
  { key: 'dataplane.flows', class: 'restart', why: 'the data plane is started at start' },
  {
    key: 'timers.hereIAm',
    field: 'timers.hereIAmMs',
    class: 'live',
    why: 'removal (3 x) and REMOVAL_QUERY (2.5 x) count with the new value from the next tick; no bucket moves',
  },
  {
    key: 'timers.settle',
    field: 'timers.settleMs',
    class: 'live',
    why: 'the next table change waits by the new value; no bucket moves',
  },
  {
    key: 'health',
    class: 'live',
    why: 'the probes start again with the new settings; each engine keeps its verdict until the new probes decide',
  },
  { key: 'warmup.listen', class: 'restart', why: 'the warm-up broker is bound to it at start' },
  { key: 'warmup.icpPort', class: 'restart', why: 'the warm-up broker is bound to it at start' },
  { key: 'warmup.httpPort', class: 'restart', why: 'the warm-up broker is bound to it at start' },
  { key: 'warmup.maxRelayRate', class: 'live', why: 'the relays that start after the reload keep to the new rate' },
  {
    key: 'warmup.maxObjectSize',
    field: 'warmup.maxObjectBytes',
    class: 'live',
    why: 'the relays that start after the reload keep to the new size',
  },
  { key: 'peers', class: 'live', why: 'the peer checks read the new list; each service lists the new addresses' },
  {
    key: 'services',
    class: 'live',
    why: 'a service added is started (its engines register), a service removed is stopped and its redirection removed',
  },
];

/** A service's keys; `id` is what tells services apart (a changed id is one removed and one added). */
export const SERVICE_RELOAD_KEYS: readonly ReloadKey[] = [
  ...(['protocol', 'ports', 'portsSource', 'priority'] as const).map((key): ReloadKey => ({
    key,
    class: 'restart',
    why: 'the service definition is agreed with its engines',
  })),
  ...(['forwarding', 'return', 'assignment'] as const).map((key): ReloadKey => ({
    key,
    class: 'restart',
    why: 'the method is negotiated with its engines',
  })),
  { key: 'authority', class: 'restart', why: 'who decides the table is set when the service starts' },
  { key: 'mode', class: 'restart', why: 'the assignment strategy is set when the service starts' },
  { key: 'failMode', class: 'live', why: 'the data plane applies the new fail mode' },
  { key: 'password', class: 'live', why: 'the next datagram is checked with the new password' },
  { key: 'clientInterfaces', class: 'live', why: 'the data plane redirects on the new interfaces' },
  {
    key: 'families',
    class: 'live',
    why: "the data plane redirects the new families' new connections from the next apply",
  },
  { key: 'peers', class: 'live', why: 'the next I_SEE_YOU lists the new routers' },
  {
    key: 'weights',
    class: 'live',
    why: 'the table is assigned again with the new weights: only the buckets the new shares need move',
  },
  { key: 'failbackHold', field: 'failbackHoldMs', class: 'live', why: 'the next failback waits by the new value' },
  {
    key: 'historyWindow',
    field: 'historyWindowMs',
    class: 'live',
    why: "a departed engine's buckets are kept by the new value",
  },
  { key: 'engines.allow', class: 'live', why: 'the next datagram is checked against the new list' },
  { key: 'engines.lenientReceiveId', class: 'live', why: 'the next HERE_I_AM is counted against the new value' },
  { key: 'quirks', class: 'live', why: 'the next I_SEE_YOU is encoded with the new quirks' },
  {
    key: 'warmup',
    class: 'live',
    why: "the warm-up policy decides by the new settings from its next decision on (a running warm-up's end too)",
  },
  ...(['loadAware.enabled', 'loadAware.measure', 'loadAware.window'] as const).map((key): ReloadKey => ({
    key,
    ...(key === 'loadAware.window' ? { field: 'loadAware.windowMs' } : {}),
    class: 'restart',
    why: "the windows' counters and epochs are set when the service starts",
  })),
  {
    key: 'loadAware.tolerance',
    class: 'live',
    why: 'the next window decides by the new tolerance; no bucket moves before it ends',
  },
  { key: 'loadAware.maxMovesPerHour', class: 'live', why: "the next window's moves keep to the new budget" },
  {
    key: 'loadAware.hold',
    field: 'loadAware.holdMs',
    class: 'live',
    why: 'the next window holds moved buckets by the new value',
  },
  { key: 'loadAware.minConnections', class: 'live', why: 'the next window is measured against the new floor' },
  {
    key: 'maintenance',
    class: 'live',
    why: 'a window unchanged runs on; one changed or gone stops (its drain ends) and a changed or new one starts as at a start',
  },
];

/** Fields of the parsed config no reload compares: where it was read from, and what follows from the id. */
export const NOT_COMPARED = {
  config: ['file', 'deprecated'] as readonly (keyof Config)[],
  service: ['id', 'type', 'name'] as readonly (keyof ServiceConfig)[],
};

/** What a reload would change: the live keys that differ, the restart keys that differ, the services added/removed. */
export interface ConfigDiff {
  /** Live keys that differ, as the file names them (`admin.token`, `services[1].weights`, `services[2]` added). */
  readonly changed: readonly string[];
  /** One problem per restart key that differs: the reload is refused. */
  readonly restart: readonly ConfigProblem[];
  readonly added: readonly number[];
  readonly removed: readonly number[];
  /** Services in both whose live keys differ. */
  readonly reconfigured: readonly number[];
}

function at(value: unknown, path: string): unknown {
  let v = value;
  for (const part of path.split('.'))
    v = v === null || typeof v !== 'object' ? undefined : (v as Record<string, unknown>)[part];
  return v;
}

function differs(a: unknown, b: unknown, k: ReloadKey): boolean {
  const field = k.field ?? k.key;
  return !isDeepStrictEqual(at(a, field), at(b, field));
}

function restartProblem(key: string, k: ReloadKey, service?: number): ConfigProblem {
  const what = service === undefined ? 'changed' : `changed in service ${service}`;
  return { key, message: `${what}; restart wccpd to change it (${k.why})` };
}

/** The differences between the running config and the one a reload read, by the tables above. */
export function configDiff(running: Config, next: Config): ConfigDiff {
  const changed: string[] = [];
  const restart: ConfigProblem[] = [];
  for (const k of RELOAD_KEYS) {
    if (k.key === 'services' || !differs(running, next, k)) continue;
    if (k.class === 'live') changed.push(k.key);
    else restart.push(restartProblem(k.key, k));
  }
  const before = new Map(running.services.map((s) => [s.id, s]));
  const after = new Set(next.services.map((s) => s.id));
  const added: number[] = [];
  const reconfigured: number[] = [];
  next.services.forEach((s, i) => {
    const old = before.get(s.id);
    if (old === undefined) {
      added.push(s.id);
      changed.push(`services[${i}] (service ${s.id} added)`);
      return;
    }
    let live = false;
    for (const k of SERVICE_RELOAD_KEYS) {
      if (!differs(old, s, k)) continue;
      const key = `services[${i}].${k.key}`;
      if (k.class === 'live') {
        live = true;
        changed.push(`${key} (service ${s.id})`);
      } else restart.push(restartProblem(key, k, s.id));
    }
    if (live) reconfigured.push(s.id);
  });
  const removed = running.services.filter((s) => !after.has(s.id)).map((s) => s.id);
  for (const id of removed) changed.push(`service ${id} removed`);
  return { changed, restart, added, removed, reconfigured };
}
